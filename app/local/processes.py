"""Processes on loopback: started in a group of their own with a log, waited on, stopped.

One place for what every local service shares (the stand-ins, Spark's
master and worker, the image's units, the pipeline's own server): a free
port on 127.0.0.1, a process in its own session writing to its log file (so
that stopping it reaches everything it started), a poll with a deadline,
and a stop that sends SIGTERM to the group and SIGKILL after a grace time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def start_logged(
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own (one group to stop), its output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )


def stop_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM to the process's group; SIGKILL when it has not exited after ``timeout_s``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def poll_until(
    condition: Callable[[], bool],
    *,
    timeout_s: float,
    poll_s: float = 0.5,
    gave_up: Callable[[], bool] = lambda: False,
) -> bool:
    """Whether ``condition`` came true within ``timeout_s``; False at once when ``gave_up``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if gave_up() or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
