"""The metrics publisher, the listener's merge and the progress display, without Spark.

Spark's events are PySpark's own event classes built from the JSON that
Spark writes (``QueryProgressEvent.fromJson``); CloudWatch is moto
(``mock_aws``), a closed port, or a socket that accepts and never answers.
"""

from __future__ import annotations

import io
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import orjson
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryTerminatedEvent,
)

from app import metric_names
from app.contract.offsets import TopicPartition
from app.contract.schema import DEFAULT_SCHEMA, TableSchema, parse_schema
from app.contract.table_processor import TableProcessor
from app.engine.state import SessionState
from app.errors import ConfigurationError, IntegrityViolationError, Rule, Violation
from app.metrics.consumer_group import CommitStats, GroupCommitter
from app.metrics.listener import (
    REPORTS_KEPT,
    BatchMetrics,
    Lag,
    MetricsListener,
    SourceLag,
    batch_metrics,
    records_behind,
)
from app.metrics.progress import Console, ProgressDisplay, batch_line
from app.metrics.publisher import (
    MAX_DATUMS_PER_CALL,
    CloudWatchPublisher,
    Datum,
    LogPublisher,
    NullPublisher,
    PublisherKind,
    PublishStats,
    Timeouts,
    Unit,
    make_publisher,
)
from app.recovery.inspect import SessionView, StateSnapshot, format_session, format_summary
from app.sink.commit import BatchReport
from app.sources.kafka_client import KafkaEndpoint
from tests.ops.kafka_helpers import create_topics
from tests.ports import closed_port

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TP0, TP1 = TopicPartition("sensor-0", 0), TopicPartition("sensor-0", 1)


# -- records behind -----------------------------------------------------------


def test_records_behind_sums_partitions_and_names_the_worst() -> None:
    lag = records_behind({TP0: 10, TP1: 40}, {TP0: 30, TP1: 45})
    assert lag == Lag(total=25, worst=TP0, worst_behind=20)


def test_records_behind_is_zero_when_caught_up() -> None:
    assert records_behind({TP0: 30}, {TP0: 30}) == Lag(0, None, 0)
    assert records_behind({}, {}) == Lag(0, None, 0)


def test_a_partition_without_an_end_counts_from_zero() -> None:
    new = TopicPartition("sensor-9", 0)
    assert records_behind({TP0: 5}, {TP0: 5, new: 7}) == Lag(7, new, 7)


# -- Spark's progress merged with the sink's report ----------------------------


def progress_json(
    batch_id: int,
    run_id: str,
    *,
    end: Any,
    latest: Any,
    rows: int = 25,
    duration_ms: int = 2500,
) -> dict[str, Any]:
    """The shape of Spark's ``StreamingQueryProgress.json`` (recorded from a local run)."""
    return {
        "id": "1c0e4a76-8f3f-4a57-9d7e-3d2b2f0a0c11",
        "runId": run_id,
        "name": "tablecast",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "batchId": batch_id,
        "batchDuration": duration_ms,
        "numInputRows": rows,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 10.0,
        "durationMs": {"triggerExecution": duration_ms},
        "stateOperators": [],
        "sources": [
            {
                "description": "PythonMicroBatchStreamWithTriggerAvailableNow@3cdd4ab1",
                "startOffset": None,
                "endOffset": end,
                "latestOffset": latest,
                "numInputRows": rows,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": 10.0,
            }
        ],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
    }


def report(batch_id: int, **fields: Any) -> BatchReport:
    values: dict[str, Any] = {
        "end": {},
        "published": True,
        "files": 3,
        "rows": 90,
        "quarantined": 2,
        "bytes": 4096,
        "violations": 1,
    }
    values.update(fields)
    return BatchReport(batch_id=batch_id, **values)


