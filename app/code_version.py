"""Which code this process runs: the ``app`` package named by its content, version and commit.

:func:`code_digest` names the code by its files; every task compares the
digest of the code it imported with the driver's (:func:`check_code`), so
that a stale package installed on a worker can never run silently beside a
newer driver (Spark ships the driver's code, :mod:`app.spark.code`).
:func:`job_version` is what the ledger records as the code that wrote an
entry.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import app
from app.errors import ExitCode, TablecastError

PACKAGE = "app"
# The files that make the package: what a wheel of it holds.
_SUFFIXES = (".py", ".typed", ".properties", "COMMIT")


class CodeMismatchError(TablecastError):
    """An executor imported other code than the driver runs."""

    exit_code = ExitCode.CHECK_FAILED


def package_files(root: Traversable, prefix: str = PACKAGE) -> list[tuple[str, Traversable]]:
    """The files under ``root`` that make the package, by name: what a wheel of it holds."""
    found: list[tuple[str, Traversable]] = []
    for entry in root.iterdir():
        name = f"{prefix}/{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                found.extend(package_files(entry, name))
        elif entry.name.endswith(_SUFFIXES):
            found.append((name, entry))
    return sorted(found, key=lambda item: item[0])


@functools.cache
def code_digest() -> str:
    """The SHA-256 of the ``app`` package this interpreter imported (its files' names and bytes)."""
    digest = hashlib.sha256()
    for name, entry in package_files(resources.files(PACKAGE)):
        data = entry.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def check_code(expected: str) -> None:
    """Refuse to run code that differs from the driver's (once per Python worker)."""
    found = code_digest()
    if found != expected:
        raise CodeMismatchError(
            f"this executor imported tablecast code {found[:12]} from "
            f"{os.path.dirname(app.__file__)}, the driver runs {expected[:12]}: a different "
            "tablecast is installed on the worker; remove it (the job ships its own code)"
        )


@dataclass(frozen=True, slots=True)
class JobVersion:
    """What code wrote something: the package version, its commit, the code's digest."""

    version: str
    commit: str | None  # None when neither the wheel nor a checkout says
    code: str  # code_digest(): the files themselves

    def describe(self) -> str:
        commit = f" commit {self.commit[:12]}" if self.commit else ""
        return f"tablecast {self.version}{commit} (code {self.code[:12]})"


COMMIT_FILE = "COMMIT"  # in the package: the wheel's build writes it


@functools.cache
def job_version() -> JobVersion:
    """This process's :class:`JobVersion`."""
    version = os.environ.get("TABLECAST_JOB_VERSION") or app.__version__
    return JobVersion(version, _commit(), code_digest())


def _commit() -> str | None:
    shipped = resources.files(PACKAGE).joinpath(COMMIT_FILE)
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8").strip() or None
    return checkout_commit(Path(app.__file__).resolve().parents[1])


def checkout_commit(root: Path) -> str | None:
    """The HEAD commit of the checkout at ``root`` (``-dirty`` if ``app`` has changes), or None."""
    if not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "app"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty.strip() else head
