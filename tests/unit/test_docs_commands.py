"""Every `ringleader` command line in the README and docs/ is one the real parser takes: the
subcommand, every option and its value. (tests/container/test_readme.py runs the README's
`ringleader local` examples for real.)"""

import contextlib
import io

import pytest

from ringleader.tools.cli import build_parser
from tests.docs_commands import documented_commands

COMMANDS = documented_commands()


def test_the_docs_have_ringleader_commands() -> None:
    pages = {page for page, _, _ in COMMANDS}
    assert "README.md" in pages
    assert len(COMMANDS) >= 40, len(COMMANDS)


@pytest.mark.parametrize(
    ("page", "line", "argv"), COMMANDS, ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(COMMANDS)]
)
def test_a_documented_command_parses(page: str, line: str, argv: list[str]) -> None:
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exit_:
        assert not exit_.code, f"{page}: {line}\n{errors.getvalue()}"