def test_batch_metrics_merge_progress_with_the_report() -> None:
    # Spark's rows are the source's: two ranges; the messages are those the tasks read.
    progress = progress_json(
        3,
        str(uuid.uuid4()),
        end={"sensor-0:0": 50, "sensor-0:1": 75},
        latest={"sensor-0:0": 60, "sensor-0:1": 88},
        rows=2,
        duration_ms=2500,
    )
    m = batch_metrics(progress, report(3, sessions=7, state_bytes=1000, messages=25))
    assert (m.batch_id, m.input_messages, m.duration_ms) == (3, 25, 2500)
    assert (m.sessions_in_state, m.state_bytes) == (7, 1000)
    assert m.end == {TP0: 50, TP1: 75}
    assert m.lag == SourceLag(Lag(23, TP1, 13), None, 0.0)  # no high watermarks reported
    assert (m.rows_written, m.output_files, m.output_bytes) == (90, 3, 4096)
    assert (m.violations, m.quarantined, m.published) == (1, 2, True)
    assert m.messages_per_second == 10.0
    assert m.started == T0


def test_kafka_offsets_are_understood_too() -> None:
    progress = progress_json(
        0,
        str(uuid.uuid4()),
        end={"sensor-0": {"0": 5, "1": 9}},
        latest={"sensor-0": {"0": 5, "1": 12}},
    )
    m = batch_metrics(progress, None)
    assert m.end == {TP0: 5, TP1: 9}
    assert m.lag is not None and m.lag.readable == Lag(3, TP1, 3)
    assert (m.rows_written, m.output_files) == (0, 0)


def test_a_source_without_latest_offsets_publishes_no_lag() -> None:
    m = batch_metrics(progress_json(0, str(uuid.uuid4()), end={"sensor-0:0": 5}, latest=None), None)
    assert m.lag is None
    names = {d.name for d in m.datums(T0)}
    assert metric_names.RECORDS_BEHIND not in names
    assert names == set(metric_names.ALL) - {
        metric_names.RECORDS_BEHIND,
        metric_names.RECORDS_BEHIND_WORST_PARTITION,
        metric_names.RECORDS_BEHIND_HIGH_WATERMARK,
        metric_names.STABLE_OFFSET_STALLED_SECONDS,
    }


def test_a_batch_publishes_every_metric_the_alarms_may_watch() -> None:
    m = BatchMetrics(
        batch_id=0,
        started=T0,
        input_messages=25,
        duration_ms=2500,
        sessions_in_state=4,
        state_bytes=8544,
        end={TP0: 25},
        lag=SourceLag(Lag(63, TP0, 63), Lag(70, TP0, 70), 12.5),
        rows_written=94,
        output_files=4,
        output_bytes=9000,
        violations=0,
        quarantined=0,
        dropped=3,
        missing=7,
    )
    datums = {d.name: d for d in m.datums(T0)}
    assert set(datums) == set(metric_names.ALL)
    assert len(datums) == len(metric_names.ALL)
    expected = {
        metric_names.HEARTBEAT: 1,
        metric_names.INPUT_MESSAGES: 25,
        metric_names.ROWS_WRITTEN: 94,
        metric_names.BATCH_DURATION_MS: 2500,
        metric_names.RECORDS_BEHIND: 63,
        metric_names.RECORDS_BEHIND_WORST_PARTITION: 63,
        metric_names.RECORDS_BEHIND_HIGH_WATERMARK: 70,
        metric_names.STABLE_OFFSET_STALLED_SECONDS: 12.5,
        metric_names.SESSIONS_IN_STATE: 4,
        metric_names.STATE_BYTES: 8544,
        metric_names.INTEGRITY_VIOLATIONS: 0,
        metric_names.QUARANTINED_MESSAGES: 0,
        metric_names.DROPPED_MESSAGES: 3,
        metric_names.MISSING_SEQS: 7,
        metric_names.OUTPUT_FILES: 4,
        metric_names.OUTPUT_BYTES: 9000,
    }
    assert {name: d.value for name, d in datums.items()} == expected
    assert datums[metric_names.BATCH_DURATION_MS].unit is Unit.MILLISECONDS
    assert datums[metric_names.STATE_BYTES].unit is Unit.BYTES
    assert datums[metric_names.OUTPUT_BYTES].unit is Unit.BYTES
    assert datums[metric_names.INPUT_MESSAGES].unit is Unit.COUNT
    assert datums[metric_names.STABLE_OFFSET_STALLED_SECONDS].unit is Unit.SECONDS
    assert all(d.timestamp == T0 for d in datums.values())


