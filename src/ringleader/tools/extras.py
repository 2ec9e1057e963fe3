"""Which optional packages the host tools need, and the error that names the extra to install.

A training image installs ringleader alone (`pip install ringleader`: boto3, psutil), so the
entry point, `ringleader slurm`, `ringleader cluster`'s agent and `ringleader doctor` run there
without the host tools' packages. A host tool that needs one of them says which extra brings it
instead of a traceback.
"""

from __future__ import annotations

# The top-level module -> the extra that installs it.
EXTRA_OF_MODULE = {
    "docker": "tools",  # the Docker SDK: ringleader local, ringleader doctor local
    "yaml": "tools",  # PyYAML: ringleader stack's template
    "matplotlib": "report",  # ringleader report's charts
}
PACKAGE_OF_MODULE = {"docker": "the Docker SDK", "yaml": "PyYAML", "matplotlib": "matplotlib"}


def missing_extra_message(error: ModuleNotFoundError, command: str) -> str | None:
    """What to tell the user when `command` failed to import a module an extra provides; None
    when the module is no extra's (a real bug: let it raise)."""
    module = (error.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return (
        f"ringleader {command} needs {PACKAGE_OF_MODULE[module]} ({module}), which a plain "
        f"`pip install ringleader` leaves out (it is the training image's lean install): "
        f"pip install 'ringleader[{extra}]'"
    )
