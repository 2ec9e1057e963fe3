"""When a process started, as wall-clock time, to the clock tick (Linux /proc).

psutil's create_time adds the start to the boot time, which the kernel gives in whole seconds:
marks made from it came out up to a second before the events that caused them. Here the age
of the process is measured on the boot-time clock instead and taken from the time now.
"""

import os
import time
from pathlib import Path

_STARTTIME_FIELD = 19  # field 22 of /proc/PID/stat, counted from the field after "(comm)"


def start_ticks(pid: int | None = None) -> int | None:
    """Clock ticks after boot at which process `pid` (this one by default) started; with the
    PID it names one process for good (a PID alone may be reused). None when it is gone."""
    try:
        stat = Path(f"/proc/{pid or 'self'}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[_STARTTIME_FIELD])
    except (OSError, ValueError, IndexError):
        return None


def process_started_at(pid: int | None = None) -> float | None:
    """time.time() at which process `pid` (this one by default) started; None when unknown."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
