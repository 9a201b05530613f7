"""The tools' entry points: the script in a checkout and ``python -m app.ops``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ops.conftest import PROJECT


def test_the_script_runs_from_any_directory(tmp_path: Path) -> None:
    script = PROJECT / "scripts" / "tablecast_ops.py"
    result = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for command in ("deploy", "status", "start", "stop", "topics", "produce", "archive"):
        assert command in result.stdout


def test_the_module_runs_as_on_a_node() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.ops", "archive", "--help"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--follow" in result.stdout
