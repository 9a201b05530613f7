"""A batch recognised as published after a crash leaves nothing of the crashed attempt behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from app.contract import offsets as offsets_mod
from app.sink import ledger as ledger_mod
from app.sink.crash_points import CrashMode, CrashPoint, crashing
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.spark.helpers import assert_exact, run_job, write_capture

SPEC = CaptureSpec(topics=1, partitions=2, sessions=3, updates=8, seed=11)


@pytest.mark.spark
def test_a_redo_after_a_crash_after_step_7_clears_the_pending_list(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    # The only batch (0) dies after its ledger entry, before step 8 and Spark's commit.
    # In this process, as tests/sink/test_commit_steps.py crashes every step.
    with (
        crashing(CrashPoint(step=7, batch=0, mode=CrashMode.RAISE)),
        pytest.raises(Exception, match="crashed after step 7 of batch 0"),
    ):
        run_job(spark, archive, output, checkpoint)
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert head is not None and not (checkpoint / "commits" / "0").exists()
    [pending] = ledger.pending_lists()
    assert (pending.end_key, pending.files) == (offsets_mod.fingerprint(head.end), head.files)

    caplog.set_level(logging.INFO, logger="app.sink")
    run_job(spark, archive, output, checkpoint)
    decisions = [r.getMessage() for r in caplog.records if r.name == "app.sink.commit"]
    recognised = (
        f"batch 0 ends at {offsets_mod.describe(head.end)}, as ledger entry {head.number} (batch 0)"
    )
    assert [m[: len(recognised)] for m in decisions] == [recognised], decisions  # nothing else
    assert ledger.pending_lists() == []
    assert not list((output / ledger_mod.STAGING_DIR).rglob("*"))
    assert [e.number for e in ledger.entries()] == [head.number]
    assert_exact(archive, output)