def test_lag_to_the_high_watermark_beside_the_stable_offsets_and_how_long_one_stalled() -> None:
    """A transaction left open on sensor-0:1 since 95 s before the trigger: behind its last
    stable offset the job is caught up, 40 records wait behind its high watermark."""
    since = T0 - timedelta(seconds=95)
    latest = {
        "sensor-0:0": 60,
        "sensor-0:1": 75,
        "@high-watermarks": {"sensor-0:0": 62, "sensor-0:1": 115},
        "@stable-since": {"sensor-0:1": round(since.timestamp() * 1000)},
    }
    end = {"sensor-0:0": 50, "sensor-0:1": 75}
    m = batch_metrics(progress_json(3, str(uuid.uuid4()), end=end, latest=latest), None)
    assert m.lag == SourceLag(Lag(10, TP0, 10), Lag(52, TP1, 40), 95.0)
    values = {d.name: d.value for d in m.datums(T0)}
    assert values[metric_names.RECORDS_BEHIND] == 10
    assert values[metric_names.RECORDS_BEHIND_HIGH_WATERMARK] == 52
    assert values[metric_names.STABLE_OFFSET_STALLED_SECONDS] == 95
    assert (
        "behind 10 (worst sensor-0:0: 10), 52 to the high watermark, a last stable offset "
        "stalled 95 s," in batch_line(m)
    )


# -- the listener ---------------------------------------------------------------


