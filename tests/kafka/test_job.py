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

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app import cli
from app.ops.archiver import Archiver, ArchiverConfig
from app.ops.produce import LoadSpec, ProduceReport, publish
from app.sources.kafka_client import KafkaEndpoint
from app.spark.job import JobConfig, KafkaSource, Trigger, run
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.kafka.helpers import delete_topics, produce
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
    config = JobConfig(
        source=KafkaSource(broker, timeout_s=15),
        output=str(output),
        checkpoint=str(tmp_path / "ckpt"),
        topic_pattern="^sensor-k2-.+",
        trigger=Trigger.parse("processing-time=1 second"),
    )
    failures: list[BaseException] = []

    def job() -> None:
        try:
            run(spark, config)
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)

    thread = threading.Thread(target=job, name="tablecast-k2")
    thread.start()
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
        for query in spark.streams.active:
            query.stop()
        thread.join(timeout=60)
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
