"""The suite's leak check (tests/leaks.py) fails a test that leaves a process running, a
daemon that detached from it included."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "tests.leaks", "-p", "no:cacheprovider"]


def _run_inner(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """One test with ``body``, run by its own pytest with the leak check as its only plugin."""
    test = tmp_path / "test_inner.py"
    test.write_text(textwrap.dedent(body))
    return subprocess.run(
        [*_PYTEST, "--rootdir", str(tmp_path), str(test)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


_DETACHING = """
    import pathlib, subprocess

    def test_detaches(tmp_path):
        # The shell starts sleep in the background and exits: init adopts the sleep.
        pid = subprocess.run(
            ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        pathlib.Path({pid_file!r}).write_text(pid)
        {ending}
"""


def test_a_daemon_that_detached_from_the_test_is_named_as_left_running(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    try:
        inner = _run_inner(tmp_path, _DETACHING.format(pid_file=str(pid_file), ending="pass"))
        pid = int(pid_file.read_text())
        said = inner.stdout + inner.stderr
        assert inner.returncode == 1, said
        assert re.search(rf"left running after the test: process {pid} \(sleep 60\)", said), said
        with open(f"/proc/{pid}/stat") as stat:  # it was init's, not the test process's
            assert stat.read().rsplit(")", 1)[1].split()[1] == "1"
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_daemon_the_test_ends_is_no_leak(tmp_path: Path) -> None:
    ending = "import os, signal; os.kill(int(pid), signal.SIGKILL)"
    pid_file = tmp_path / "daemon.pid"
    inner = _run_inner(tmp_path, _DETACHING.format(pid_file=str(pid_file), ending=ending))
    assert inner.returncode == 0, inner.stdout + inner.stderr
    assert "1 passed" in inner.stdout