class Lines:
    """A LogPublisher's output, parsed."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, line: str) -> None:
        self.lines.append(line)

    def metrics(self) -> list[dict[str, float]]:
        return [orjson.loads(line)["metrics"] for line in self.lines]


@pytest.fixture
def log_lines() -> Lines:
    return Lines()


def listener_with(lines: Lines) -> tuple[MetricsListener, list[BatchMetrics]]:
    seen: list[BatchMetrics] = []
    listener = MetricsListener(
        LogPublisher(environment="test", write=lines.write), [seen.append], clock=lambda: T0
    )
    return listener, seen


def progress_event(batch_id: int, run_id: str, **kw: Any) -> QueryProgressEvent:
    end = kw.pop("end", {"sensor-0:0": 25 * (batch_id + 1)})
    latest = kw.pop("latest", {"sensor-0:0": 100})
    return QueryProgressEvent.fromJson(
        {"progress": progress_json(batch_id, run_id, end=end, latest=latest, **kw)}
    )


def terminated(run_id: str) -> QueryTerminatedEvent:
    doc = {"id": str(uuid.uuid4()), "runId": run_id, "exception": None}
    return QueryTerminatedEvent.fromJson({**doc, "errorClassOnException": None})


def test_the_listener_merges_each_report_with_its_progress(log_lines: Lines) -> None:
    listener, seen = listener_with(log_lines)
    run_id = str(uuid.uuid4())
    listener.bind(run_id)
    for batch in range(3):
        listener.on_batch(report(batch, rows=10 * (batch + 1)))
        listener.onQueryProgress(progress_event(batch, run_id))
    listener.onQueryTerminated(terminated(run_id))
    assert listener.finish(None, timeout_s=0.1)
    assert [m.batch_id for m in seen] == [0, 1, 2]
    assert [m.rows_written for m in seen] == [10, 20, 30]
    assert [m.lag.readable.total if m.lag else None for m in seen] == [75, 50, 25]
    published = log_lines.metrics()
    assert [p[metric_names.ROWS_WRITTEN] for p in published] == [10, 20, 30]
    assert all(set(p) == set(metric_names.ALL) for p in published)
    assert all(orjson.loads(line)["Environment"] == "test" for line in log_lines.lines)
    assert listener.batches == 3


def test_reports_whose_progress_never_came_are_forgotten(log_lines: Lines) -> None:
    """A job of months: Spark may drop a progress event (its listener bus full); the
    report waiting for it must not stay forever."""
    listener, seen = listener_with(log_lines)
    run_id = str(uuid.uuid4())
    listener.bind(run_id)
    for batch in range(1000):
        listener.on_batch(report(batch, rows=batch))
        if batch % 10 == 0:  # nine of ten progress events lost
            listener.onQueryProgress(progress_event(batch, run_id))
    assert listener.waiting_reports <= REPORTS_KEPT + 1
    listener.onQueryProgress(progress_event(999, run_id))  # a late one still merges
    assert seen[-1].batch_id == 999 and seen[-1].rows_written == 999


def test_the_listener_follows_its_own_run_only(log_lines: Lines) -> None:
    listener, seen = listener_with(log_lines)
    mine, other = str(uuid.uuid4()), str(uuid.uuid4())
    # Events that arrive before bind() are kept and replayed for the bound run.
    listener.on_batch(report(0))
    listener.onQueryProgress(progress_event(0, mine))
    listener.onQueryProgress(progress_event(7, other))
    listener.bind(mine)
    listener.onQueryProgress(progress_event(8, other))
    listener.onQueryTerminated(terminated(other))
    assert not listener.finish(None, timeout_s=0.05)  # another run's end is not ours
    listener.onQueryTerminated(terminated(mine))
    assert listener.finish(None, timeout_s=0.05)
    assert [m.batch_id for m in seen] == [0]


def idle_event(run_id: str) -> QueryIdleEvent:
    doc = {"id": str(uuid.uuid4()), "runId": run_id, "timestamp": "2026-01-01T00:00:00.000Z"}
    return QueryIdleEvent.fromJson(doc)


def test_an_idle_query_still_sends_a_heartbeat(log_lines: Lines) -> None:
    listener, seen = listener_with(log_lines)
    run_id = str(uuid.uuid4())
    listener.bind(run_id)
    listener.onQueryIdle(idle_event(run_id))
    assert log_lines.metrics() == [
        {
            metric_names.HEARTBEAT: 1.0,
            metric_names.RECORDS_BEHIND: 0.0,
            metric_names.RECORDS_BEHIND_WORST_PARTITION: 0.0,
        }
    ]
    assert seen == []


def test_an_idle_trigger_publishes_the_lag_its_last_progress_shows(log_lines: Lines) -> None:
    """Spark runs no batch while nothing is readable, and its idle event carries no offsets:
    the query's last progress (which idle triggers update) says what is behind."""
    listener, seen = listener_with(log_lines)
    run_id = str(uuid.uuid4())
    latest = {
        "sensor-0:0": 25,
        "@high-watermarks": {"sensor-0:0": 40},
        "@stable-since": {"sensor-0:0": round((T0 - timedelta(seconds=30)).timestamp() * 1000)},
    }
    idle_progress = progress_json(4, run_id, end={"sensor-0:0": 25}, latest=latest, rows=0)
    listener.bind(run_id, lambda: orjson.dumps(idle_progress).decode())
    listener.onQueryIdle(idle_event(run_id))
    assert log_lines.metrics() == [
        {
            metric_names.HEARTBEAT: 1.0,
            metric_names.RECORDS_BEHIND: 0.0,
            metric_names.RECORDS_BEHIND_WORST_PARTITION: 0.0,
            metric_names.RECORDS_BEHIND_HIGH_WATERMARK: 15.0,
            metric_names.STABLE_OFFSET_STALLED_SECONDS: 30.0,
        }
    ]
    assert seen == []


def test_a_strict_mode_violation_is_published_when_the_run_fails(log_lines: Lines) -> None:
    listener, _ = listener_with(log_lines)
    violation = Violation("sensor-0", 1, 42, "s-1", Rule.SEQUENCE, "seq 3", "seq 5")
    listener.finish(IntegrityViolationError(violation), timeout_s=0)
    assert log_lines.metrics() == [{metric_names.INTEGRITY_VIOLATIONS: 1.0}]


