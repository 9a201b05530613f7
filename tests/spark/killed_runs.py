"""``tablecast`` as its own process group, killed whole, and what any reader sees between kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools import verify


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python -m app ARGS``: the driver, its JVM and Python workers, one process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of ``process``'s group, and wait until none is left."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if subprocess.run(
            ["pgrep", "-g", str(process.pid)], capture_output=True, check=False
        ).returncode:
            return
        time.sleep(0.2)


def assert_readable_and_no_duplicates(output: str) -> None:
    """What any reader sees at this instant: whole files, no row twice."""
    location = resolve(output)
    for info in location.list_tree(location.path):
        name = info.path.rsplit("/", 1)[-1]
        if "/_" in info.path[len(location.path) :] or name.startswith((".", "_")):
            continue
        assert info.size > 0, f"empty visible file {info.path}"
        pq.read_metadata(info.path, filesystem=location.fs)  # raises on a broken file
    table = verify.read_output(output)
    assert verify.compare(table, table).duplicates == 0


def published_batches(output: str) -> int:
    """How many batches the output's ledger holds (its head's batch number, plus one)."""
    head = Ledger(resolve(output)).head()
    return 0 if head is None or head.batch_id is None else head.batch_id + 1


def wait_for_batches(process: subprocess.Popen[bytes], output: str, batches: int) -> None:
    """Until the output's ledger holds ``batches`` batches, or ``process`` has ended."""
    deadline = time.monotonic() + 300
    while process.poll() is None and published_batches(output) < batches:
        if time.monotonic() > deadline:
            raise AssertionError(f"{output} did not reach {batches} batches in 300 s")
        time.sleep(0.05)
