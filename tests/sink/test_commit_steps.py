"""A crash right after each numbered step of the commit protocol, then a resume.

Beside the SIGKILLs at random moments (``tests/spark/test_exactly_once.py``),
which may miss a step, each case here crashes the sink at one step
(:class:`~app.sink.crash_points.CrashPoint`). At that instant a
reader must see whole files, no row twice, and exactly the rows of the
batches published so far; after a plain run the output must be exactly the
expected output and the ledger must hold each batch once.

Two ways to crash, for CI's time: in this process
(:attr:`~app.sink.crash_points.CrashMode.RAISE`, installed by
:func:`~app.sink.crash_points.crashing`: the query fails out of
``foreachBatch`` and nothing is cleaned up, as the sink cleans up nothing on
any error), where the cases share one SparkSession and the resume keeps the
warm Python workers; and a real SIGKILL of ``tablecast run``
(``TABLECAST_CRASH_AFTER_STEP=<step>[.<files>]:<batch>``), resumed cold by a
new process, as one chain of runs each killed at the next step of a later
batch.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, TopicPartition
from app.errors import ConfigurationError, OutputStateError
from app.sink import ledger as ledger_mod
from app.sink.commit import STEPS
from app.sink.crash_points import (
    CRASH_ENV,
    CRASH_MODE_ENV,
    CrashMode,
    CrashPoint,
    PlanningStop,
    crashing,
)
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table.catalog import threads_released
from app.tools import verify
from tests.process_groups import reap_group
from tests.sink.commit_steps_harness import CRASH_BATCH, MAX_OFFSETS, SPEC, crash_in_process
from tests.spark.helpers import assert_exact, expected_rows, run_argv_over, run_job, write_capture
from tests.table.helpers import assert_follows_ledger


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("steps") / "archive"
    write_capture(path, SPEC)
    return path


def _checkpoint_offsets(checkpoint: Path, batch_id: int) -> Offsets:
    """The end offsets Spark logged for ``batch_id``: "v1", its metadata, then the source's."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    return offsets_mod.from_json(lines[2])


def _visible_files(output: Path) -> set[str]:
    """The files a Parquet reader lists, each checked whole and non-empty."""
    found: set[str] = set()
    for path in output.rglob("*"):
        relative = path.relative_to(output)
        if not path.is_file() or any(p.startswith(("_", ".")) for p in relative.parts):
            continue
        assert path.stat().st_size > 0, f"empty visible file {relative}"
        pq.read_metadata(path)  # raises on a broken file
        found.add(relative.as_posix())
    return found


def _cli_run(
    archive: Path,
    output: Path,
    checkpoint: Path,
    crash: str | None = None,
    max_offsets: int = MAX_OFFSETS,
) -> subprocess.CompletedProcess[bytes]:
    """A real ``tablecast run`` (its own JVM and Python workers: a cold start)."""
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, CRASH_MODE_ENV)}
    # A task, and a file, for each of the batch's two partitions: a crash inside step 6 has
    # one published and one not (app.sources.stream.task_groups).
    env["TABLECAST_GROUP_OFFSETS"] = "0"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            *run_argv_over(archive, output, checkpoint),
            "--max-offsets-per-trigger",
            str(max_offsets),
            "--log-format",
            "json",
        ],  # JSON logs carry the sink's INFO lines: its decisions
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the driver, its JVM and Python workers: one process group
        env=env if crash is None else {**env, CRASH_ENV: crash},
    )
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        reap_group(process)
    return subprocess.CompletedProcess(process.args, process.returncode, b"", stderr)


def _assert_at_crash(
    archive: Path, output: Path, checkpoint: Path, step: int, batch: int = CRASH_BATCH
) -> None:
    """What a reader and the next run find after a crash right after ``step`` of ``batch``."""
    before = _checkpoint_offsets(checkpoint, batch - 1)
    this = _checkpoint_offsets(checkpoint, batch)
    assert not (checkpoint / "commits" / str(batch)).exists()  # Spark never committed it
    _visible_files(output)
    # What a reader sees: exactly the rows of what step 6 had moved into place.
    visible = verify.read_output(str(output))
    shown = verify.expected_output(str(archive), "^sensor-.+", below=this if step >= 6 else before)
    comparison = verify.compare(shown.rows, visible)
    assert comparison.ok, comparison.report()
    assert comparison.expected_rows > 0
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert head is not None and head.end == (this if step >= 7 else before)
    assert bool(ledger.pending_lists()) == (step in (5, 6, 7))
    staged = list((output / ledger_mod.STAGING_DIR).rglob("*.parquet"))
    assert bool(staged) == (step in (3, 4, 5)), staged


