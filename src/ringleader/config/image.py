"""What `ringleader image setup` recorded about the image: the user's interpreter, where the
job's own ssh files are, and whether the image can run mpi jobs. Written once at image build
(tools/image/setup.py), read by every host's entry point."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ringleader.core.errors import ConfigError

IMAGE_DIR = Path("/etc/ringleader")
SETTINGS_NAME = "image.json"
SSH_DIR_NAME = "ssh"
SSHD_CONFIG_NAME = "sshd_config"
SSH_CONFIG_NAME = "ssh_config"

# The Python versions ringleader supports (pyproject's requires-python and the tested range).
SUPPORTED_PYTHON = ((3, 10), (3, 13))


def supported_python(version: tuple[int, int]) -> bool:
    low, high = SUPPORTED_PYTHON
    return low <= version <= high


def python_range() -> str:
    low, high = SUPPORTED_PYTHON
    return f"{low[0]}.{low[1]}-{high[0]}.{high[1]}"


@dataclass(frozen=True)
class ImageSettings:
    python: str  # the interpreter of the user's program (may be another venv than ringleader's)
    ringleader_python: str  # the interpreter ringleader is installed in
    ringleader_version: str
    sshd: str | None  # None: prepared without mpi (no sshd in the image)
    ssh_dir: str  # the job's own sshd and ssh client files (keys, configs, known_hosts)

    @property
    def sshd_config(self) -> Path:
        return Path(self.ssh_dir) / SSHD_CONFIG_NAME

    @property
    def ssh_config(self) -> Path:
        return Path(self.ssh_dir) / SSH_CONFIG_NAME

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> "ImageSettings":
        field = f"the image settings {source}"
        try:
            data: Any = json.loads(text)
        except ValueError as error:
            raise ConfigError(
                field, f"not JSON ({error}); run `ringleader image setup` again"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(field, "expected a JSON object; run `ringleader image setup` again")
        strings = ("python", "ringleader_python", "ringleader_version", "ssh_dir")
        for name in strings:
            if not isinstance(data.get(name), str) or not data[name]:
                raise ConfigError(
                    field, f"{name!r} is missing or not a string; run `ringleader image setup`"
                )
        sshd = data.get("sshd")
        if sshd is not None and not isinstance(sshd, str):
            raise ConfigError(field, "'sshd' must be a path or null")
        return cls(
            python=data["python"],
            ringleader_python=data["ringleader_python"],
            ringleader_version=data["ringleader_version"],
            sshd=sshd,
            ssh_dir=data["ssh_dir"],
        )


def load_image_settings(directory: Path = IMAGE_DIR) -> ImageSettings | None:
    """The image's settings, or None when the image was not prepared by `image setup`."""
    path = directory / SETTINGS_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"the image settings {path}", f"cannot be read: {error}") from None
    return ImageSettings.from_json(text, path)
