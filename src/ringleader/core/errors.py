"""Errors that end a job with a documented toolkit exit code and a failure file."""

from ringleader.core import exitcodes


class JobError(Exception):
    """An error that ends the job with `exit_code`; `str(self)` goes into the failure file."""

    exit_code = exitcodes.INTERNAL_ERROR


class ConfigError(JobError):
    """A configuration value is wrong. The message names the field and what was expected."""

    exit_code = exitcodes.CONFIG_ERROR

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"Configuration error in {field}: {problem}")
        self.field = field
        self.problem = problem


class StartupError(JobError):
    """A host, its sshd or its MPI daemon did not answer within the startup timeout."""

    exit_code = exitcodes.HOST_UNREACHABLE
