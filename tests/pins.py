"""The project's pinned versions as its files state them: versions.toml, pyproject, the lock."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
VERSIONS_FILE = ROOT / "versions.toml"
PYPROJECT = ROOT / "pyproject.toml"
REQUIREMENTS_LOCK = ROOT / "requirements.lock"


def load_versions() -> dict[str, Any]:
    with VERSIONS_FILE.open("rb") as handle:
        return tomllib.load(handle)


def pin(table: str, key: str) -> str:
    """``[table] key`` of versions.toml, which must be a string."""
    value = load_versions()[table][key]
    assert isinstance(value, str), f"[{table}] {key} must be a string"
    return value


def pyproject_dependencies() -> list[Requirement]:
    with PYPROJECT.open("rb") as handle:
        project = tomllib.load(handle)["project"]
    return [Requirement(line) for line in project["dependencies"]]
