"""A user's processor wheel, built as its user builds it: ``examples/meter-energy`` by pip.

The deploy, synth and run-job tests ship this real wheel (pure Python, the
example's package), not a stand-in zip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
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
