"""Which code may import which: read from the source (AST), no module is run.

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
