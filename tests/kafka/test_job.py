"""``tablecast run --bootstrap-servers``: the job on local Spark over a real Kafka-protocol broker.

The operator's load generator (app/ops/produce.py) publishes capture sessions
to tansu on loopback, one message per batch (tansu reports a partition's end
by batch), some loads in transactions so that markers leave offsets without
a record. The archiver (app/ops/archiver.py) copies the same topics to a raw
archive, from which ``tablecast verify`` computes the expected output: the
job reading Kafka must give exactly that, and the job reading the archive
must give the same rows.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from app import cli, metric_names
from app.contract.offsets import TopicPartition
from app.metrics.listener import MetricsListener
from app.metrics.publisher import LogPublisher
from app.ops import cli as ops_cli
from app.ops.archiver import Archiver, ArchiverConfig
from app.ops.produce import LoadSpec, ProduceReport, publish
from app.sink.ledger import Ledger
from app.sources.kafka_client import KafkaEndpoint
from app.spark.job import JobConfig, KafkaSource, Trigger, run
from app.storage import resolve
from app.tools import verify
from app.tools.generate import START_MS, CaptureSpec
from tests.kafka.helpers import delete_topics, open_transaction, produce
from tests.kafka.metadata_proxy import Proxied
from tests.ops.kafka_helpers import create_topics
from tests.spark.helpers import assert_exact, ledger_end, run_job
from tests.spark.killed_runs import assert_readable_and_no_duplicates, kill_group, start_cli
from tests.tansu import free_port

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Loaded:
    """Topics on the broker and the archiver's copy of them."""

    pattern: str
    archive: Path
    messages: int