def test_a_failing_observer_does_not_stop_publishing(log_lines: Lines) -> None:
    def broken(metrics: BatchMetrics) -> None:
        raise RuntimeError("display gone")

    listener = MetricsListener(LogPublisher(environment="t", write=log_lines.write), [broken])
    run_id = str(uuid.uuid4())
    listener.bind(run_id)
    listener.onQueryProgress(progress_event(0, run_id))
    listener.onQueryProgress(progress_event(1, run_id))
    assert len(log_lines.lines) == 2


# -- publishers ----------------------------------------------------------------


def datums(n: int, name: str = metric_names.INPUT_MESSAGES) -> list[Datum]:
    return [Datum(name, float(i), Unit.COUNT, T0 + timedelta(seconds=i)) for i in range(n)]


def test_the_log_publisher_writes_one_json_line_per_publish(log_lines: Lines) -> None:
    publisher = LogPublisher(environment="dev", write=log_lines.write)
    publisher.publish(
        [
            Datum(metric_names.HEARTBEAT, 1, Unit.COUNT, T0),
            Datum(metric_names.ROWS_WRITTEN, 12, Unit.COUNT, T0),
        ]
    )
    publisher.publish([])
    [line] = log_lines.lines
    doc = orjson.loads(line)
    assert doc == {
        "time": "2026-01-01T00:00:00.000+00:00",
        "event": "metrics",
        "namespace": "Tablecast",
        "Environment": "dev",
        "metrics": {"Heartbeat": 1.0, "RowsWritten": 12.0},
    }
    assert publisher.close() == PublishStats(accepted=2, sent=2)


def test_a_declared_jobs_metrics_carry_its_name_beside_the_environment(
    log_lines: Lines, moto_aws: None
) -> None:
    logged = make_publisher(PublisherKind.LOG, environment="dev", write=log_lines.write, job="lab")
    logged.publish([Datum(metric_names.HEARTBEAT, 1, Unit.COUNT, T0)])
    [line] = log_lines.lines
    assert (orjson.loads(line)["Environment"], orjson.loads(line)["Job"]) == ("dev", "lab")
    client = boto3.client("cloudwatch", region_name="eu-west-1")
    publisher = CloudWatchPublisher(environment="staging", client=client, job="lab")
    publisher.publish([Datum(metric_names.HEARTBEAT, 1.0, Unit.COUNT, datetime.now(UTC))])
    assert publisher.close(timeout_s=30) == PublishStats(accepted=1, sent=1)
    [metric] = client.list_metrics(Namespace=metric_names.NAMESPACE)["Metrics"]
    # What the job's alarms watch (infra/stacks/monitoring.py, job_dimensions).
    assert metric["Dimensions"] == [
        {"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": "staging"},
        {"Name": metric_names.JOB_DIMENSION, "Value": "lab"},
    ]
    with pytest.raises(ConfigurationError, match="--job"):
        make_publisher(PublisherKind.LOG, environment="dev", job=" ")


def test_a_log_publisher_that_cannot_write_drops_and_does_not_raise() -> None:
    def closed(line: str) -> None:
        raise BrokenPipeError

    publisher = LogPublisher(environment="dev", write=closed)
    publisher.publish(datums(3))
    assert publisher.stats() == PublishStats(accepted=3, dropped=3, failed_calls=1)


def test_the_null_publisher_takes_everything() -> None:
    publisher = NullPublisher()
    publisher.publish(datums(4))
    assert publisher.close() == PublishStats(accepted=4)


