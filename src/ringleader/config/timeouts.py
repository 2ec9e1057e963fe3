"""Every wait of a job, bounded: the one set of defaults, and the hyperparameters that set them.

A module of its own so that what only needs a default (the rank wrapper's options) does not
import the whole job configuration.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader.config import hyperparameters as hp
from ringleader.core.errors import ConfigError


@dataclass(frozen=True)
class Timeouts:
    """Every wait in the job is bounded by one of these (seconds); each is a hyperparameter."""

    startup: float = 180.0  # ringleader_startup_timeout: hosts, sshd and MPI daemons coming up
    sigterm_grace: float = 30.0  # ringleader_sigterm_grace: SIGTERM to SIGKILL for the ranks
    leader_loss: float = 10.0  # ringleader_leader_timeout: silence before a host counts as lost
    finish: float = 30.0  # ringleader_finish_timeout: telling workers the exit code
    # ringleader_abort_grace: SIGTERM to SIGKILL for bystanders of a failed rank (when mpirun
    # aborts the job, its daemons SIGTERM the wrappers); a stop of the whole job during the
    # abort replaces it with ringleader_sigterm_grace (rank/wrapper.py: terminate).
    abort_grace: float = 0.5
    # ringleader_launcher_exit_timeout: how long the launcher (mpirun) may run on after every
    # rank has ended by itself before it is killed (a wedged MPI daemon must not hold the job)
    launcher_exit: float = 30.0
    # ringleader_hang_timeout: no rank made progress (output, a metric, a heartbeat) for this
    # long: the job hung. Off by default: a job quiet by design must never be killed by one.
    hang: float | None = None
    # ringleader_stack_dump_timeout: how long the leader waits for every rank's stacks
    stack_dump: float = 10.0

    @property
    def progress_interval(self) -> float | None:
        """How often each rank's wrapper reports that it made progress (the hang watch); None
        when there is no hang watch. A fifth of the timeout: progress is late by at most that."""
        return None if self.hang is None else min(max(self.hang / 5, 0.05), 10.0)

    @property
    def pulse_interval(self) -> float:
        """How often leader and workers send each other a pulse (liveness)."""
        return max(self.leader_loss / 4, 0.05)


DEFAULTS = Timeouts()

# The hyperparameter that bounds a silence between hosts, named wherever one is reported.
LEADER_TIMEOUT_KEY = "ringleader_leader_timeout"

# ringleader_* hyperparameter -> Timeouts field
TIMEOUT_KEYS = {
    "ringleader_startup_timeout": "startup",
    "ringleader_sigterm_grace": "sigterm_grace",
    LEADER_TIMEOUT_KEY: "leader_loss",
    "ringleader_finish_timeout": "finish",
    "ringleader_abort_grace": "abort_grace",
    "ringleader_launcher_exit_timeout": "launcher_exit",
    "ringleader_hang_timeout": "hang",
    "ringleader_stack_dump_timeout": "stack_dump",
}


def parse_timeouts(values: Mapping[str, Any], *, lenient: bool = False) -> Timeouts:
    """The timeouts the decoded hyperparameters set, the others at their defaults.

    A value that is not a positive number of seconds is a ConfigError naming its key; with
    `lenient`, it is left at its default instead (for reporting another configuration error
    with the user's valid timeouts)."""
    seconds: dict[str, float] = {}
    for key, target in TIMEOUT_KEYS.items():
        if key not in values:
            continue
        try:
            seconds[target] = hp.as_positive_seconds(key, values[key])
        except ConfigError:
            if not lenient:
                raise
    timeouts = Timeouts(**seconds)
    if timeouts.hang is not None and timeouts.hang < timeouts.pulse_interval:
        if lenient:
            return dataclasses.replace(timeouts, hang=None)
        raise ConfigError(
            "ringleader_hang_timeout",
            f"{timeouts.hang:g} s is shorter than the pulse interval, "
            f"{timeouts.pulse_interval:g} s (a quarter of ringleader_leader_timeout): progress "
            "could not even be heard in time; give at least that",
        )
    return timeouts
