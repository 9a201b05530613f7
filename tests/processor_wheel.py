"""A user's processor wheel, built as its user builds it: ``examples/meter-energy`` by pip.

The deploy, synth and run-job tests ship this real wheel (pure Python, the
example's package), not a stand-in zip. A processor the example is not (one
that reads the job's schema, one that fails to load) is a wheel written as a
zip: what synth reads of a wheel, and what Python imports from one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "meter-energy"
PROCESSOR = "meter_energy.energy:HourlyEnergy"


def build_example_wheel(directory: Path) -> Path:
    """The example's wheel, built from a copy in ``directory`` (no build files in the tree)."""
    source = directory / "meter-energy"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("tests", "*.egg-info", "build"))
    dist = directory / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("meter_energy-*-py3-none-any.whl")
    return wheel


_BUILT: dict[str, Path] = {}


def example_wheel(factory: pytest.TempPathFactory) -> Path:
    """The example's wheel, built once a session (session fixtures of several folders)."""
    if "wheel" not in _BUILT:
        _BUILT["wheel"] = build_example_wheel(factory.mktemp("processor-wheel"))
    return _BUILT["wheel"]


# A processor that reads the job's schema: it declares an output and no input.
READS_THE_JOBS_SCHEMA = """
import msgspec

import tablecast


class Count(msgspec.Struct):
    messages: int = 0


class Counts(tablecast.Processor[Count]):
    output = tablecast.schema(
        '[key]\\ncolumns = ["site"]\\n\\n[columns]\\nsite = "string"\\nmessages = "int64"\\n'
    )

    def apply(self, state: Count, message: tablecast.Message) -> tuple[Count, tablecast.Changes]:
        state.messages += 1
        return state, tablecast.NO_CHANGES
"""
COUNTS = "plain_counts.counts:Counts"


def written_wheel(directory: Path, source: str, *, version: str = "1.0.0") -> Path:
    """A pure-Python wheel of package ``plain_counts`` whose module ``counts`` is ``source``,
    written as a zip (what synth and zipimport read of it; not for pip)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"plain_counts-{version}-py3-none-any.whl"
    info = f"plain_counts-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("plain_counts/__init__.py", "")
        wheel.writestr("plain_counts/counts.py", source)
        wheel.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: plain-counts\nVersion: {version}\n",
        )
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
    return path
