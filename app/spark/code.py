"""The job's own code, as Spark ships it to the executors.

Spark's executors unpickle the job's functions and classes (the source's
range readers, the partition task) by reference, so they must import the
very ``app`` package the driver runs, and the AMI's workers hold the locked
dependencies only. The driver ships it:

- under ``run-job`` (spark-submit on the cluster) the wheel it installed is
  passed with ``--py-files`` (as ``tablecast-<version>.zip``: PySpark puts
  only ``.zip``, ``.egg`` and ``.jar`` files on the Python path);
- started any other way against a cluster (``tablecast run --master
  spark://...`` from a checkout), :func:`ship` zips the package the driver
  imported and adds it with ``SparkContext.addPyFile``.

Either way Spark puts the archive first on the executors' ``sys.path``.
:func:`code_digest` names the code by its content; every task compares the
digest of the code it imported with the driver's, so that a stale package
installed on a worker can never run silently beside a newer driver.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import app
from app.errors import TablecastError

PACKAGE = "app"
# The files that make the package: what a wheel of it holds.
_SUFFIXES = (".py", ".typed", ".properties", "COMMIT")


class CodeMismatchError(TablecastError):
    """An executor imported other code than the driver runs."""

    exit_code = 1


def _files(root: Traversable, prefix: str = PACKAGE) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for entry in root.iterdir():
        name = f"{prefix}/{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                found.extend(_files(entry, name))
        elif entry.name.endswith(_SUFFIXES):
            found.append((name, entry))
    return sorted(found, key=lambda item: item[0])


@functools.cache
def code_digest() -> str:
    """The SHA-256 of the ``app`` package this interpreter imported (its files' names and bytes)."""
    digest = hashlib.sha256()
    for name, entry in _files(resources.files(PACKAGE)):
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


def package_zip(directory: Path | None = None) -> Path:
    """A zip of the ``app`` package, named by version and digest, made once per content."""
    out_dir = directory or Path(tempfile.gettempdir()) / "tablecast"
    path = out_dir / f"tablecast-{app.__version__}-{code_digest()[:16]}.zip"
    if path.is_file():
        return path
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, entry in _files(resources.files(PACKAGE)):
            # A fixed date: the same code makes the same bytes.
            archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), entry.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(buffer.getvalue())
    os.replace(partial, path)
    return path


def shipped_by_submit(conf: Any) -> list[str]:
    """The tablecast archives spark-submit already ships (run-job's ``--py-files``)."""
    files = conf.get("spark.submit.pyFiles", "") or ""
    return [
        os.path.basename(f)
        for f in files.split(",")
        if f and os.path.basename(f).startswith("tablecast-")
    ]


def ships_itself(conf: Any) -> bool:
    return bool(shipped_by_submit(conf))


def ship(spark: Any) -> Path | None:
    """Make every Python worker import this driver's ``app`` package; returns the zip added."""
    from pyspark import SparkFiles

    context = spark.sparkContext
    conf = context.getConf()
    if conf.get("spark.master", "local").startswith("local"):
        return None  # local mode: the workers run the driver's own interpreter
    names = shipped_by_submit(conf)
    added: Path | None = None
    if not names:
        added = package_zip()
        context.addPyFile(str(added))
        names = [added.name]
    # Spark's streaming source runner (the driver-side Python process that plans
    # the source's offsets) looks for the Python includes under
    # <SparkFiles root>/streaming_job/, where Spark puts nothing; every other
    # Python worker looks in the root. Give it a copy.
    root = Path(SparkFiles.getRootDirectory())
    (root / "streaming_job").mkdir(exist_ok=True)
    for name in names:
        shutil.copyfile(root / name, root / "streaming_job" / name)
    return added


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
