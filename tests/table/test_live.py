"""The live job and its table: compaction on a schedule between batches (crash or not),
and the Glue table made before the first batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app import cli
from app.cli import options as cli_options
from app.contract.schema import DEFAULT_SCHEMA
from app.errors import ConfigurationError, OutputStateError
from app.sink import rewrite as rewrite_mod
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table import live as table_live
from app.table.live import ScheduledCompaction, TableSettings
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.sink.commit_steps_harness import MAX_OFFSETS
from tests.sink.commit_steps_harness import SPEC as JOB_SPEC
from tests.spark.helpers import assert_exact, run_job, write_capture
from tests.table.helpers import (
    assert_follows_ledger,
    claimed,
    cuts,
    load_table,
    publish_batches,
    table_rows,
)

SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=20, records_per_file=40, resync_every=8, seed=11
)
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # the captures' days (2026-01-01) are closed


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    archive = tmp_path_factory.mktemp("live") / "archive"
    write_capture(archive, SPEC)
    return verify.expected_output(str(archive), "^sensor-.+").rows


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _assert_exact(expected: pa.Table, output: str) -> None:
    for actual in (table_rows(output), verify.read_output(output)):
        comparison = verify.compare(expected, actual)
        assert comparison.ok, comparison.report()


def _compactions(output: Path | str) -> list[Any]:
    return [
        s
        for s in load_table(output).snapshots()
        if s.summary is not None
        and s.summary.additional_properties.get(table_commit.KIND_KEY) == table_compact.KIND
    ]


def test_the_schedule_compacts_once_per_period_after_the_batch(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    batches: list[int] = []
    clock = Clock(T0)

    def sink(frame: Any, batch_id: int) -> None:  # the sink's place: the batch is committed
        assert frame is None
        batches.append(batch_id)
        table_commit.catch_up(resolve(output))

    job = ScheduledCompaction(sink=sink, output=output, every_s=86_400, clock=clock)
    job(None, 0)  # never compacted before: due
    assert batches == [0] and job.runs == 1 and len(_compactions(output)) == 1
    assert table_live.last_run(resolve(output)) == T0
    _assert_exact(expected, output)

    clock.now = T0 + timedelta(hours=23)
    job(None, 1)
    assert batches == [0, 1] and job.runs == 1  # not due
    # A restarted job keeps the period: the last run is recorded beside the ledger.
    restarted = ScheduledCompaction(sink=sink, output=output, every_s=86_400, clock=clock)
    restarted(None, 2)
    assert restarted.runs == 0

    clock.now = T0 + timedelta(hours=24)
    restarted(None, 3)
    assert restarted.runs == 1 and table_live.last_run(resolve(output)) == clock.now
    _assert_exact(expected, output)
    assert_follows_ledger(output)


class Killed(BaseException):
    """A kill of the job: nothing after it runs in this process."""


class KillAfterPublishing(table_compact.CompactionSteps):
    def published(self) -> None:
        raise Killed("after publishing the merged files, before retiring their inputs")


def test_a_job_killed_during_its_compaction_finishes_it_at_the_first_batch_after_restart(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    clock = Clock(T0)
    killed = ScheduledCompaction(
        sink=lambda frame, batch: None,
        output=output,
        every_s=3600,
        clock=clock,
        steps=KillAfterPublishing(),
    )
    with pytest.raises(Killed):
        killed(None, 0)
    assert verify.compare(expected, table_rows(output)).ok  # Iceberg: one snapshot, exact
    assert verify.compare(expected, verify.read_output(output)).duplicates > 0  # plain: both

    clock.now = T0 + timedelta(minutes=1)  # the restart: compaction is due again
    restarted = ScheduledCompaction(
        sink=lambda frame, batch: None, output=output, every_s=3600, clock=clock
    )
    restarted(None, 0)
    _assert_exact(expected, output)
    assert len(_compactions(output)) >= 1
    assert_follows_ledger(output)


class CompactBesideIt(table_compact.CompactionSteps):
    """While this compaction holds its rewrite's lease (its merged files published, their
    inputs not yet retired), the live job's schedule and `tablecast compact` try theirs."""

    def __init__(self, output: str, clock: Clock) -> None:
        self.output, self.clock = output, clock
        self.refusal = ""

    def published(self) -> None:
        scheduled = ScheduledCompaction(
            sink=lambda frame, batch: None, output=self.output, every_s=60, clock=self.clock
        )
        scheduled(None, 1)  # the stream goes on: nothing raised, nothing compacted
        assert scheduled.runs == 0
        with pytest.raises(OutputStateError) as refused:
            table_compact.compact(resolve(self.output), before=self.clock().date())
        self.refusal = str(refused.value)


def test_a_compaction_never_starts_beside_a_running_one(expected: pa.Table, tmp_path: Path) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    beside = CompactBesideIt(output, Clock(T0))
    report = table_compact.compact(resolve(output), before=T0.date(), steps=beside)
    assert report.inputs > report.outputs
    refusal = beside.refusal  # the running compaction holds the output's rewriter claim
    assert "is being rewritten by `tablecast compact` on host" in refusal, refusal
    assert "\n" not in refusal
    assert len(_compactions(output)) == 1
    _assert_exact(expected, output)
    assert_follows_ledger(output)


