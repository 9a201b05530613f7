"""Exactly once for any Parquet reader, through SIGKILLs; checkpoint loss; repair; replay."""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from app.errors import OutputStateError
from app.sink import rewrite as rewrite_mod
from app.sink.crash_points import CRASH_ENV
from app.sink.ledger import Ledger
from app.sink.visible import visible_files
from app.storage import resolve
from app.table.catalog import threads_released
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.spark.helpers import (
    assert_exact,
    copy_files,
    lose_the_checkpoint,
    repair_argv,
    run_argv_over,
    run_job,
    write_capture,
)
from tests.spark.killed_runs import (
    assert_readable_and_no_duplicates,
    kill_group,
    published_batches,
    start_cli,
    wait_for_batches,
)
from tests.table.helpers import assert_follows_ledger

KILL_SPEC = CaptureSpec(
    topics=2, partitions=2, sessions=12, updates=90, records_per_file=100, resync_every=25, seed=21
)
# 1,104 offsets in batches of 70: 16 batches, more than the kills can use up (each kill
# comes at most two batches and a moment after the run's start), however fast the machine.
KILL_MAX_OFFSETS = 70


def _kill_and_restart(
    archive: str,
    output: str,
    checkpoint: str,
    kills: int,
    seed: int,
    env: dict[str, str] | None = None,
) -> None:
    """``kills`` runs, each SIGKILLed at a random moment of its batches (one or two
    published, then up to half a second more: any step of the batch after them, its tasks or
    Spark's planning), then a run to the end. A kill timed from the process's start
    would miss a job that finished first on a quick machine, and no kill would land."""
    rng = random.Random(seed)
    args = [
        *run_argv_over(archive, output, checkpoint),
        "--max-offsets-per-trigger",
        str(KILL_MAX_OFFSETS),
    ]
    for kill in range(kills):
        process = start_cli(*args, env=env)
        wait_for_batches(process, output, published_batches(output) + rng.randint(1, 2))
        time.sleep(rng.uniform(0.0, 0.5))
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(
                f"run {kill + 1} ended (exit {process.returncode}) before its kill: "
                f"{stderr.decode()[-3000:]}"
            )
        kill_group(process)
        assert_readable_and_no_duplicates(output)
    final = start_cli(*args, env=env)
    _, stderr = final.communicate(timeout=600)
    assert final.returncode == 0, stderr.decode()[-3000:]


def _duckdb_rows(output: Path) -> int:
    glob = str(output / "*" / "*.parquet")
    found = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true)"
    ).fetchone()
    assert found is not None
    return int(found[0])


def test_sigkills_at_random_moments_lose_and_repeat_nothing(tmp_path: Path) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, KILL_SPEC)
    _kill_and_restart(str(archive), str(output), str(checkpoint), kills=4, seed=1)
    comparison = assert_exact(archive, output)  # pyarrow
    assert _duckdb_rows(output) == comparison.expected_rows  # DuckDB, plain files
    print(f"kills survived: 4, rows: {comparison.actual_rows}, duplicates: 0")


def test_on_s3_too_through_kills(s3: dict[str, str], tmp_path: Path) -> None:
    archive, output = "s3://lake/archive", "s3://lake/output"
    write_capture(archive, KILL_SPEC)  # type: ignore[arg-type]
    _kill_and_restart(archive, output, str(tmp_path / "ckpt"), kills=2, seed=2, env=s3)
    assert_exact(archive, output)


def test_a_lost_checkpoint_is_refused_then_repaired(spark: Any, tmp_path: Path) -> None:
    archive, output, checkpoint = lose_the_checkpoint(spark, tmp_path)

    with pytest.raises(OutputStateError) as refused:
        run_job(spark, archive, output, checkpoint)
    message = str(refused.value)
    assert str(checkpoint) in message and "tablecast repair" in message

    from app import cli

    assert cli.main(repair_argv(archive, output, checkpoint, "--dry-run")) == 0
    assert cli.main(repair_argv(archive, output, checkpoint, "--yes")) == 0
    from app.sink.ledger import Ledger

    ledger = Ledger(resolve(str(output)))
    adopted = ledger.adopted_sessions()
    repair_entry = ledger.head()
    assert repair_entry is not None and repair_entry.kind == "repair"
    run_job(spark, archive, output, checkpoint)  # strict: only adopted sessions may resync-start
    assert_exact(archive, output)
    assert adopted, "the plan should restart some session from a resync snapshot"
    # The restart was bounded by the periodic resyncs, not the partition's start.
    assert all(offset > 0 for offset in repair_entry.end.values())


