"""Which code may import which: read from the source (AST), no module is run.

A test module imports no other test module: what two test modules share
lives in a harness module named for what it holds (``tests/pins.py``,
``tests/sink/commit_steps_harness.py``, ...) or in a ``conftest.py`` fixture,
so that running or changing one test module never runs or breaks another's
module-level code.

``infra/`` imports ``app/`` (the hand-off's names, the Kafka client's
options), so ``app/`` never imports ``infra/``: callers pass infra's
configuration in (:class:`app.local.stand_in.StandIn`,
:class:`app.ops.pipelines.Declarations`). Every import counts, at the top of a
module or inside a function or ``TYPE_CHECKING``: an import hidden in a
function is still an arrow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[str]:
    """Every module ``path`` names in an import statement, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                assert node.module is not None
                source = node.module
            yield source
            # ``from app.engine import driver`` imports the module app.engine.driver.
            yield from (f"{source}.{alias.name}" for alias in node.names)


def sources(root: str) -> list[Path]:
    return sorted((PROJECT / root).rglob("*.py"))


def test_nothing_in_app_imports_infra() -> None:
    offenders = [
        f"{path.relative_to(PROJECT)} imports {name}"
        for path in sources("app")
        for name in imported(path)
        if name == "infra" or name.startswith("infra.")
    ]
    assert offenders == []


# The units of app/ (its packages and top-level modules), top layer first. An
# import between two units runs down the layers, never up and never within a
# layer, so no two units import each other, however indirectly.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("local",),  # the pipeline on one machine, over the operator's tools
    ("ops", "__main__"),  # the operator's tools; `python -m app`
    ("cli",),  # the command line over everything below
    ("recovery", "recompute", "tools"),  # repair, replay and corrections; generate, verify
    ("spark",),  # the Spark wiring: the query, the session, the code shipped
    ("table", "metrics"),  # the output's Iceberg table; where the sink's reports go
    ("sink",),  # the commit protocol, the ledger, rewrites (the table is passed in)
    ("engine",),  # the ordered partition tasks and their driver, the files they stage
    ("sources",),  # the streaming source over the archive and Kafka
    ("contract",),  # CONTRACT.md in code
    ("defaults", "logs", "storage", "code_version", "worker_errors", "durations"),
    ("errors", "handoff", "metric_names", "compiled", "app"),  # app: the package's own __init__
)
LAYER = {unit: rank for rank, layer in enumerate(reversed(LAYERS)) for unit in layer}


def app_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sources("app")}


def unit(module: str) -> str:
    """The package or top-level module of app/ that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_imports() -> dict[str, set[str]]:
    """Module -> the modules of app/ it imports (a name resolved to the module that holds it),
    leaving out its own enclosing packages (Python imports those first anyway)."""
    modules = app_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported_name in imported(path):
            target = imported_name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(f"{target}."):
                targets.add(target)
        graph[name] = targets
    return graph


def test_every_unit_of_app_has_a_layer() -> None:
    units = {unit(name) for name in app_modules()}
    assert sorted(units - set(LAYER)) == [], "place each new package or module in LAYERS"
    assert sorted(set(LAYER) - units) == [], "a unit in LAYERS that app/ no longer has"


def test_imports_between_units_run_down_the_layers() -> None:
    upward = [
        f"{source} imports {target}: {unit(source)} is not above {unit(target)} in LAYERS"
        for source, targets in sorted(module_imports().items())
        for target in sorted(targets)
        if unit(source) != unit(target) and LAYER[unit(source)] <= LAYER[unit(target)]
    ]
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_app_is_in_an_import_cycle() -> None:
    assert cycles(module_imports()) == []


def test_no_test_module_imports_another_test_module() -> None:
    test_modules = {module_name(path) for path in sources("tests") if path.name.startswith("test_")}
    offenders = [
        f"{path.relative_to(PROJECT)} imports {name}: move what it shares to a harness module"
        for path in sources("tests")
        for name in imported(path)
        if name in test_modules
    ]
    assert offenders == []
