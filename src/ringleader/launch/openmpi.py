"""Which Open MPI the job's mpirun is: asked once per job, on the leader, with a bound.

Open MPI 4 (ORTE: orted, orte_* parameters, the vader BTL) and Open MPI 5 (PRRTE: prted,
prte_* parameters, the sm BTL with single copy in its own smsc framework) take different
options; `launch/mpirun.py` builds each one's from the version found here.
"""

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ringleader.core.errors import ConfigError

VERSION_TIMEOUT = 10.0  # seconds for `mpirun --version` (it answers in well under one)

_VERSION = re.compile(r"\(Open MPI\)\s+(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class OpenMpiVersion:
    major: int
    minor: int
    patch: int = 0

    @property
    def prrte(self) -> bool:
        """Open MPI 5 and later run on PRRTE instead of ORTE."""
        return self.major >= 5

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


# What the options are built for when mpirun does not tell (it is not Open MPI, or it does not
# answer): the Open MPI of ringleader's own image.
ASSUMED = OpenMpiVersion(4, 1, 0)


def parse_mpirun_version(text: str) -> OpenMpiVersion | None:
    """The version in `mpirun --version`'s output ("mpirun (Open MPI) 5.0.7"; vendor builds
    such as HPC-X say "4.1.5rc2"); None when it is not Open MPI's."""
    found = _VERSION.search(text)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return OpenMpiVersion(int(major), int(minor), int(patch or 0))


Runner = Callable[[Sequence[str], float], str]  # (argv, timeout) -> output; raises OSError


def _run(argv: Sequence[str], timeout: float) -> str:
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise OSError(f"no answer within {timeout:g} s") from error
    return done.stdout.decode(errors="replace")


def detect_open_mpi(
    log: Callable[[str], None],
    mpirun: str = "mpirun",
    timeout: float = VERSION_TIMEOUT,
    run: Runner = _run,
) -> OpenMpiVersion:
    """The Open MPI of `mpirun`. When it cannot be told, a warning says so and the options are
    built for ASSUMED; an image without mpirun is a configuration error naming the fix."""
    try:
        output = run([mpirun, "--version"], timeout)
    except FileNotFoundError:
        raise ConfigError(
            "image",
            f"an mpi job starts its ranks with Open MPI's {mpirun}, but this image has none on "
            "PATH: install Open MPI (Debian/Ubuntu: openmpi-bin) or put its bin directory on "
            "PATH, then run `ringleader image setup` again; `ringleader image check IMAGE` lists "
            "what each distribution needs",
        ) from None
    except OSError as error:
        log(
            f"warning: `{mpirun} --version` failed ({error.strerror or error}); "
            f"mpirun's options are built for Open MPI {ASSUMED}"
        )
        return ASSUMED
    version = parse_mpirun_version(output)
    if version is None:
        first = next((line.strip() for line in output.splitlines() if line.strip()), "")
        log(
            f"warning: {mpirun} is not Open MPI's ({first[:120]!r}); ringleader passes Open MPI "
            f"{ASSUMED}'s options to it"
        )
        return ASSUMED
    return version
