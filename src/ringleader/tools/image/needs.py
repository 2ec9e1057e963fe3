"""What each distribution needs of an image, and how to add what is missing (pure)."""

from dataclasses import dataclass

from ringleader.config.image import python_range, supported_python
from ringleader.config.job import (
    MPI,
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
    TORCH_DISTRIBUTED,
)
from ringleader.tools.image.probe import ImageFacts, PythonFacts

# The tools an mpi job needs: mpirun starts every rank over ssh into each host's sshd, with
# keys every host makes when the job starts.
MPI_TOOLS = ("sshd", "ssh", "ssh-keygen", "mpirun")

_WHY = {
    "sshd": "mpirun starts the ranks of other hosts over ssh, so every host runs sshd",
    "ssh": "mpirun on the leader connects to every host with ssh",
    "mpirun": "mpi jobs start their ranks with Open MPI's mpirun",
    "ssh-keygen": "every host of an mpi job makes the job's own ssh keys with it when the job "
    "starts",
}

# Package names by distribution family, and the install command of each.
_PACKAGES = {
    "debian": {
        "sshd": "openssh-server",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
        "mpirun": "openmpi-bin",
    },
    "rhel": {
        "sshd": "openssh-server",
        "ssh": "openssh-clients",
        "ssh-keygen": "openssh",
        "mpirun": "openmpi",
    },
    "alpine": {
        "sshd": "openssh-server",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-keygen",
        "mpirun": "openmpi",
    },
}
_INSTALL = {
    "debian": "RUN apt-get update && apt-get install -y --no-install-recommends {}",
    "rhel": "RUN dnf install -y {}",
    "alpine": "RUN apk add --no-cache {}",
}
_NOTES = {
    ("rhel", "mpirun"): " (then put /usr/lib64/openmpi/bin on PATH: ENV PATH=...)",
}
_GENERIC = {
    "sshd": "OpenSSH's server (sshd)",
    "ssh": "OpenSSH's client (ssh)",
    "ssh-keygen": "OpenSSH's ssh-keygen",
    "mpirun": "Open MPI (mpirun; 4.1 or 5)",
}
_FAMILIES = {
    "debian": "debian",
    "ubuntu": "debian",
    "rhel": "rhel",
    "fedora": "rhel",
    "centos": "rhel",
    "amzn": "rhel",
    "rocky": "rhel",
    "almalinux": "rhel",
    "alpine": "alpine",
}

# The Python package each distribution's ranks import (any one of them).
_FRAMEWORKS = {
    TORCH_DISTRIBUTED: ("torch",),
    PARAMETER_SERVER: ("tensorflow", "mxnet"),
    MULTI_WORKER_MIRRORED: ("tensorflow",),
}


@dataclass(frozen=True)
class Missing:
    what: str
    why: str
    fix: str

    def describe(self) -> str:
        return f"{self.what}: {self.why}. Add it: {self.fix}"


def os_family(facts: ImageFacts) -> str | None:
    for name in (facts.os_id, *facts.os_like):
        if name in _FAMILIES:
            return _FAMILIES[name]
    return None


def install_hint(facts: ImageFacts, tool: str) -> str:
    family = os_family(facts)
    if family is None:
        return f"install {_GENERIC[tool]} with the image's package manager"
    package = _PACKAGES[family][tool]
    return _INSTALL[family].format(package) + _NOTES.get((family, tool), "")


def missing_tools(facts: ImageFacts, tools: tuple[str, ...]) -> list[Missing]:
    return [
        Missing(tool, _WHY[tool], install_hint(facts, tool))
        for tool in tools
        if tool not in facts.tools
    ]


def python_problem(python: PythonFacts | None, path: str) -> Missing | None:
    """The user's interpreter must run and be one ringleader supports."""
    if python is None or python.minor is None:
        return Missing(
            f"Python at {path}",
            "it does not run in this image",
            "point `--python` at the interpreter of your training code",
        )
    if not supported_python(python.minor):
        return Missing(
            python.describe(),
            f"ringleader supports Python {python_range()}",
            f"use an image or a venv with Python {python_range()}",
        )
    return None


def training_python(facts: ImageFacts) -> PythonFacts | None:
    """The interpreter the image settings name, else python3 on PATH (the probe's last)."""
    if facts.settings_python is not None:
        return facts.python(facts.settings_python)
    return facts.pythons[-1] if facts.pythons else None


def missing_for(distribution: str, facts: ImageFacts) -> list[Missing]:
    """What an image lacks to run jobs of `distribution` with ringleader."""
    found: list[Missing] = []
    if facts.settings is None or "ringleader-entrypoint" not in facts.tools:
        found.append(
            Missing(
                "ringleader",
                "the image was not prepared (no /etc/ringleader/image.json or no "
                "ringleader-entrypoint)",
                "RUN pip install ringleader-*.whl && ringleader image setup",
            )
        )
    python = training_python(facts)
    problem = python_problem(python, facts.settings_python or "python3")
    if problem is not None:
        found.append(problem)
    if distribution == MPI:
        found += missing_tools(facts, MPI_TOOLS)
    modules = _FRAMEWORKS.get(distribution, ())
    if modules and python is not None and not (python.modules & set(modules)):
        names = " or ".join(modules)
        found.append(
            Missing(
                names,
                f"{distribution}'s ranks import {names}",
                f"install {modules[0]} into {python.path}'s environment",
            )
        )
    return found