def test_cloudwatch_gets_batched_calls_with_the_environment_dimension(moto_aws: None) -> None:
    client = boto3.client("cloudwatch", region_name="eu-west-1")
    calls: list[int] = []
    client.meta.events.register(
        "provide-client-params.cloudwatch.PutMetricData",
        lambda params, **_: calls.append(len(params["MetricData"])),
    )
    publisher = CloudWatchPublisher(environment="staging", client=client)
    now = datetime.now(UTC).replace(microsecond=0)
    batch = [Datum(metric_names.INPUT_MESSAGES, 1.0, Unit.COUNT, now)] * 2500
    publisher.publish(batch)
    stats = publisher.close(timeout_s=30)
    assert stats == PublishStats(accepted=2500, sent=2500)
    # However the drain thread met the queue: no call above the API's limit, none wasted.
    assert sum(calls) == 2500 and max(calls) <= MAX_DATUMS_PER_CALL and len(calls) >= 3
    [metric] = client.list_metrics(Namespace=metric_names.NAMESPACE)["Metrics"]
    assert metric["MetricName"] == metric_names.INPUT_MESSAGES
    assert metric["Dimensions"] == [{"Name": "Environment", "Value": "staging"}]
    stats_doc = client.get_metric_statistics(
        Namespace=metric_names.NAMESPACE,
        MetricName=metric_names.INPUT_MESSAGES,
        Dimensions=[{"Name": "Environment", "Value": "staging"}],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=600,
        Statistics=["Sum", "SampleCount"],
    )
    [point] = stats_doc["Datapoints"]
    assert point["Sum"] == 2500 and point["SampleCount"] == 2500


@pytest.fixture
def black_hole() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a hung CloudWatch)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_hung_cloudwatch_never_blocks_the_publisher(moto_aws: None, black_hole: str) -> None:
    publisher = CloudWatchPublisher(
        environment="prod",
        endpoint_url=black_hole,
        region="eu-west-1",
        capacity=100,
        timeouts=Timeouts(1.0, 2.0, 1),
    )
    started = time.monotonic()
    for _ in range(50):
        publisher.publish(datums(100))
    publishing = time.monotonic() - started
    closing_started = time.monotonic()
    stats = publisher.close(timeout_s=0.3)
    closing = time.monotonic() - closing_started
    # A publisher that waited for the hung call would take its 2 s read timeout at least;
    # the margins below that are for a loaded machine, not for speed.
    assert publishing < 1.5, publishing
    assert closing < 1.8, closing
    assert stats.accepted == 5000
    assert stats.sent == 0
    assert stats.dropped == 5000  # queue overflow, the hung call, what was left at close
    publisher.publish(datums(5))  # after close: dropped, not raised
    assert publisher.stats().dropped == 5005


def test_an_unreachable_cloudwatch_costs_only_metrics(moto_aws: None) -> None:
    publisher = CloudWatchPublisher(
        environment="prod",
        region="eu-west-1",
        endpoint_url=f"http://127.0.0.1:{closed_port()}",
        timeouts=Timeouts(0.5, 0.5, 1),
    )
    for _ in range(3):
        publisher.publish(datums(12))
        time.sleep(0.05)
    stats = publisher.close(timeout_s=5)
    assert stats.accepted == stats.dropped == 36
    assert stats.sent == 0 and stats.failed_calls >= 1


def test_make_publisher_chooses_by_kind(moto_aws: None) -> None:
    assert isinstance(make_publisher(PublisherKind.NONE, environment="x"), NullPublisher)
    assert isinstance(make_publisher(PublisherKind.LOG, environment="x"), LogPublisher)
    cloudwatch = make_publisher(PublisherKind.CLOUDWATCH, environment="x", region="eu-west-1")
    assert isinstance(cloudwatch, CloudWatchPublisher)
    cloudwatch.close(timeout_s=1)
    with pytest.raises(ConfigurationError, match="--environment"):
        make_publisher(PublisherKind.LOG, environment=" ")


def test_cloudwatch_without_a_region_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigurationError, match="--region"):
        make_publisher(PublisherKind.CLOUDWATCH, environment="prod")


# -- progress display ------------------------------------------------------------