def test_the_jobs_compaction_never_waits_and_the_first_batch_after_its_grace_retires_it(
    expected: pa.Table, tmp_path: Path
) -> None:
    """``run --retire-grace``: the compaction returns after its snapshot (the stream goes
    on), its inputs stay for Iceberg queries planned before it, and the batch commit after
    the grace (:func:`finish_abandoned`, the sink's step 8) deletes them."""
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    location = resolve(output)
    table_commit.catch_up(location)
    schedule = ["--compact-every", "1 hour", "--retire-grace", "90s"]
    args = cli.build_parser().parse_args(
        ["run", "--archive", "a", "--output", output, "--checkpoint", "c", *schedule]
    )
    settings = cli_options.table_settings(args)
    assert settings.retire_grace_s == 90.0
    job = ScheduledCompaction(
        sink=lambda frame, batch: None,
        output=output,
        every_s=settings.compact_every_s,
        retire_grace_s=settings.retire_grace_s,
        clock=Clock(T0),
    )
    job(None, 0)
    assert job.runs == 1
    (record,) = rewrite_mod.open_rewrites(location)
    assert record.kind == table_compact.KIND and record.published and record.grace_s == 90.0
    assert not record.running(record.published_at)  # left: anyone's after the grace
    assert verify.compare(expected, table_rows(output)).ok
    assert verify.compare(expected, verify.read_output(output)).duplicates > 0

    during = record.published_at + 45
    finish = rewrite_mod.finish_abandoned
    assert finish(location, now=during, snapshot=table_commit.snapshot_rewrite) == []
    finished = finish(location, now=record.retire_at, snapshot=table_commit.snapshot_rewrite)
    assert [r.key for r in finished] == [record.key]
    _assert_exact(expected, output)
    assert_follows_ledger(output)


@pytest.mark.spark
def test_a_run_compacts_between_batches_on_its_schedule_and_stays_exact(
    spark: Any, tmp_path: Path
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, JOB_SPEC)
    # A period shorter than a batch: due after every batch.
    settings = TableSettings(compact_every_s=0.001)
    reports = run_job(
        spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS, table=settings
    )
    assert len(reports) >= 3
    # The first batch's files are one per day: a compaction after each later batch.
    assert len(table_compact.records(resolve(str(output)))) >= len(reports) - 1
    # Each compaction expires the snapshots that held its inputs (every one before it):
    # what is left is the last compaction's and the batches after it, each in order.
    snapshots = sorted(load_table(output).snapshots(), key=lambda s: s.sequence_number)
    kinds = [s.summary.additional_properties.get(table_commit.KIND_KEY) for s in snapshots]
    assert kinds[0] == table_compact.KIND and set(kinds[1:]) <= {"batch"}
    compactions = _compactions(output)
    assert all(s.summary.operation.value == "overwrite" for s in compactions)
    for snapshot in compactions:
        summary = snapshot.summary
        assert summary["added-records"] == summary["deleted-records"]  # rows unchanged
    assert_exact(archive, output)
    comparison = verify.compare(
        verify.expected_output(str(archive), "^sensor-.+").rows, table_rows(output)
    )
    assert comparison.ok, comparison.report()
    assert_follows_ledger(output)
    head = Ledger(resolve(str(output))).head()
    assert head is not None
    # The job resumes on its compacted output (the checkpoint and the ledger still agree).
    run_job(spark, archive, output, checkpoint, table=settings)
    assert_exact(archive, output)


def test_compacting_needs_a_table(aws: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="--compact-every needs the Iceberg table"):
        table_live.prepare(
            "s3://lake/out",
            TableSettings(compact_every_s=60),
            DEFAULT_SCHEMA,
            claimed("s3://lake/out"),
        )


def test_the_job_path_creates_the_glue_table_idempotently(
    expected: pa.Table,
    aws: dict[str, str],
) -> None:
    """``tablecast run --glue-database`` before its first batch: infra made the database;
    the job catalogues the output, makes the table, catches it up; a restart changes nothing."""
    import boto3

    glue = boto3.client("glue", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": "tablecast"})  # what infra/ creates
    output = "s3://lake/out"
    publish_batches(output, expected, cuts(expected, 2))
    args = cli.build_parser().parse_args(
        [
            "run",
            "--archive",
            "x",
            "--output",
            output,
            "--checkpoint",
            "c",
            "--glue-database",
            "tablecast",
            "--compact-every",
            "1 day",
        ]
    )
    settings = cli_options.table_settings(args)
    assert settings == TableSettings(
        glue_database="tablecast", region="us-east-1", compact_every_s=86_400.0
    )

    fence = claimed(output)
    table_live.prepare(output, settings, DEFAULT_SCHEMA, fence)
    found = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]
    assert found["Parameters"]["table_type"].upper() == "ICEBERG"
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()

    table_live.prepare(output, settings, DEFAULT_SCHEMA, claimed(output))  # the next start
    again = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]
    assert again["Parameters"]["metadata_location"] == found["Parameters"]["metadata_location"]
    assert [d["Name"] for d in glue.get_databases()["DatabaseList"]] == ["tablecast"]
