"""The folders of tq_gc are layers: no two import each other (a pair that does is one concept split in
two, or an import cycle waiting to break), and formats/, the pure definitions every folder may use,
imports nothing else of tq_gc. Every import counts, a function's or a TYPE_CHECKING block's too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import tq_gc

PACKAGE = Path(tq_gc.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST) -> set[str]:
    """Every tq_gc module or name an import in `tree` names (`from tq_gc.a import b`: tq_gc.a.b too)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] == "tq_gc"}


def _folder(module: str) -> str | None:
    """The folder (a package directly under tq_gc) a module is in; None for tq_gc's own modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def folder_imports() -> dict[tuple[str, str], list[str]]:
    """{(folder, folder it imports): the files that do}, over every module of tq_gc."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _folder(_module_name(path))
        if source is None:
            continue
        targets = {_folder(name) for name in _imported(ast.parse(path.read_text(), str(path)))}
        for target in sorted(folder for folder in targets if folder not in (None, source)):
            found[(source, target)].append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_no_two_folders_import_each_other() -> None:
    imports = folder_imports()
    assert ("cli", "config") in imports, "the scan sees the command line's imports of its config"
    both_ways = {
        f"{first} <-> {second}": imports[(first, second)] + imports[(second, first)]
        for first, second in imports
        if first < second and (second, first) in imports
    }
    assert both_ways == {}


def test_formats_import_nothing_else_of_tq_gc() -> None:
    outside = {
        str(path.relative_to(PACKAGE.parent)): sorted(
            name for name in _imported(ast.parse(path.read_text())) if not name.startswith("tq_gc.formats")
        )
        for path in sorted((PACKAGE / "formats").rglob("*.py"))
    }
    assert {path: names for path, names in outside.items() if names} == {}