def _assert_ledger_consistent(archive: Path, output: Path) -> None:
    """Each batch once, ranges back to back up to the archive's end, every file accounted for."""
    entries = Ledger(resolve(str(output))).entries()
    assert [e.number for e in entries] == sorted({e.number for e in entries})
    assert all(e.kind == ledger_mod.BATCH for e in entries)
    assert [e.batch_id for e in entries] == list(range(len(entries)))
    assert len({e.checkpoint_id for e in entries}) == 1
    for previous, entry in itertools.pairwise(entries):
        assert entry.start == previous.end
    ends: Offsets = {}
    for path in archive.rglob("*.parquet"):  # <topic>/<partition>/<start>-<end>.parquet
        tp = TopicPartition(path.parent.parent.name, int(path.parent.name))
        ends[tp] = max(ends.get(tp, 0), int(path.stem.split("-")[1]))
    assert entries[0].start == dict.fromkeys(ends, 0) and entries[-1].end == ends
    files = [f for e in entries for f in e.files]
    assert len(files) == len(set(files))
    assert set(files) == _visible_files(output)
    assert sum(e.rows for e in entries) == len(expected_rows(archive).rows)
    assert Ledger(resolve(str(output))).pending_lists() == []
    assert not list((output / ledger_mod.STAGING_DIR).rglob("*"))


