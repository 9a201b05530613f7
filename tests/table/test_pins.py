"""pyiceberg's version agrees across versions.toml, pyproject.toml, the lock and the venv."""

from __future__ import annotations

import importlib.metadata
import re

from tests.pins import REQUIREMENTS_LOCK, pin, pyproject_dependencies


def test_pyiceberg_is_pinned_alike_everywhere() -> None:
    version = pin("iceberg", "pyiceberg")
    [requirement] = [r for r in pyproject_dependencies() if r.name == "pyiceberg"]
    assert str(requirement.specifier) == f"=={version}"
    assert {"sql-sqlite", "glue", "pyarrow"} <= requirement.extras
    locked = re.search(r"^pyiceberg==(\S+)", REQUIREMENTS_LOCK.read_text(), re.MULTILINE)
    assert locked is not None and locked.group(1) == version
    assert importlib.metadata.version("pyiceberg") == version
