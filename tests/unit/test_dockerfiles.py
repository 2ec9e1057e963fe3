"""The Dockerfiles' stages under the classic builder: two stages that start from the same image
never begin with the same instruction.

Among identical layers on one parent the classic builder takes the newest. Stages built side by
side that begin alike each make their own copy of that first layer, and in the next build only
the newest copy's children are looked for: every other stage misses its cache from there on.
Seen once: the runtime's system stage (`FROM base`, `ARG DEBIAN_FRONTEND`) shared its first
instruction with the framework images' compile stages, and the warm run after a cold one rebuilt
the runtime and every framework image on it. COPY and ADD are keyed by what they copy, so they
never match another stage's.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTENT_KEYED = ("COPY", "ADD")


def instructions(text: str) -> list[str]:
    """The file's instructions, continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip()]


def stage_starts(path: Path) -> list[tuple[str, str, str]]:
    """(the image a stage starts from, its first instruction, where) for each stage of a file;
    an image named by a build argument is its default, a stage of the same file is qualified."""
    defaults: dict[str, str] = {}
    stages: set[str] = set()
    starts = []
    found = instructions(path.read_text())
    for index, instruction in enumerate(found):
        word, _, rest = instruction.partition(" ")
        if word == "ARG" and not starts and "=" in rest:
            name, _, value = rest.partition("=")
            defaults[name] = value
        if word != "FROM" or index + 1 == len(found):
            continue
        parts = rest.split()
        image = re.sub(r"\$\{(\w+)\}", lambda match: defaults.get(match[1], match[0]), parts[0])
        if image in stages:
            image = f"{path.name}:{image}"
        if len(parts) == 3 and parts[1].upper() == "AS":
            stages.add(parts[2])
        first = found[index + 1]
        if first.split()[0] not in (*CONTENT_KEYED, "FROM"):
            starts.append((image, first, f"{path.name}, stage {len(starts) + 1}"))
    return starts


def test_no_two_stages_from_one_image_begin_with_the_same_instruction() -> None:
    seen: dict[tuple[str, str], str] = {}
    clashes = []
    dockerfiles = sorted(ROOT.glob("Dockerfile*"))
    assert len(dockerfiles) >= 7, dockerfiles
    for path in dockerfiles:
        for image, first, where in stage_starts(path):
            if (image, first) in seen:
                clashes.append(f"{where} and {seen[image, first]}: FROM {image}, then {first}")
            seen.setdefault((image, first), where)
    assert not clashes, clashes


def test_the_check_finds_two_stages_that_begin_alike(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile.a"
    dockerfile.write_text(
        "ARG BASE=debian\nFROM ${BASE} AS one\n# a comment\nARG X=1\nRUN a \\\n  b\n"
        "FROM debian AS two\nARG X=1\nRUN c\nFROM one\nCOPY x /\n"
    )
    starts = stage_starts(dockerfile)
    assert starts == [
        ("debian", "ARG X=1", "Dockerfile.a, stage 1"),
        ("debian", "ARG X=1", "Dockerfile.a, stage 2"),
    ]
