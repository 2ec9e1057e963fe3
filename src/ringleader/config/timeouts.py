"""Every wait of a job, bounded: the one set of defaults, and the hyperparameters that set them.

A module of its own so that what only needs a default (the rank wrapper's options) does not
import the whole job configuration.
"""

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
    # ringleader_abort_grace: SIGTERM to SIGKILL for bystanders of a failed rank; shorter than
    # the 1 s after which mpirun's daemons kill the wrappers, so their records still arrive.
    abort_grace: float = 0.5
    # ringleader_launcher_exit_timeout: how long the launcher (mpirun) may run on after every
    # rank has ended by itself before it is killed (a wedged MPI daemon must not hold the job)
    launcher_exit: float = 30.0

    @property
    def pulse_interval(self) -> float:
        """How often leader and workers send each other a pulse (liveness)."""
        return max(self.leader_loss / 4, 0.05)


DEFAULTS = Timeouts()

# ringleader_* hyperparameter -> Timeouts field
TIMEOUT_KEYS = {
    "ringleader_startup_timeout": "startup",
    "ringleader_sigterm_grace": "sigterm_grace",
    "ringleader_leader_timeout": "leader_loss",
    "ringleader_finish_timeout": "finish",
    "ringleader_abort_grace": "abort_grace",
    "ringleader_launcher_exit_timeout": "launcher_exit",
}


def parse_timeouts(values: Mapping[str, Any], *, lenient: bool = False) -> Timeouts:
    """The timeouts the decoded hyperparameters set, the others at their defaults.

    A value that is not a positive number of seconds is a ConfigError naming its key; with
    `lenient`, it is left at its default instead (for reporting another configuration error
    with the user's valid timeouts)."""
    seconds = {}
    for key, target in TIMEOUT_KEYS.items():
        if key not in values:
            continue
        try:
            seconds[target] = hp.as_positive_seconds(key, values[key])
        except ConfigError:
            if not lenient:
                raise
    return Timeouts(**seconds)
