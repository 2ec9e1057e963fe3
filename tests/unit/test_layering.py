"""The sub-packages' layering, read from the source with `ast` (nothing of it is imported).

Layers, lowest first: core < aws < config < launch < wire < output < (rank, source, artifacts)
< supervise < tools < sagemaker. A module may import, at module level, in a function or under
`if TYPE_CHECKING:`, only from its own layer or a lower one. rank, source and artifacts share a
layer but import nothing of each other, so each of them may import itself and lower layers, not
the other two.

Modules at the package's top: `ringleader/__init__.py` runs on every import of any sub-package,
so it belongs to the core layer (it may import only core; every layer may import it, e.g.
`__version__`). Any other top-level module (say a future `__main__.py`) is an entry point and
belongs to the tools layer. A new sub-package fails the test until it is given a layer here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PACKAGE = "ringleader"
REPOSITORY = Path(__file__).resolve().parents[2]
SOURCE = REPOSITORY / "src" / PACKAGE
TOP = PACKAGE  # what ringleader/__init__.py goes by below

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core", TOP),
    ("aws",),
    ("config",),
    ("launch",),
    ("wire",),
    ("output",),
    ("rank", "source", "artifacts"),
    ("supervise",),
    ("tools",),
    ("sagemaker",),  # SDK v3's Ringleader(...), imported in the user's own Python
)
LAYER = {name: index for index, names in enumerate(LAYERS) for name in names}
APART = frozenset({"rank", "source", "artifacts"})  # one layer, but none may import another
ENTRY_LAYER = LAYER["tools"]  # top-level modules other than __init__.py


def layer_of(unit: str) -> int:
    return LAYER.get(unit, ENTRY_LAYER)


def layer_name(unit: str) -> str:
    names = [name for name in LAYERS[layer_of(unit)] if name != TOP]
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


class Violation(NamedTuple):
    path: str
    line: int
    importer: str
    imported: str

    def __str__(self) -> str:
        if layer_of(self.importer) == layer_of(self.imported):
            rule = f"layer {layer_name(self.importer)}: none may import another"
        else:
            rule = (
                f"layer {layer_name(self.importer)} may not import "
                f"layer {layer_name(self.imported)}"
            )
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} ({rule})"


def unit_of(module: str, root: Path) -> str:
    """The sub-package or top-level module (root: the package's directory) that the dotted
    ringleader module belongs to; ringleader itself, and names in it such as `__version__`,
    belong to TOP."""
    parts = module.split(".")
    if len(parts) == 1:
        return TOP
    if (root / parts[1]).is_dir():
        if parts[1] not in LAYER:
            raise ValueError(f"sub-package {parts[1]} has no layer: add it to LAYERS")
        return parts[1]
    if (root / f"{parts[1]}.py").is_file():
        return f"{PACKAGE}.{parts[1]}"
    return TOP


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every ringleader module, or name in one, that an import names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                if node.level > len(base):
                    raise ValueError(f"{module}:{node.lineno}: relative import beyond the top")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, target] if target else base)
            if target.split(".")[0] == PACKAGE:
                for alias in node.names:  # `from ringleader import artifacts`: a sub-package
                    yield node.lineno, f"{target}.{alias.name}"


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if layer_of(importer) != layer_of(imported):
        return layer_of(imported) < layer_of(importer)
    return importer not in APART and imported not in APART


def check_file(path: Path, root: Path, shown: str) -> list[Violation]:
    """The layering violations of the .py file at path under root, the package's directory."""
    parts = [PACKAGE, *path.relative_to(root).with_suffix("").parts]
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    importer = unit_of(module, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=shown)
    found = []
    for line, target in imported_modules(tree, module, is_package):
        imported = unit_of(target, root)
        if not allowed(importer, imported):
            found.append(Violation(shown, line, importer, imported))
    return found


def check_tree(root: Path, shown_from: Path) -> list[Violation]:
    """Every layering violation under root, the package's directory; paths relative to
    shown_from."""
    found: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        found += check_file(path, root, str(path.relative_to(shown_from)))
    return found


def test_no_module_imports_a_higher_layer() -> None:
    modules = list(SOURCE.rglob("*.py"))
    assert len(modules) > 100, f"found only {len(modules)} modules under {SOURCE}"
    violations = check_tree(SOURCE, REPOSITORY)
    assert not violations, "imports against the layering:\n" + "\n".join(map(str, violations))


def test_upward_and_sideways_imports_are_reported(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    for package in ("core", "launch", "rank", "source", "tools"):
        (root / package).mkdir(parents=True)
    (root / "__init__.py").write_text("__version__ = '0'\n")
    (root / "core" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import files\n"
        "if TYPE_CHECKING:\n"
        "    from ..launch.hostenv import HostEnvironment\n"
        "def later() -> None:\n"
        "    import ringleader.tools.cli\n"
    )
    (root / "launch" / "good.py").write_text(
        "import ringleader.core.files\nfrom ..core import files\nfrom .. import __version__\n"
    )
    (root / "rank" / "__init__.py").write_text("from ringleader import source, __version__\n")
    (root / "tools" / "cli.py").write_text("from ringleader.rank import tree\nimport json\n")
    assert [str(v) for v in check_tree(root, tmp_path)] == [
        "ringleader/core/bad.py:4: core imports launch (layer core may not import layer launch)",
        "ringleader/core/bad.py:6: core imports tools (layer core may not import layer tools)",
        "ringleader/rank/__init__.py:1: rank imports source "
        "(layer (rank, source, artifacts): none may import another)",
    ]


def test_a_package_without_a_layer_is_reported(tmp_path: Path) -> None:
    (tmp_path / "extra").mkdir()
    try:
        unit_of("ringleader.extra.module", tmp_path)
    except ValueError as error:
        assert "sub-package extra has no layer" in str(error)
    else:
        raise AssertionError("an unknown sub-package was given a layer")