def metrics(batch_id: int, **fields: Any) -> BatchMetrics:
    values: dict[str, Any] = {
        "started": T0,
        "input_messages": 30,
        "duration_ms": 2000,
        "sessions_in_state": 4,
        "state_bytes": 100,
        "end": {TP0: 30},
        "lag": SourceLag(Lag(58, TP0, 58), Lag(58, TP0, 58), 0.0),
        "rows_written": 94,
        "output_files": 4,
        "output_bytes": 2048,
    }
    values.update(fields)
    return BatchMetrics(batch_id=batch_id, **values)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_is_a_line_per_batch_and_a_summary() -> None:
    out = io.StringIO()
    clock = Clock()
    display = ProgressDisplay(Console(out, tty=False), clock)
    display.on_report(report(0, trace=("sensor-0:0@3 session s: applied",)))
    display.on_metrics(metrics(0))
    open_transaction = SourceLag(Lag(0, None, 0), Lag(7, TP0, 7), 0.0)
    display.on_metrics(metrics(1, lag=open_transaction, quarantined=3, published=False))
    clock.now += 4.0
    display.finish("log", PublishStats(accepted=24, sent=24))
    assert out.getvalue().splitlines() == [
        "trace sensor-0:0@3 session s: applied",
        "batch 0: 30 messages (15/s), 94 rows in 4 files, behind 58 (worst sensor-0:0: 58), "
        "58 to the high watermark, 4 sessions in state",
        "batch 1: 30 messages (15/s), 94 rows in 4 files, behind 0, 7 to the high watermark, "
        "4 sessions in state, 3 quarantined (already published)",
        "done: 2 batches, 60 messages (15/s), 188 rows in 8 files (4.0 KiB), 3 quarantined, "
        "0 violations, 4.0 s",
        "at the end: behind 0, 7 to the high watermark, 4 sessions in state",
        "metrics (log): 24 sent, 0 dropped",
    ]


def test_on_a_terminal_the_status_line_is_redrawn_under_other_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A terminal wider than the status line: it is cut at the terminal's width, which
    # pytest-xdist's workers (COLUMNS=80) and a narrow terminal would make shorter.
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    clock = Clock()
    console = Console(out, tty=True)
    display = ProgressDisplay(console, clock)
    clock.now += 2.0
    display.on_metrics(metrics(0))
    console.line('{"event":"metrics"}')
    display.on_metrics(metrics(1))
    display.finish(
        "cloudwatch", PublishStats(accepted=24, sent=20, dropped=4, failed_calls=1), finished=False
    )
    text = out.getvalue()
    behind = "behind 58 (worst sensor-0:0: 58), 58 to the high watermark"
    first = f"batches 1 | 30 messages (15/s) | {behind} | 4 sessions | 94 rows"
    second = f"batches 2 | 60 messages (30/s) | {behind} | 4 sessions | 188 rows"
    assert text.startswith(f"\r\x1b[K{first}")
    # A permanent line clears the status line, then the status is drawn again below it.
    assert f'\r\x1b[K{{"event":"metrics"}}\n{first}' in text
    assert f"\r\x1b[K{second}\n" in text  # the last status stays on screen
    assert text.endswith("metrics (cloudwatch): 20 sent, 4 dropped in 1 failed calls\n")
    assert "\nstopped: 2 batches" in text


# -- inspect's printing (reading the state is tested on Spark) -------------------


def snapshot_of(
    *views: SessionView, total: int | None = None, schema: TableSchema = DEFAULT_SCHEMA
) -> StateSnapshot:
    return StateSnapshot(
        schema,
        TableProcessor(schema),
        "/ck",
        4,
        {TP0: 60},
        views,
        total or len(views),
        sum(v.status == "closed" for v in views),
        sum(v.status == "quarantined" for v in views),
    )


def test_a_session_prints_its_table_and_position() -> None:
    table = {"r1": ("r1", 1.5, "ok"), "r22": ("r22", None, None)}
    view = SessionView(TP0, SessionState("s-1", 7, 41, 1_767_225_600_000, 0, user=table))
    assert format_session(snapshot_of(view), view).splitlines() == [
        "session s-1 in checkpoint /ck after batch 4 (ends at sensor-0:0@60)",
        "  status          open",
        "  topic           sensor-0",
        "  partition       0",
        "  last seq        7",
        "  last offset     41",
        "  last ts         2026-01-01T00:00:00.000+00:00",
        "  table           2 rows",
        "    row_id  value  status",
        "    r1        1.5  ok",
        "    r22      null  null",
    ]


