"""The error of bad `ringleader local` arguments (exit code 2, nothing started)."""


class UsageError(Exception):
    """Bad `ringleader local` arguments; the message says which and what was expected."""
