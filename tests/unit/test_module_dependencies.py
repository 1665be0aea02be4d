"""What the core may import: the planner and its data nothing but each other (no config, no pydantic, no
store), the metrics no row store backend. Read from the source: every `import` of a tq_gc module, at any
depth of a module, followed from module to module (importing them would load the whole package through
tq_gc/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import tq_gc

PACKAGE = Path(tq_gc.__file__).parent
CORE = {
    "tq_gc.plan",
    "tq_gc.rows",
    "tq_gc.referenced",
    "tq_gc.decisions",
    "tq_gc.report",
    "tq_gc.first_seen",
    "tq_gc.footprint",
}
AUDIT = {"tq_gc.audit"}  # the audit's rows and identity columns, pure data the report and records use


def source_of(module: str) -> Path | None:
    relative = Path(*module.split(".")[1:])
    for path in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(module: str) -> set[str]:
    """The modules `module` imports by name (tq_gc's and others'), with the packages they sit in."""
    path = source_of(module)
    assert path is not None, module
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = {name for name in named if not name.startswith("tq_gc") or source_of(name) is not None}
    parents = {".".join(name.split(".")[:i]) for name in found for i in range(2, name.count(".") + 1)}
    return (found | parents) - {"tq_gc"}


def reached_from(module: str) -> set[str]:
    """Every module `module` imports, and every module those import, tq_gc's followed to the end."""
    reached, todo = set(), [module]
    while todo:
        for name in imports_of(todo.pop()) - reached:
            reached.add(name)
            if name.startswith("tq_gc."):
                todo.append(name)
    return reached


def test_the_planner_reaches_only_the_pure_core() -> None:
    reached = {name for name in reached_from("tq_gc.plan") if name.startswith("tq_gc.")}
    assert reached <= CORE | AUDIT, sorted(reached - CORE - AUDIT)
    assert not {name.split(".")[0] for name in reached_from("tq_gc.plan")} & {"pydantic", "redis", "ray"}


def test_each_core_module_reaches_only_the_core() -> None:
    for module in CORE | AUDIT:
        reached = {name for name in reached_from(module) if name.startswith("tq_gc.")}
        assert reached <= CORE | AUDIT, (module, sorted(reached - CORE - AUDIT))


def test_the_metrics_know_no_row_store_backend() -> None:
    reached = reached_from("tq_gc.metrics")
    assert not {name for name in reached if name.startswith("tq_gc.stores")}, sorted(reached)
    assert not {name.split(".")[0] for name in reached} & {"ray", "transfer_queue"}