def test_a_session_of_a_declared_schema_prints_its_columns_as_the_output_names_them() -> None:
    schema = parse_schema(
        '[key]\ncolumns = ["site", "id"]\n[columns]\nsite = "string"\nid = "int64"\n'
        'at = { type = "timestamp", nullable = true }\nday = { type = "date", nullable = true }\n'
        'price = { type = "decimal(6,2)", nullable = true, output = "cost" }\n',
        "t.toml",
    )
    at = datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    row = ("a", -7, at, date(2026, 2, 3), Decimal("12.50"))
    table = {("a", -7): row, ("b", 12): ("b", 12, None, None, None)}
    view = SessionView(TP0, SessionState("s-1", 7, 41, 0, 0, user=table))
    assert format_session(snapshot_of(view, schema=schema), view).splitlines()[-3:] == [
        "    site  id  at                         day          cost",
        "    a     -7  2026-01-01T01:00:00+01:00  2026-02-03  12.50",
        "    b     12  null                       null         null",
    ]


def test_the_summary_lists_sessions_and_counts() -> None:
    open_ = SessionView(TP0, SessionState("s-1", 7, 41, 0, 0, user={"r1": ("r1", 1.0, None)}))
    closed = SessionView(TP0, SessionState("s-2", 9, 50, 0, 0, closed=True))
    quarantined = SessionView(
        TP0, SessionState("s-3", 3, 52, 0, 0, quarantine="rule 2: expected seq 4")
    )
    text = format_summary(snapshot_of(open_, closed, quarantined, total=10))
    assert text.splitlines() == [
        "checkpoint /ck after batch 4 (ends at sensor-0:0@60)",
        "10 sessions in state: 8 open, 1 closed, 1 quarantined",
        "session  status       topic     partition  last seq  last offset  rows",
        "s-1      open         sensor-0          0         7           41     1",
        "s-2      closed       sensor-0          0         9           50     0",
        "s-3      quarantined  sensor-0          0         3           52     0",
        "(the first 3 of 10 sessions; --limit N shows more, --session ID one in full)",
    ]


# -- the consumer group (optional; tansu, the loopback Kafka broker of tests/ops) ---


def test_each_batch_end_is_committed_to_the_consumer_group(
    broker: KafkaEndpoint,
) -> None:
    create_topics(broker, ["sensor-obs"], partitions=2)
    p0, p1 = TopicPartition("sensor-obs", 0), TopicPartition("sensor-obs", 1)
    committer = GroupCommitter("tablecast-test", broker.config())
    started = time.monotonic()
    committer(metrics(0, end={p0: 25, p1: 40}))
    committer(metrics(1, end={p0: 50, p1: 80}, published=False))
    committer(metrics(2, end={}))  # nothing to commit
    assert time.monotonic() - started < 0.5  # asynchronous
    assert committer.close(timeout_s=10) == CommitStats(requested=2, committed=2, failed=0)
    assert committer.wait_closed(timeout_s=10)

    reader = Consumer(broker.config(**{"group.id": "tablecast-test"}))
    try:
        committed = reader.committed(
            [KafkaPartition("sensor-obs", 0), KafkaPartition("sensor-obs", 1)], timeout=10
        )
    finally:
        reader.close()
    assert {p.partition: p.offset for p in committed} == {0: 50, 1: 80}


def test_an_unreachable_broker_costs_only_the_commits() -> None:
    committer = GroupCommitter(
        "tablecast-test",
        # librdkafka's close waits session.timeout.ms for a coordinator that never answers.
        {
            "bootstrap.servers": f"127.0.0.1:{closed_port()}",
            "socket.timeout.ms": 1000,
            "session.timeout.ms": 1000,
        },
    )
    started = time.monotonic()
    committer(metrics(0, end={TP0: 25}))
    assert time.monotonic() - started < 0.5
    stats = committer.close(timeout_s=1)
    assert time.monotonic() - started < 5
    assert stats.requested == 1 and stats.committed == 0
    assert committer.wait_closed(timeout_s=10), "the client's close outlived the test"