def _resume_and_check(
    spark: Any,
    archive: Path,
    output: Path,
    checkpoint: Path,
    step: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.clear()
    caplog.set_level(logging.INFO, logger="app.sink")
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    assert_exact(archive, output)
    _assert_ledger_consistent(archive, output)

    decisions = [r.getMessage() for r in caplog.records if r.name.startswith("app.sink")]
    recognised = f"batch {CRASH_BATCH} ends at"
    published = f"batch {CRASH_BATCH} published as ledger entry "
    assert any(m.startswith(recognised if step >= 7 else published) for m in decisions), decisions
    assert not any(m.startswith(published if step >= 7 else recognised) for m in decisions)
    # A crash between writing the pending list and the ledger entry leaves it for the redo.
    assert any("pending list found" in m for m in decisions) == (step in (5, 6))


@pytest.mark.spark
@pytest.mark.parametrize("step", range(1, STEPS + 1))
def test_a_crash_after_each_commit_step_resumes_exactly(
    step: int,
    archive: Path,
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    crash_in_process(spark, archive, output, checkpoint, step)
    _assert_at_crash(archive, output, checkpoint, step)
    _resume_and_check(spark, archive, output, checkpoint, step, caplog)


def test_the_crash_point_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert CrashPoint.from_environment() is None
    monkeypatch.setenv(CRASH_ENV, "6")
    assert CrashPoint.from_environment() == CrashPoint(6, None)
    monkeypatch.setenv(CRASH_ENV, " 8:12 ")
    point = CrashPoint.from_environment()
    assert point is not None and point == CrashPoint(8, 12)
    assert point.reached(8, 12) and not point.reached(8, 11) and not point.reached(7, 12)
    assert CrashPoint(3).reached(3, 0) and CrashPoint(3).reached(3, 9)
    assert point.mode is CrashMode.SIGKILL  # the default: the real thing
    monkeypatch.setenv(CRASH_MODE_ENV, "raise")
    assert CrashPoint.from_environment() == CrashPoint(8, 12, CrashMode.RAISE)
    monkeypatch.setenv(CRASH_MODE_ENV, "gently")
    with pytest.raises(ConfigurationError, match=CRASH_MODE_ENV):
        CrashPoint.from_environment()
    monkeypatch.delenv(CRASH_MODE_ENV)
    monkeypatch.setenv(CRASH_ENV, "6.2:1")  # inside step 6: after its second publish
    point = CrashPoint.from_environment()
    assert point == CrashPoint(6, 1, CrashMode.SIGKILL, files=2)
    assert point.reached(6, 1, files=2) and not point.reached(6, 1) and not point.reached(6, 1, 1)
    for bad in ("0", "14", "x", "3:", "3:-1", "3:1:2", "3.1", "6.", "6.1.2", "10.1"):
        monkeypatch.setenv(CRASH_ENV, bad)
        with pytest.raises(ConfigurationError, match=CRASH_ENV):
            CrashPoint.from_environment()


def test_a_planning_stop_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_ENV, "plan:3")
    monkeypatch.setenv(CRASH_MODE_ENV, "sigstop")
    assert PlanningStop.from_environment() == PlanningStop(3)
    assert CrashPoint.from_environment() is None  # not a commit step
    monkeypatch.setenv(CRASH_ENV, "8:2")
    assert PlanningStop.from_environment() is None
    monkeypatch.setenv(CRASH_MODE_ENV, "sigkill")  # it stops the driver, or nothing
    for bad in ("plan:3", "plan:0", "plan:", "plan:x"):
        monkeypatch.setenv(CRASH_ENV, bad)
        with pytest.raises(ConfigurationError, match=CRASH_ENV):
            PlanningStop.from_environment()


# The SIGKILL chain: ``tablecast run`` number ``n`` (from 1) kills itself at CHAIN[n - 1]
# of batch ``n``, after redoing the batch the run before it died in; the last run ends.
CHAIN = ("1", "2", "3", "4", "5", "6.1", "6", "7", "8")
CHAIN_MAX_OFFSETS = 10  # 14 batches of the module's archive: one per link and more


def _decided(stderr: str, batch: int, where: str) -> None:
    """The run after a crash at ``where`` of ``batch`` redid that batch as the protocol says."""
    step = int(where.split(".", maxsplit=1)[0])
    recognised = f"batch {batch} ends at"
    published = f"batch {batch} published as ledger entry "
    lines = stderr.splitlines()
    assert any(recognised in line for line in lines) == (step >= 7), stderr[-3000:]
    assert any(published in line for line in lines) == (step < 7), stderr[-3000:]
    found = any(f"batch {batch}: a crashed attempt's pending list found" in line for line in lines)
    assert found == (step in (5, 6)), stderr[-3000:]


@pytest.mark.spark
@pytest.mark.chain
def test_sigkilled_inside_each_commit_step_in_turn_every_cold_resume_is_exact(
    archive: Path, tmp_path: Path
) -> None:
    """A real SIGKILL inside every step, each followed by a cold start in a new process.

    One chain instead of a process pair per step (CI pays a JVM start per
    process): each run redoes the batch the previous run was killed in, then
    is killed itself at the next step of the next batch. Steps 1 to 8 and
    inside step 6 (one file of the batch published, the others not).
    """
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    previous: tuple[int, str] | None = None
    for batch, where in enumerate(CHAIN, start=1):
        done = _cli_run(
            archive, output, checkpoint, crash=f"{where}:{batch}", max_offsets=CHAIN_MAX_OFFSETS
        )
        stderr = done.stderr.decode()
        assert done.returncode == -signal.SIGKILL, stderr[-3000:]
        assert f"after step {where} of batch {batch}" in stderr
        if previous is not None:
            _decided(stderr, *previous)
        if "." in where:  # inside step 6: the batch's first file visible, the others not
            [pending] = Ledger(resolve(str(output))).pending_lists()
            assert len(pending.files) > 1
            assert [f for f in pending.files if (output / f).exists()] == [pending.files[0]]
            assert verify.compare(*[verify.read_output(str(output))] * 2).duplicates == 0
            _visible_files(output)
        else:
            _assert_at_crash(archive, output, checkpoint, int(where), batch)
        previous = (batch, where)
    done = _cli_run(archive, output, checkpoint, max_offsets=CHAIN_MAX_OFFSETS)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert previous is not None
    _decided(done.stderr.decode(), *previous)
    assert_exact(archive, output)
    _assert_ledger_consistent(archive, output)
    with threads_released():  # pyiceberg's shared pool, ended after the read
        assert_follows_ledger(output, complete=True)  # one snapshot per entry, the same files


@pytest.mark.spark
@pytest.mark.parametrize("step", range(1, STEPS + 1))
def test_a_checkpoint_lost_after_each_step_of_the_first_batch(
    step: int, archive: Path, spark: Any, tmp_path: Path
) -> None:
    """The checkpoint goes after a crash in batch 0; the next run cuts its batches otherwise.

    Before the ledger holds the batch (steps 1 to 6), the restart starts from the
    earliest offsets: files the crashed batch made visible are retired before it
    publishes. After it (7, 8), the start is refused and names `tablecast repair`.
    """
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    with (
        crashing(CrashPoint(step=step, batch=0, mode=CrashMode.RAISE)),
        pytest.raises(Exception, match=f"crashed after step {step} of batch 0"),
    ):
        run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    shutil.rmtree(checkpoint)
    if step >= 7:
        with pytest.raises(OutputStateError, match="tablecast repair"):
            run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS + 17)
        return
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS + 17)
    assert_exact(archive, output)
    entries = Ledger(resolve(str(output))).entries()
    assert set(f for e in entries for f in e.files) == _visible_files(output)
