"""The job's wheel: build it from the working tree, or take one already built.

The driver's service installs ``tablecast-<version>-py3-none-any.whl`` with
``--no-deps`` (every dependency is in the image), so the wheel carries only
the ``app`` package and ``tablecast``, the public API a user's processor
imports. It is built from a copy of the project's sources in a
temporary directory, so the working tree gets no ``build/`` or egg-info, with
pip and the setuptools that ``pyproject.toml`` pins for the build.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from app.code_version import COMMIT_FILE, checkout_commit
from app.ops.errors import BuildError

DISTRIBUTION = "tablecast"
# What a build needs from the project: the metadata, the readme it names, the packages.
_SOURCES = ("pyproject.toml", "README.md", "app", "tablecast")
_WHEEL_NAME = re.compile(rf"^{DISTRIBUTION}-([0-9A-Za-z.+_]+)-py3-none-any\.whl$")


@dataclass(frozen=True, slots=True)
class Wheel:
    path: Path
    version: str
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name


def wheel_file_name(version: str) -> str:
    """The name run-job downloads for ``version``."""
    return f"{DISTRIBUTION}-{version}-py3-none-any.whl"


def read_wheel(path: Path) -> Wheel:
    """Check that ``path`` is a tablecast wheel whose name and metadata agree."""
    match = _WHEEL_NAME.match(path.name)
    if match is None:
        raise BuildError(f"{path.name} is not named {wheel_file_name('<version>')}")
    version = match.group(1)
    try:
        with zipfile.ZipFile(path) as archive:
            metadata = archive.read(f"{DISTRIBUTION}-{version}.dist-info/METADATA").decode()
            names = archive.namelist()
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{path} is not a readable tablecast wheel: {exc}") from None
    headers = HeaderParser().parsestr(metadata)
    if headers["Name"] != DISTRIBUTION or headers["Version"] != version:
        raise BuildError(
            f"{path.name}: metadata says {headers['Name']} {headers['Version']}, "
            f"the name says {DISTRIBUTION} {version}"
        )
    if "app/__main__.py" not in names:
        raise BuildError(f"{path.name} lacks app/__main__.py, which run-job runs")
    return Wheel(path, version, _sha256(path))


def build_wheel(project: Path, out_dir: Path) -> Wheel:
    """Build the wheel of the project at ``project`` into ``out_dir``."""
    if not (project / "pyproject.toml").is_file():
        raise BuildError(f"{project} has no pyproject.toml")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tablecast-build-") as staging_dir:
        staging = Path(staging_dir) / "src"
        staging.mkdir()
        for name in _SOURCES:
            source = project / name
            if source.is_dir():
                shutil.copytree(
                    source,
                    staging / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"),
                )
            elif source.is_file():
                shutil.copy2(source, staging / name)
        # The commit the wheel is built from, for the ledger (app.code_version.job_version).
        commit = checkout_commit(project) or ""
        (staging / "app" / COMMIT_FILE).write_text(commit + "\n", encoding="utf-8")
        built = Path(staging_dir) / "dist"
        command = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(built),
            str(staging),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted(built.glob("*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
            raise BuildError(f"pip wheel failed (exit {result.returncode}): {tail}")
        target = out_dir / wheels[0].name
        shutil.copy2(wheels[0], target)
    return read_wheel(target)


def _sha256(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()
