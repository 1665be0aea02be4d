"""What the core may import: the planner and its data nothing but each other (no config, no pydantic, no
store), the metrics no row store backend. Read from the source: every `import` of a tq_gc module, at any
depth of a module, followed from module to module (importing them would load the whole package through
tq_gc/__init__.py)."""

from __future__ import annotations

import ast
import re
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
    "tq_gc.row_sizes",
    "tq_gc.listings",
}
AUDIT = {"tq_gc.audit"}  # the audit's rows and identity columns, pure data the report and records use


def source_of(module: str) -> Path | None:
    relative = Path(*module.split(".")[1:])
    for path in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if path.is_file():
            return path
    return None


def named_imports(path: Path) -> set[str]:
    """Every module a file imports by name, at any depth (a function's own import included), and each
    name imported from one as module.name (it may be a module)."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
    return named


def imports_of(module: str) -> set[str]:
    """The modules `module` imports by name (tq_gc's and others'), with the packages they sit in."""
    path = source_of(module)
    assert path is not None, module
    named = named_imports(path)
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


GENERIC_PACKAGES = ("sweep", "cli", "sidecar")
GENERIC_STORE_MODULES = ("stores/base.py", "stores/deferred.py", "stores/claims.py", "stores/memory.py")
TQ_BACKEND = "tq_gc.stores.transferqueue"
# The demos run a toy training job's TQ of their own, beside the sweeper: drivers of a TQ, not sweepers.
DEMOS = {"demo.py", "capacity_demo.py"}


def modules_under(*relative: str) -> list[Path]:
    found: list[Path] = []
    for name in relative:
        path = PACKAGE / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def test_the_sweep_the_cli_and_the_sidecar_import_nothing_of_the_transfer_queue_backend() -> None:
    """One assembly (wiring.py) picks the backend; the rest sees a RowStore."""
    reaching = {
        str(path.relative_to(PACKAGE)): sorted(n for n in named_imports(path) if n.startswith(TQ_BACKEND))
        for path in modules_under(*GENERIC_PACKAGES, *GENERIC_STORE_MODULES)
        if path.name not in DEMOS
    }
    assert not {module: names for module, names in reaching.items() if names}


# How to reach the Ray cluster is not the backend's tuning: the sidecar is a Ray actor.
TQ_WORDS = re.compile(
    r"TransferQueueNotFound|controller_fit|transfer_queue\.(?!ray_address|ray_namespace)\w+"
)


def test_the_generic_row_store_layer_names_no_transfer_queue_error_nor_setting() -> None:
    """The generic layer knows a RowStore's face only: no TQ error, no TQ tuning, no TQ call."""
    named = {
        str(path.relative_to(PACKAGE)): sorted(set(TQ_WORDS.findall(path.read_text())))
        for path in modules_under(*GENERIC_PACKAGES, *GENERIC_STORE_MODULES)
    }
    assert not {module: words for module, words in named.items() if words}
