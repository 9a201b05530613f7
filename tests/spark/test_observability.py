"""Metrics, progress and state inspection of real runs on local Spark.

One resync run with known faults goes through ``tablecast run --metrics
cloudwatch`` against moto's server on loopback; its published metrics are
read back through the CloudWatch API, and its checkpoint is inspected. A
second run publishes to a CloudWatch that is not there.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from pyspark.sql.streaming.listener import QueryProgressEvent

from app import cli, metric_names
from app.contract.offsets import TopicPartition
from app.contract.table_processor import Table, TableProcessor
from app.engine.in_process import run_partitions
from app.engine.machine import IntegrityMode, RecordColumns, Rules
from app.engine.state import SessionState
from app.metrics.listener import BatchMetrics, MetricsListener
from app.metrics.publisher import CloudWatchPublisher, Timeouts
from app.recovery.inspect import read_state
from app.sink.checkpoint import CheckpointLog
from app.sink.commit import BatchReport
from app.sources import archive
from app.spark.job import ArchiveSource, JobConfig, Trigger, run
from app.storage import resolve
from app.tools import verify
from app.tools.generate import Capture, CaptureSpec
from tests.ports import closed_port
from tests.spark.helpers import (
    QUARANTINING_SPEC,
    assert_exact,
    expected_rows,
    run_argv,
    write_capture,
)

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

ENVIRONMENT = "obs-test"
REGION = "eu-west-1"
MAX_OFFSETS = 80


@dataclass(frozen=True)
class PublishedRun:
    archive: Path
    output: Path
    checkpoint: Path
    capture: Capture
    stdout: str
    cloudwatch: CloudWatchClient
    started: datetime

    def statistic(self, metric: str, statistic: str) -> float:
        doc = self.cloudwatch.get_metric_statistics(
            Namespace=metric_names.NAMESPACE,
            MetricName=metric,
            Dimensions=[{"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": ENVIRONMENT}],
            StartTime=self.started - timedelta(minutes=10),
            EndTime=datetime.now(UTC) + timedelta(minutes=10),
            Period=3600,
            Statistics=[statistic],  # type: ignore[list-item]
        )
        [point] = doc["Datapoints"]
        return float(point[statistic])  # type: ignore[literal-required]


@pytest.fixture(scope="module")
def published(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PublishedRun]:
    root = tmp_path_factory.mktemp("published")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with pytest.MonkeyPatch.context() as env:
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                env.setenv(name, "testing")
            env.setenv("AWS_ENDPOINT_URL_CLOUDWATCH", endpoint)
            capture = write_capture(root / "archive", QUARANTINING_SPEC)
            started = datetime.now(UTC)
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                code = cli.main(
                    [
                        *run_argv(root),
                        "--integrity",
                        "resync",
                        "--max-offsets-per-trigger",
                        str(MAX_OFFSETS),
                        "--metrics",
                        "cloudwatch",
                        "--environment",
                        ENVIRONMENT,
                        "--region",
                        REGION,
                    ]
                )
            assert code == 0, stdout.getvalue()
            client = boto3.client("cloudwatch", region_name=REGION, endpoint_url=endpoint)
            yield PublishedRun(
                root / "archive",
                root / "out",
                root / "ckpt",
                capture,
                stdout.getvalue(),
                client,
                started,
            )
    finally:
        server.stop()


def visible_files(output: Path) -> list[Path]:
    return [p for p in output.rglob("*.parquet") if "_tablecast" not in p.parts]


def test_a_run_publishes_every_alarm_metric_with_the_values_of_its_input(
    spark: Any, published: PublishedRun
) -> None:
    run = published
    expected = expected_rows(run.archive, IntegrityMode.RESYNC)
    assert_exact(run.archive, run.output, IntegrityMode.RESYNC)
    batches = len(re.findall(r"^batch \d+: ", run.stdout, re.MULTILINE))
    assert batches >= 3

    metrics = run.cloudwatch.list_metrics(Namespace=metric_names.NAMESPACE)["Metrics"]
    assert {m["MetricName"] for m in metrics} == set(metric_names.ALL)
    assert all(
        m["Dimensions"] == [{"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": ENVIRONMENT}]
        for m in metrics
    )

    def total(name: str) -> float:
        return run.statistic(name, "Sum")

    assert run.statistic(metric_names.HEARTBEAT, "SampleCount") == batches
    assert total(metric_names.HEARTBEAT) == batches
    assert total(metric_names.INPUT_MESSAGES) == run.capture.messages
    assert total(metric_names.ROWS_WRITTEN) == verify.read_output(str(run.output)).num_rows
    assert total(metric_names.QUARANTINED_MESSAGES) == len(expected.quarantined) > 0
    assert total(metric_names.INTEGRITY_VIOLATIONS) == len(expected.violations) > 0
    files = visible_files(run.output)
    assert total(metric_names.OUTPUT_FILES) == len(files)
    assert total(metric_names.OUTPUT_BYTES) == sum(p.stat().st_size for p in files)
    assert run.statistic(metric_names.BATCH_DURATION_MS, "SampleCount") == batches
    assert run.statistic(metric_names.BATCH_DURATION_MS, "Minimum") > 0
    # Several batches of at most MAX_OFFSETS: behind at first, caught up at the end.
    assert run.statistic(metric_names.RECORDS_BEHIND, "Maximum") >= (
        run.capture.messages - MAX_OFFSETS
    )
    assert run.statistic(metric_names.RECORDS_BEHIND, "Minimum") == 0
    assert run.statistic(metric_names.RECORDS_BEHIND_WORST_PARTITION, "Minimum") == 0
    worst = run.statistic(metric_names.RECORDS_BEHIND_WORST_PARTITION, "Maximum")
    assert 0 < worst <= run.statistic(metric_names.RECORDS_BEHIND, "Maximum")
    # The archive's offsets are all readable: its high watermarks are its ends, and no
    # stable offset stalls.
    for statistic in ("Maximum", "Minimum"):
        assert run.statistic(metric_names.RECORDS_BEHIND_HIGH_WATERMARK, statistic) == (
            run.statistic(metric_names.RECORDS_BEHIND, statistic)
        )
    assert run.statistic(metric_names.STABLE_OFFSET_STALLED_SECONDS, "Maximum") == 0
    # Sessions stay in state (closed ones until their idle timeout): the last count is the most.
    in_state = read_state(spark, str(run.checkpoint), str(run.output)).total
    assert (
        run.statistic(metric_names.SESSIONS_IN_STATE, "Maximum")
        == in_state
        == QUARANTINING_SPEC.sessions
    )
    assert run.statistic(metric_names.STATE_BYTES, "Minimum") > 0

    sent = len(metric_names.ALL) * batches
    assert f"): {sent} sent, 0 dropped" in run.stdout
    assert "at the end: behind 0, 0 to the high watermark, 8 sessions in state" in run.stdout


def expected_states(
    archive_path: Path, end: dict[TopicPartition, int]
) -> dict[str, tuple[TopicPartition, SessionState[Table]]]:
    """Each session's state after the records before ``end``, by the job's own engine."""
    location = resolve(str(archive_path))
    index = archive.scan(location, "^sensor-.+")

    def read(tp: TopicPartition) -> Iterator[RecordColumns]:
        first = index.earliest(tp)
        for batch in archive.read_range(
            location, index.covering(tp, first, end[tp]), first, end[tp]
        ):
            yield RecordColumns.from_arrow(batch)

    outcome = run_partitions(sorted(end), read, TableProcessor(), Rules(IntegrityMode.RESYNC))
    return {
        name: (tp, state)
        for tp, partition in outcome.states.items()
        for name, state in partition.sessions.items()
    }


def test_inspect_shows_each_sessions_state_after_a_batch(
    spark: Any, published: PublishedRun
) -> None:
    run = published
    log = CheckpointLog(spark, str(run.checkpoint))
    last = log.last_committed()
    assert last is not None and last >= 2
    final = read_state(spark, str(run.checkpoint), str(run.output))
    assert final.batch_id == last

    snapshot = read_state(spark, str(run.checkpoint), str(run.output), at_batch=1)
    end = log.offsets(1)
    assert end is not None and snapshot.end == end
    expected = expected_states(run.archive, end)
    assert {v.state.session: (v.tp, v.state) for v in snapshot.sessions} == expected
    assert snapshot.total == len(expected)

    # A session caught mid-way: open after batch 1, closed by the end of the run.
    closed_later = {v.state.session for v in final.sessions if v.status == "closed"}
    midway = [
        v.state
        for v in snapshot.sessions
        if v.status == "open" and v.state.session in closed_later and v.state.user
    ]
    assert midway
    state = midway[0]  # sessions come ordered by id
    assert state.user is not None
    tp = expected[state.session][0]

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(
            [
                "inspect",
                "--checkpoint",
                str(run.checkpoint),
                "--output",
                str(run.output),
                "--at-batch",
                "1",
                "--session",
                state.session,
            ]
        )
    assert code == 0
    lines = stdout.getvalue().splitlines()
    assert lines[0].startswith(f"session {state.session} in checkpoint ")
    assert f"  last seq        {state.last_seq}" in lines
    assert f"  last offset     {state.last_offset}" in lines
    assert f"  partition       {tp.partition}" in lines
    assert f"  table           {len(state.user)} rows" in lines
    header = lines.index(f"  table           {len(state.user)} rows")
    printed = [line.split() for line in lines[header + 2 :]]
    assert printed == [
        [row_id, "null" if value is None else repr(value), "null" if status is None else status]
        for row_id, value, status in state.user.values()
    ]


def test_an_unreachable_cloudwatch_costs_metrics_and_nothing_else(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    spec = CaptureSpec(topics=1, partitions=2, sessions=4, updates=30, records_per_file=40, seed=4)
    capture = write_capture(tmp_path / "archive", spec)
    publisher = CloudWatchPublisher(
        environment=ENVIRONMENT,
        region=REGION,
        endpoint_url=f"http://127.0.0.1:{closed_port()}",
        timeouts=Timeouts(0.5, 0.5, 1),
    )
    seen: list[BatchMetrics] = []
    listener = MetricsListener(publisher, [seen.append])
    # The listener reads each progress's JSON in one call: PySpark's field by field
    # conversion (0.17 s a batch, which a run's end waited for) is never made.
    converted: list[object] = []
    monkeypatch.setattr(QueryProgressEvent, "fromJObject", converted.append)
    reports: list[BatchReport] = []
    config = JobConfig(
        source=ArchiveSource(str(tmp_path / "archive")),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ckpt"),
        trigger=Trigger.parse("available-now"),
        max_offsets_per_trigger=50,
    )
    run(spark, config, reports.append, listener=listener)
    closing = time.monotonic()
    stats = publisher.close(timeout_s=2)
    assert time.monotonic() - closing < 3

    assert_exact(tmp_path / "archive", tmp_path / "out")
    assert len(reports) >= 2
    # Every batch was measured and shown, as if CloudWatch were there ...
    assert [m.batch_id for m in seen] == [r.batch_id for r in reports]
    assert sum(m.input_messages for m in seen) == capture.messages
    assert seen[-1].lag is not None and seen[-1].lag.readable.total == 0
    # ... the listener never waited on it ...
    assert listener.slowest_event_s < 0.5
    assert converted == []
    # ... and only the metrics were lost, every one of them counted.
    assert stats.sent == 0
    assert stats.dropped == stats.accepted == len(metric_names.ALL) * len(seen)
    assert stats.failed_calls >= 1
