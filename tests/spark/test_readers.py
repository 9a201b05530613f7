"""Every path that writes output files leaves one physical schema: pyarrow's hive
dataset and DuckDB read the output, with the same rows, after each of them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.recompute.correct import correct
from app.recompute.replay import replay
from app.sink.crash_points import CrashMode, CrashPoint, crashing
from app.tools.generate import CaptureSpec
from tests.readers import read_everywhere
from tests.spark.faulty_version import FAULTY, FIXED, as_version, run_faulty
from tests.spark.helpers import assert_exact, copy_files, repair_argv, run_job, write_capture

SPEC = CaptureSpec(
    topics=1,
    partitions=2,
    sessions=6,
    updates=40,
    records_per_file=30,
    resync_every=10,
    concurrent=1,
    seed=12,
)
PATTERN = "^sensor-.+"


def test_run_redo_correct_replay_and_repair_leave_a_dataset_every_reader_opens(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out, ckpt = (tmp_path / n for n in ("full", "archive", "out", "ckpt"))
    write_capture(full, SPEC)

    # run (a faulty version, to be corrected below), then a batch redone after step 6
    run_faulty(spark, full, archive, out, ckpt, monkeypatch, below=60, max_offsets=40)
    read_everywhere(out)
    as_version(monkeypatch, FIXED)
    shutil.rmtree(archive)
    copy_files(full, archive, lambda rel: int(rel.name.split("-")[0]) < 120)
    with (
        crashing(CrashPoint(step=6, mode=CrashMode.RAISE)),
        pytest.raises(Exception, match="crashed after step 6"),
    ):
        run_job(spark, archive, out, ckpt, max_offsets_per_trigger=40)
    run_job(spark, archive, out, ckpt, max_offsets_per_trigger=40)  # redoes that batch
    read_everywhere(out)

    # correct the faulty version's ranges, replay everything
    correct(spark, str(archive), str(out), version=FAULTY)
    read_everywhere(out)
    replay(spark, str(archive), str(out), 0, 4_102_444_800_000, topic_pattern=PATTERN)
    read_everywhere(out)

    # repair: the checkpoint is lost; files holding rows past the restart are rewritten
    shutil.rmtree(ckpt)
    assert cli.main(repair_argv(archive, out, ckpt, "--yes")) == 0
    read_everywhere(out)
    shutil.rmtree(archive)
    shutil.copytree(full, archive)
    run_job(spark, archive, out, ckpt)
    assert len(read_everywhere(out)) > 0
    assert_exact(archive, out)
