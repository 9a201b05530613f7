"""A process group a test started, ended whole: nothing of it outlives the test."""

from __future__ import annotations

import os
import signal
import subprocess
import time

__all__ = ["reap_group"]


def reap_group(leader: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    """SIGKILL every process of ``leader``'s group until none is left (a stopped one is
    woken to die); a JVM leaves once its driver is gone, and this makes sure of it."""
    group = leader.pid
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader.poll()  # a dead leader not waited for stays in its group, a zombie
        if subprocess.run(["pgrep", "-g", str(group)], capture_output=True, check=False).returncode:
            return
        try:
            os.killpg(group, signal.SIGKILL)
            os.killpg(group, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError(f"processes of group {group} still running")