def load(
    broker: KafkaEndpoint, archive: Path, spec: CaptureSpec, run_id: str, transaction_size: int = 0
) -> ProduceReport:
    """Publish a capture (creating its topics), then bring the archive up to date."""
    create_topics(broker, [f"{spec.prefix}{i}" for i in range(spec.topics)], spec.partitions)
    report = publish(
        broker,
        LoadSpec(
            spec, run_id=run_id, transaction_size=transaction_size, one_message_per_batch=True
        ),
    )
    config = ArchiverConfig(
        archive_uri=str(archive),
        topic_pattern=f"^{spec.prefix}.+",
        max_records=100,
        max_wait_s=3600,
    )
    with Archiver(broker, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up
    return report


def run_args(
    broker: KafkaEndpoint, pattern: str, output: Path, checkpoint: Path, *extra: str
) -> list[str]:
    return [
        "run",
        "--bootstrap-servers",
        broker.bootstrap_servers,
        "--topic-pattern",
        pattern,
        "--output",
        str(output),
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        "available-now",
        "--metrics",
        "none",
        *extra,
    ]


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by(
        [
            ("topic", "ascending"),
            ("partition", "ascending"),
            ("offset", "ascending"),
            ("row_id", "ascending"),
        ]
    )


@pytest.fixture(scope="module")
def loaded(broker: KafkaEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """Two loads over two topics of two partitions, the first in transactions."""
    archive = tmp_path_factory.mktemp("k1") / "archive"
    spec = CaptureSpec(
        topics=2, partitions=2, sessions=8, updates=30, resync_every=10, prefix="sensor-k1-", seed=3
    )
    first = load(broker, archive, spec, "one", transaction_size=16)
    second = load(
        broker,
        archive,
        CaptureSpec(topics=2, partitions=2, sessions=4, updates=20, prefix="sensor-k1-", seed=4),
        "two",
    )
    return Loaded("^sensor-k1-.+", archive, first.messages + second.messages)


@pytest.fixture(scope="module")
def kafka_output(
    broker: KafkaEndpoint, loaded: Loaded, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The job's output from Kafka, in several micro-batches, with a client rack set."""
    work = tmp_path_factory.mktemp("k1-run")
    code = cli.main(
        run_args(
            broker,
            loaded.pattern,
            work / "out",
            work / "ckpt",
            "--max-offsets-per-trigger",
            "150",
            "--kafka-client-rack",
            "local-az1",
        )
    )
    assert code == 0
    return work / "out"


def test_the_load_generators_records_through_kafka_give_what_verify_expects(
    loaded: Loaded, kafka_output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    comparison = assert_exact(loaded.archive, kafka_output)
    assert comparison.expected_rows > loaded.messages  # snapshots give many rows each
    code = cli.main(
        [
            "verify",
            "--archive",
            str(loaded.archive),
            "--output",
            str(kafka_output),
            "--topic-pattern",
            loaded.pattern,
        ]
    )
    assert code == 0, capsys.readouterr().out
    # Transaction markers took offsets: the partitions' ends were offsets without a record.
    archived = verify.read_output(str(kafka_output))
    assert len(set(archived.column("offset").to_pylist())) < loaded.messages + 4


def test_the_archivers_copy_through_the_archive_gives_the_same_rows(
    loaded: Loaded, kafka_output: Path, spark: Any, tmp_path: Path
) -> None:
    run_job(
        spark,
        loaded.archive,
        tmp_path / "out",
        tmp_path / "ckpt",
        topic_pattern=loaded.pattern,
        max_offsets_per_trigger=100,
    )
    from_kafka = sorted_rows(verify.read_output(str(kafka_output)))
    from_archive = sorted_rows(verify.read_output(str(tmp_path / "out")))
    assert from_kafka.num_rows > 0
    assert from_archive.equals(from_kafka)  # row for row, column for column
    # The archive ends at each partition's last record; Kafka after a trailing
    # transaction marker where there is one (the job read up to it, waiting for nothing).
    via_archive, via_kafka = ledger_end(tmp_path / "out"), ledger_end(kafka_output)
    assert via_archive.keys() == via_kafka.keys()
    assert all(via_archive[tp] <= via_kafka[tp] for tp in via_kafka)
    assert any(via_archive[tp] < via_kafka[tp] for tp in via_kafka)


def test_a_topic_created_while_the_job_runs_is_read(
    broker: KafkaEndpoint, spark: Any, tmp_path: Path
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    load(
        broker,
        archive,
        CaptureSpec(topics=1, partitions=1, sessions=3, updates=10, prefix="sensor-k2-"),
        "before",
    )
    config = every_second(broker, "^sensor-k2-.+", output, tmp_path / "ckpt")
    thread, failures = running(spark, config)
    try:
        wait_until_exact(archive, output, failures, "^sensor-k2-.+")
        # A second topic appears while the job runs; both get new sessions.
        load(
            broker,
            archive,
            CaptureSpec(
                topics=2, partitions=1, sessions=4, updates=10, prefix="sensor-k2-", seed=5
            ),
            "after",
        )
        comparison = wait_until_exact(archive, output, failures, "^sensor-k2-.+")
        assert {"sensor-k2-0", "sensor-k2-1"} <= {tp.topic for tp in ledger_end(output)}
        assert comparison.expected_rows > 0
    finally:
        stop(spark, thread)
    assert not failures, failures


def wait_until_exact(
    archive: Path, output: Path, failures: list[BaseException], pattern: str, timeout_s: float = 90
) -> verify.Comparison:
    expected = verify.expected_output(str(archive), pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        assert not failures, failures
        comparison = verify.compare(expected.rows, verify.read_output(str(output)))
        if comparison.ok:
            return comparison
        assert time.monotonic() < deadline, comparison.report()
        time.sleep(0.5)


def test_a_run_killed_mid_stream_and_restarted_leaves_every_row_once(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    load(
        broker,
        archive,
        CaptureSpec(
            topics=2,
            partitions=2,
            sessions=8,
            updates=40,
            resync_every=12,
            prefix="sensor-k3-",
            seed=6,
        ),
        "kill",
        transaction_size=25,
    )
    args = run_args(
        broker, "^sensor-k3-.+", output, tmp_path / "ckpt", "--max-offsets-per-trigger", "80"
    )
    # Killed (the driver, its JVM and Python workers) somewhere after the first
    # published micro-batch, before the last.
    process = start_cli(*args)
    deadline = time.monotonic() + 180
    while process.poll() is None and not ledger_end(output):
        assert time.monotonic() < deadline, "no micro-batch was published"
        time.sleep(0.2)
    time.sleep(random.Random(3).uniform(0.0, 1.0))
    assert process.poll() is None, "the run finished before it could be killed"
    kill_group(process)
    assert_readable_and_no_duplicates(str(output))
    killed_at = ledger_end(output)
    final = start_cli(*args)
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr.decode()[-3000:]
    assert_exact(archive, output)
    assert ledger_end(output) != killed_at  # the restart had work left


def test_a_topic_deleted_and_created_again_stops_the_run_with_one_line_and_exit_3(
    broker: KafkaEndpoint, spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Re-created with more records than the checkpoint's offsets: the run would resume in
    the middle of the new topic; its new topic ID refuses it."""
    report = load(
        broker,
        tmp_path / "archive",
        CaptureSpec(topics=1, partitions=1, sessions=2, updates=4, prefix="sensor-k4-"),
        "loss",
    )
    args = run_args(broker, "^sensor-k4-.+", tmp_path / "out", tmp_path / "ckpt")
    assert cli.main(args) == 0
    delete_topics(broker, ["sensor-k4-0"])
    create_topics(broker, ["sensor-k4-0"], partitions=1)
    produce(broker, report.offsets.popitem()[0], [b"{}"] * (report.messages + 5))
    capfd.readouterr()
    assert cli.main(args) == 3
    [line] = capfd.readouterr().err.splitlines()
    assert line.startswith(
        f"tablecast run: data loss in Kafka at {broker.bootstrap_servers}: topic sensor-k4-0 "
        "was deleted and created again (its identity was "
    ), line
    assert line.endswith("restore it, or start a new run with a new --output and --checkpoint")


def test_unreachable_brokers_end_the_run_with_one_line_and_exit_5(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    capfd.readouterr()
    code = cli.main(
        [
            "run",
            "--bootstrap-servers",
            servers,
            "--kafka-timeout",
            "3s",
            "--output",
            str(tmp_path / "out"),
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--trigger",
            "available-now",
        ]
    )
    assert code == 5
    [line] = capfd.readouterr().err.splitlines()
    assert line.startswith(
        f"tablecast run: Kafka at {servers}: could not list the topics within 3 s: "
    ), line


def every_second(
    endpoint: KafkaEndpoint, pattern: str, output: Path, checkpoint: Path
) -> JobConfig:
    """The job reading ``pattern`` with a trigger every second (run it with :func:`running`)."""
    return JobConfig(
        source=KafkaSource(endpoint, timeout_s=15),
        output=str(output),
        checkpoint=str(checkpoint),
        topic_pattern=pattern,
        trigger=Trigger.parse("processing-time=1 second"),
    )


def archive_now(broker: KafkaEndpoint, archive: Path, pattern: str) -> None:
    """Bring the archive up to date with the pattern's topics (verify's expectation)."""
    config = ArchiverConfig(
        archive_uri=str(archive), topic_pattern=pattern, max_records=100, max_wait_s=3600
    )
    with Archiver(broker, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up


def running(
    spark: Any, config: JobConfig, **kw: Any
) -> tuple[threading.Thread, list[BaseException]]:
    """The job with a processing-time trigger, on a thread; its failure is handed back."""
    failures: list[BaseException] = []

    def job() -> None:
        try:
            run(spark, config, **kw)
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)

    thread = threading.Thread(target=job, name=f"tablecast-{config.topic_pattern}")
    thread.start()
    return thread, failures


def stop(spark: Any, thread: threading.Thread) -> None:
    for query in spark.streams.active:
        query.stop()
    thread.join(timeout=60)


def test_a_topic_missing_from_the_metadata_for_a_few_triggers_leaves_the_output_exact(
    proxied: Proxied, spark: Any, tmp_path: Path
) -> None:
    """Read to its end, then missing from every metadata answer for 4 s while the job
    triggers every second: it is asked for again, not dropped and read anew from offset 0
    (which stopped the engine, exit 6, at every restart)."""
    endpoint, proxy = proxied.endpoint, proxied.proxy
    archive, output = tmp_path / "archive", tmp_path / "out"
    pattern = "^sensor-k5-.+"
    spec = CaptureSpec(topics=2, partitions=1, sessions=3, updates=6, prefix="sensor-k5-")
    load(endpoint, archive, spec, "before")
    config = every_second(endpoint, pattern, output, tmp_path / "ckpt")
    thread, failures = running(spark, config)
    try:
        wait_until_exact(archive, output, failures, pattern)
        withheld = proxy.withheld
        proxy.hide_for("sensor-k5-0", 4.0)
        time.sleep(5)
        assert proxy.withheld > withheld  # the job's listings met it
        load(endpoint, archive, dataclasses.replace(spec, seed=9), "after")
        comparison = wait_until_exact(archive, output, failures, pattern)
        assert comparison.expected_rows > 0
    finally:
        proxy.show("sensor-k5-0")
        stop(spark, thread)
    assert not failures, failures


def test_a_deleted_topic_stops_the_run_until_it_is_retired_then_the_next_start_carries_on(
    broker: KafkaEndpoint,
    spark: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    pattern = "^sensor-k6-.+"
    spec = CaptureSpec(topics=2, partitions=1, sessions=3, updates=6, prefix="sensor-k6-")
    load(broker, archive, spec, "first")
    # A session still open on the topic to retire: a snapshot after the others, and no end.
    retiring = TopicPartition("sensor-k6-1", 0)
    ts = START_MS + 30 * 86_400_000
    snapshot = b'{"session":"open-1","seq":0,"type":"snapshot","ts":%d,' % ts
    snapshot += b'"rows":[{"id":"r1","value":1.5,"status":"ok"}]}'
    produce(broker, retiring, [snapshot], key=b"open-1", timestamp_ms=ts)
    archive_now(broker, archive, pattern)
    args = run_args(broker, pattern, output, tmp_path / "ckpt", "--kafka-timeout", "3s")
    assert cli.main(args) == 0
    read_to = ledger_end(output)[retiring]

    delete_topics(broker, ["sensor-k6-1"])
    capfd.readouterr()
    assert cli.main(args) == 3
    [line] = capfd.readouterr().err.splitlines()
    assert line == (
        f"tablecast run: data loss in {broker.description}: topic sensor-k6-1 is gone: the "
        f"job read it up to sensor-k6-1:0@{read_to} before it stopped; whether records were "
        "produced to it after them cannot be told; if it was retired on purpose, "
        "`tablecast-ops retire-topic --topic sensor-k6-1` records that, and the next start "
        "carries on without it"
    )

    retire = ["retire-topic", "--bootstrap-servers", broker.bootstrap_servers]
    retire += ["--output", str(output), "--topic", "sensor-k6-1", "--topic-pattern", pattern]
    assert ops_cli.main(retire) == 0
    said = capfd.readouterr().out.splitlines()
    head = Ledger(resolve(str(output))).head()
    assert head is not None
    assert said == [
        f"retired topic sensor-k6-1 at sensor-k6-1:0@{read_to} (the offsets the job had "
        f"published): {output}/_tablecast/retired-topics/sensor-k6-1.json",
        "Kafka no longer has topic sensor-k6-1: retired at the offsets the job had published; "
        "records produced after them, if any, were lost with the topic",
        f"1 sessions still open after the output's batch {head.batch_id} (ledger entry "
        f"{head.number})",
        f"  open-1 (sensor-k6-1:0, last seq 0 at offset {read_to - 1})",
    ]

    load(broker, archive, dataclasses.replace(spec, topics=1, seed=4), "second")
    assert cli.main(args) == 0
    assert_exact(archive, output)  # every record of both topics once, the new ones too
    assert retiring not in ledger_end(output)


def test_an_idle_job_behind_an_open_transaction_publishes_its_lag_to_the_high_watermark(
    broker: KafkaEndpoint, spark: Any, tmp_path: Path
) -> None:
    """Nothing readable, so no batch: the idle triggers' metrics say what waits behind the
    transaction left open, and how long its last stable offset has not moved."""
    archive, output = tmp_path / "archive", tmp_path / "out"
    pattern = "^sensor-k7-.+"
    load(
        broker,
        archive,
        CaptureSpec(topics=1, partitions=1, sessions=2, updates=4, prefix="sensor-k7-"),
        "idle",
    )
    lines: list[str] = []
    listener = MetricsListener(LogPublisher(environment="k7", write=lines.append))
    config = every_second(broker, pattern, output, tmp_path / "ckpt")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1s")
    thread, failures = running(spark, config, listener=listener)
    producer = None
    try:
        wait_until_exact(archive, output, failures, pattern)
        tp = TopicPartition("sensor-k7-0", 0)
        producer = open_transaction(broker, tp, 2)
        produce(broker, tp, [b"{}"] * 2)  # committed, behind the transaction
        deadline = time.monotonic() + 60
        while True:
            assert not failures, failures
            idle = [m for m in map(metrics_of, list(lines)) if metric_names.INPUT_MESSAGES not in m]
            behind = [m for m in idle if m.get(metric_names.RECORDS_BEHIND_HIGH_WATERMARK) == 4]
            if any(m[metric_names.STABLE_OFFSET_STALLED_SECONDS] >= 2 for m in behind):
                break
            assert time.monotonic() < deadline, lines[-3:]
            time.sleep(0.5)
        assert all(m[metric_names.RECORDS_BEHIND] == 0 for m in behind)
    finally:
        stop(spark, thread)
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
        if producer is not None:
            producer.abort_transaction(30)
    assert not failures, failures


def metrics_of(line: str) -> dict[str, float]:
    return dict(orjson.loads(line)["metrics"])
