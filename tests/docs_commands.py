"""The `ringleader` command lines of the README and docs/, as the shell would split them."""

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Fenced blocks of shell commands; blocks without a language are synopses or printed output.
FENCE = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.M | re.S)
SEPARATORS = re.compile(r"&&|\|\||;|\|")
# What may stand before `ringleader` in a command: a launcher that runs it.
LAUNCHERS = ("srun", "sudo", "env", "exec", "time")
PROGRAM = re.compile(r"(^|/)ringleader$")


def shell_lines(block: str) -> Iterator[str]:
    """The block's commands, one per line: continuations and quotes across lines joined."""
    pending = ""
    for raw in block.replace("\\\n", " ").splitlines():
        line = f"{pending}\n{raw}" if pending else raw
        try:
            shlex.split(line, comments=True)
        except ValueError:  # an open quote: the command goes on
            pending = line
            continue
        pending = ""
        yield line.removeprefix("$ ")
    assert not pending, f"an unclosed quote: {pending}"


def ringleader_commands(page: Path) -> Iterator[tuple[str, list[str]]]:
    for block in FENCE.findall(page.read_text(encoding="utf-8")):
        for line in shell_lines(block):
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, ";"]:
                if SEPARATORS.fullmatch(word) or word.startswith(">") or word[:2] in ("2>", "1>"):
                    yield from _ringleader_part(line, command)
                    command = []
                else:
                    command.append(word)


def _ringleader_part(line: str, words: list[str]) -> Iterator[tuple[str, list[str]]]:
    for index, word in enumerate(words):
        if PROGRAM.search(word) and "=" not in word:
            before = words[:index]
            if not before or before[0] in LAUNCHERS or all("=" in w for w in before):
                yield line, words[index + 1 :]
            return


def documented_commands() -> list[tuple[str, str, list[str]]]:
    return [
        (page.relative_to(ROOT).as_posix(), line, argv)
        for page in PAGES
        for line, argv in ringleader_commands(page)
    ]
