"""run.json: what a run was asked to be (one writer, one reader).

    {"program": str, "instance_type": str, "hosts": int, "processes_per_host": int|null,
     "distribution": str, "image": str}

`ringleader local` writes it beside the hosts' folders (OUTPUT/<job>/run.json) from the job it
planned (the instance type is what it wrote into resourceconfig.json); `ringleader report
--compare` reads it to tell runs of different programs apart and to price a run by its
instance type. A job's own output (job.json) says how many hosts and ranks it had; this file
says what they ran. The reader takes what it can: a field of the wrong type is left out.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.core.files import write_atomically
from ringleader.core.jsontext import parse_json

RUN_FILE = "run.json"


@dataclass(frozen=True)
class RunInfo:
    program: str | None = None  # sagemaker_program
    instance_type: str | None = None  # resourceconfig.json's current_instance_type
    hosts: int | None = None
    processes_per_host: int | None = None
    distribution: str | None = None
    image: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "instance_type": self.instance_type,
            "hosts": self.hosts,
            "processes_per_host": self.processes_per_host,
            "distribution": self.distribution,
            "image": self.image,
        }


def write_run_file(path: Path, info: RunInfo) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(info.to_json(), indent=2) + "\n")


def parse_run_file(text: str) -> RunInfo:
    """The run's facts; ValueError when the text is not a JSON object."""
    data: Any = parse_json(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")

    def text_of(name: str) -> str | None:
        value = data.get(name)
        return value if isinstance(value, str) and value else None

    def count_of(name: str) -> int | None:
        value = data.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return RunInfo(
        program=text_of("program"),
        instance_type=text_of("instance_type"),
        hosts=count_of("hosts"),
        processes_per_host=count_of("processes_per_host"),
        distribution=text_of("distribution"),
        image=text_of("image"),
    )
