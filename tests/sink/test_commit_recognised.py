"""A batch recognised as published after a crash leaves nothing of the crashed attempt behind."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.contract import offsets as offsets_mod
from app.sink import ledger as ledger_mod
from app.sink.commit import CRASH_ENV
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.spark.helpers import assert_exact, run_job, write_capture

SPEC = CaptureSpec(topics=1, partitions=2, sessions=3, updates=8, seed=11)


def _run_until_killed(archive: Path, output: Path, checkpoint: Path, crash_at: str) -> None:
    """``tablecast run`` with the crash hook; its whole process group is gone on return."""
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "run", "--archive", str(archive), "--output", str(output),
         "--checkpoint", str(checkpoint), "--trigger", "available-now"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, CRASH_ENV: crash_at},
    )  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        deadline = time.monotonic() + 20  # the JVM leaves once its driver is gone
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.2)
    assert process.returncode == -signal.SIGKILL, stderr.decode()[-3000:]


@pytest.mark.spark
def test_a_redo_after_a_crash_after_step_7_clears_the_pending_list(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    # The only batch (0) dies after its ledger entry, before step 8 and Spark's commit.
    _run_until_killed(archive, output, checkpoint, "7:0")
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert head is not None and not (checkpoint / "commits" / "0").exists()
    pending = ledger.pending()
    assert pending == ledger_mod.Pending(offsets_mod.fingerprint(head.end), head.files)

    caplog.set_level(logging.INFO, logger="app.sink")
    run_job(spark, archive, output, checkpoint)
    decisions = [r.getMessage() for r in caplog.records if r.name == "app.sink.commit"]
    recognised = f"batch 0 ends at {offsets_mod.describe(head.end)}, as ledger entry 0 (batch 0)"
    assert [m[: len(recognised)] for m in decisions] == [recognised], decisions  # nothing else
    assert ledger.pending() is None
    assert not list((output / ledger_mod.STAGING_DIR).rglob("*"))
    assert [e.number for e in ledger.entries()] == [0]
    assert_exact(archive, output)