def test_a_repair_at_the_committed_end_is_followed_by_a_run_the_first_time(
    spark: Any, tmp_path: Path
) -> None:
    """The job had caught up and every session had ended: the repair restarts at the
    committed end itself, and the run after it, with nothing new to read, succeeds."""
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, CaptureSpec(topics=1, partitions=2, sessions=4, concurrent=1, seed=9))
    run_job(spark, archive, output, checkpoint)
    ledger = Ledger(resolve(str(output)))
    caught_up = ledger.head()
    shutil.rmtree(checkpoint)
    from app import cli

    assert cli.main(repair_argv(archive, output, checkpoint, "--yes")) == 0
    repaired = ledger.head()
    assert caught_up is not None and repaired is not None and repaired.kind == "repair"
    assert repaired.end == caught_up.end  # nothing to rebuild: the restart is the end
    run_job(spark, archive, output, checkpoint)
    run_job(spark, archive, output, checkpoint)  # and the one after it
    assert_exact(archive, output)
    head = ledger.head()
    assert head is not None and head.end == caught_up.end


def test_a_swapped_checkpoint_is_refused(spark: Any, tmp_path: Path) -> None:
    spec = CaptureSpec(topics=1, partitions=1, sessions=3, updates=20, seed=8)
    write_capture(tmp_path / "archive", spec)
    run_job(spark, tmp_path / "archive", tmp_path / "out-a", tmp_path / "ckpt-a")
    run_job(spark, tmp_path / "archive", tmp_path / "out-b", tmp_path / "ckpt-b")
    with pytest.raises(OutputStateError, match="is not the one that wrote output"):
        run_job(spark, tmp_path / "archive", tmp_path / "out-a", tmp_path / "ckpt-b")


def test_on_s3_a_checkpoint_lost_after_the_first_batchs_publish_leaves_no_duplicate(
    s3: dict[str, str], tmp_path: Path
) -> None:
    """Commit step 6 of batch 0 (SIGKILL), then the checkpoint is lost: copies retired on S3."""
    archive, output, checkpoint = tmp_path / "archive", "s3://lake/out", tmp_path / "ckpt"
    write_capture(archive, CaptureSpec(topics=1, partitions=2, sessions=4, updates=20, seed=6))
    args = [*run_argv_over(archive, output, checkpoint), "--max-offsets-per-trigger"]
    crashed = start_cli(*args, "30", env={**s3, CRASH_ENV: "6:0"})
    try:
        _, stderr = crashed.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            kill_group(crashed)
    assert crashed.returncode == -signal.SIGKILL, stderr.decode()[-3000:]
    assert verify.read_output(output).num_rows > 0  # batch 0's files are visible
    shutil.rmtree(checkpoint)
    again = start_cli(*args, "47", env=s3)
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr.decode()[-3000:]
    assert_exact(archive, output)


def test_the_live_job_finishes_a_rewrite_once_its_owners_lease_ran_out(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recompute died between publishing a new name and retiring the old one, while the
    job runs: its lease still runs at the job's start (left alone), and runs out while
    the job works; the next published batch finishes the rewrite."""
    full, archive, output = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    write_capture(
        full,
        CaptureSpec(topics=1, partitions=2, sessions=4, updates=30, records_per_file=30, seed=9),
    )
    copy_files(full, archive, lambda rel: int(rel.name.split("-")[0]) < 60)
    run_job(spark, archive, output, tmp_path / "ckpt")
    location = resolve(str(output))
    old = next(f for f in visible_files(location) if not f.startswith("_quarantine/"))
    staged = f"_tablecast/recompute/k/{old}"
    location.write_bytes_atomic(location.child(staged), location.read_bytes(location.child(old)))
    new = rewrite_mod.renamed(old, "r1")
    location.move(location.child(staged), location.child(new))  # published, then the kill
    record = rewrite_mod.Rewrite(
        "r1",
        ((staged, new),),
        (old,),
        owner="dead",
        lease_until=time.time() + rewrite_mod.LEASE_SECONDS,
    )
    location.write_bytes_atomic(
        location.child(rewrite_mod.REWRITES_DIR, "r1.json"), record.to_json()
    )
    assert verify.compare(*[verify.read_output(str(output))] * 2).duplicates > 0

    first = Ledger(location).head()
    assert first is not None
    real_now = rewrite_mod._now

    def now() -> float:  # the lease runs out once the job published a batch more
        head = Ledger(location).head()
        ran = head is not None and head.number > first.number
        return real_now() + (rewrite_mod.LEASE_SECONDS + 1 if ran else 0)

    monkeypatch.setattr(rewrite_mod, "_now", now)
    shutil.rmtree(archive)
    shutil.copytree(full, archive)
    caplog.set_level(logging.INFO, logger="app.sink")
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=40)
    messages = [r.getMessage() for r in caplog.records if r.name == "app.sink.rewrite"]
    assert any("left to its owner" in m for m in messages), messages  # at the start
    assert any(m.startswith("finishing rewrite r1") for m in messages), messages
    assert rewrite_mod.open_rewrites(location) == []
    assert old not in visible_files(location) and new in visible_files(location)
    assert_exact(archive, output)
    with threads_released():  # pyiceberg's shared pool, ended after the read
        assert_follows_ledger(output)
