"""The commit-step cases' capture and crash, shared by the sink's and the table's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.sink.crash_points import CrashMode, CrashPoint, crashing
from app.tools.generate import CaptureSpec
from tests.spark.helpers import run_job

# Two partitions of unequal backlog (44 and 88 records), resync snapshots
# (rows deleted by a snapshot), three batches of at most 50 offsets.
SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=20, records_per_file=40, resync_every=8, seed=5
)
MAX_OFFSETS = 50
CRASH_BATCH = 1  # the second batch: the ledger already has a head to check against


def crash_in_process(spark: Any, archive: Path, output: Path, checkpoint: Path, step: int) -> None:
    """The job, in this process, until its sink fails after ``step`` of ``CRASH_BATCH``."""
    with (
        crashing(CrashPoint(step=step, batch=CRASH_BATCH, mode=CrashMode.RAISE)),
        pytest.raises(Exception) as failure,
    ):
        run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    assert f"crashed after step {step} of batch {CRASH_BATCH}" in str(failure.value)
