"""The archiver against a real Kafka-protocol broker (tansu on loopback), then the job.

The job reads what the archiver wrote and must give exactly the expected
output: the archive is a faithful, gapless copy of the topics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from app import metric_names
from app.contract.offsets import TopicPartition
from app.errors import ConfigurationError, DataLossError
from app.metrics.publisher import LogPublisher
from app.ops.archive_lock import ArchiveLock
from app.ops.archiver import Archiver, ArchiverConfig, ArchiveRun, WrittenFile, retention_check
from app.ops.cli import ONE_MESSAGE_PER_BATCH_VARIABLE, main
from app.ops.errors import ArchiveConflictError
from app.ops.produce import LoadSpec, publish
from app.sources import archive, records
from app.sources.archive import ArchiveBackend
from app.sources.kafka import KafkaBackend
from app.sources.kafka_client import KafkaEndpoint
from app.sources.tiered import TieredBackend
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.infra.moto_apply import moto_server
from tests.ops.conftest import REGION
from tests.ops.kafka_helpers import create_topics, read_back
from tests.spark.helpers import assert_exact, run_job

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def archived(root: Path, pattern: str) -> dict[TopicPartition, list[archive.ArchiveFile]]:
    """The archive's files per partition; the listing itself fails on a hole or overlap."""
    return archive.scan(resolve(str(root)), pattern).files


def rows(files: list[archive.ArchiveFile]) -> list[tuple[Any, ...]]:
    table = pa.concat_tables([pq.read_table(f.path) for f in files])
    assert table.schema.equals(records.SCHEMA)
    return list(zip(*(table.column(n).to_pylist() for n in records.SCHEMA.names), strict=True))


def count(root: Path) -> int:
    """Records in the archive's files (per their Parquet footers)."""
    return sum(
        pq.read_metadata(f.path).num_rows for fs in archived(root, ".*").values() for f in fs
    )


def kafka_rows(records: list[Any]) -> list[tuple[Any, ...]]:
    """Kafka's records as the archive's columns (Spark's timestampType: CreateTime is 0)."""
    return [
        (
            r.key(),
            r.value(),
            r.topic(),
            r.partition(),
            r.offset(),
            pa.scalar(r.timestamp()[1] * 1000, pa.timestamp("us", tz="UTC")).as_py(),
            0,
            [{"key": k, "value": v} for k, v in r.headers() or []],
        )
        for r in records
    ]


# Headers as a producer sets them: in order, a key repeated, a value null; and none at all.
HEADERS: list[list[tuple[str, str | bytes | None]]] = [
    [("trace", b"t-1"), ("origin", b"sensor"), ("trace", b"t-2")],
    [],
    [("empty", None), ("utf8", "ü".encode())],
]


def test_headers_are_archived_and_read_back_by_every_backend(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    topic = "sensor-h1-0"
    create_topics(broker, [topic], partitions=1)
    tp = TopicPartition(topic, 0)
    producer = Producer(broker.config(**{"linger.ms": 0, "batch.num.messages": 1}))
    for index, headers in enumerate(HEADERS * 2):
        producer.produce(
            topic, key=b"k", value=b"v%d" % index, partition=0, headers=headers or None
        )
        producer.flush(10)  # one message per batch: tansu's end is then right
    config = ArchiverConfig(
        archive_uri=str(tmp_path / "archive"),
        topic_pattern="^sensor-h1-.+",
        max_records=4,
        max_wait_s=3600,
    )
    with Archiver(broker, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up

    expected = [[{"key": k, "value": v} for k, v in h] for h in HEADERS * 2]
    files = archived(tmp_path / "archive", "^sensor-h1-.+")[tp]
    # The archive's files hold each record's headers in order, [] where it had none ...
    assert rows(files) == kafka_rows(read_back(broker, {topic: 1})[tp])
    assert (
        pa.concat_tables(pq.read_table(f.path) for f in files).column("headers").to_pylist()
        == expected
    )
    # ... and the source gives the same from the archive, from Kafka, and from both.
    kafka = KafkaBackend(broker, "^sensor-h1-.+", timeout_s=10)
    backends: dict[str, ArchiveBackend | KafkaBackend | TieredBackend] = {
        "archive": ArchiveBackend(config.archive_uri, "^sensor-h1-.+"),
        "kafka": kafka,
        "tiered": TieredBackend(kafka, ArchiveBackend(config.archive_uri, "^sensor-h1-.+")),
    }
    for name, backend in backends.items():
        batches = list(backend.reader(tp, 0, 6).read())
        assert all(b.schema == records.SOURCE_SCHEMA for b in batches), name
        table = pa.Table.from_batches(batches, schema=records.SOURCE_SCHEMA)
        assert table.column("headers").to_pylist() == expected, name


@pytest.mark.spark
def test_the_archive_continues_kafka_exactly_and_the_job_reproduces_it(
    broker: KafkaEndpoint, spark: Any, tmp_path: Path
) -> None:
    topics = {"sensor-a1-0": 2, "sensor-a1-1": 2}
    create_topics(broker, list(topics), partitions=2)
    config = ArchiverConfig(
        archive_uri=str(tmp_path / "archive"),
        topic_pattern="^sensor-a1-.+",
        max_records=40,
        max_wait_s=3600,
    )
    capture = CaptureSpec(topics=2, partitions=2, sessions=6, updates=15, prefix="sensor-a1-")
    # First load in transactions: each commit marker takes an offset.
    publish(broker, LoadSpec(capture, run_id="one", transaction_size=25))
    with Archiver(broker, config) as archiver:
        first = archiver.catch_up(timeout_s=60)
    first_ends = {tp: files[-1].end for tp, files in archived(tmp_path / "archive", ".*").items()}
    publish(broker, LoadSpec(replace(capture, seed=8, resync_every=6), run_id="two"))
    with Archiver(broker, config) as archiver:
        second = archiver.catch_up(timeout_s=60)

    assert first.caught_up and second.caught_up
    records = read_back(broker, topics)
    files = archived(tmp_path / "archive", "^sensor-a1-.+")
    assert set(files) == set(records)
    for tp, kafka in records.items():
        # Gapless and exact: from the first record to the last one + 1, every
        # file starting where the one before it ended (scan checked that) ...
        assert files[tp][0].start == kafka[0].offset()
        assert files[tp][-1].end == kafka[-1].offset() + 1
        # ... the second run starting exactly where the first one ended ...
        assert any(f.start == first_ends[tp] for f in files[tp])
        # ... holding Kafka's records, column for column, in offset order.
        assert rows(files[tp]) == kafka_rows(kafka)
    # Transaction markers: some files cover more offsets than they hold records.
    written = first.files + second.files
    assert any(f.end - f.start > f.records for f in written)
    assert sum(f.records for f in written) == sum(len(r) for r in records.values())
    assert max(f.records for f in written) <= 40

    run_job(spark, tmp_path / "archive", tmp_path / "out", tmp_path / "checkpoint")
    comparison = assert_exact(tmp_path / "archive", tmp_path / "out")
    assert comparison.actual_rows > 500


def test_a_second_writer_is_detected_before_an_overlap(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    create_topics(broker, ["sensor-a2-0"], partitions=1)
    publish(
        broker,
        LoadSpec(CaptureSpec(topics=1, partitions=1, sessions=1, updates=30, prefix="sensor-a2-")),
    )
    location = resolve(str(tmp_path / "archive"))
    intruded: list[WrittenFile] = []

    def intruder(file: WrittenFile) -> None:
        if not intruded:  # another archiver writes the next five offsets
            empty = records.SCHEMA.empty_table()
            archive.write_file(location, file.tp, file.end, file.end + 5, empty)
            intruded.append(file)

    config = ArchiverConfig(archive_uri=location.uri, topic_pattern="^sensor-a2-.+", max_records=10)
    with (
        Archiver(broker, config, on_file=intruder) as archiver,
        pytest.raises(ArchiveConflictError) as conflict,
    ):
        archiver.catch_up(timeout_s=30)
    assert conflict.value.expected_start == intruded[0].end
    assert conflict.value.found_end == intruded[0].end + 5
    # Nothing overlapping was written: the listing still checks out.
    files = archived(tmp_path / "archive", ".*")[TopicPartition("sensor-a2-0", 0)]
    assert [(f.start, f.end) for f in files] == [(0, 10), (10, 15)]


def test_an_archive_with_a_hole_is_never_extended(broker: KafkaEndpoint, tmp_path: Path) -> None:
    create_topics(broker, ["sensor-a3-0"], partitions=1)
    location = resolve(str(tmp_path / "archive"))
    tp = TopicPartition("sensor-a3-0", 0)
    for start, end in [(0, 5), (8, 10)]:
        archive.write_file(location, tp, start, end, records.SCHEMA.empty_table())
    config = ArchiverConfig(archive_uri=location.uri, topic_pattern="^sensor-a3-.+")
    with Archiver(broker, config) as archiver, pytest.raises(DataLossError, match="5 to 7"):
        archiver.catch_up(timeout_s=30)
    assert len(list((tmp_path / "archive" / "sensor-a3-0" / "0").iterdir())) == 2


def test_offsets_that_left_the_brokers_before_archiving_are_data_loss() -> None:
    tp = TopicPartition("sensor-x", 3)
    retention_check(tp, archive_end=100, log_start=100)
    retention_check(tp, archive_end=100, log_start=40)
    with pytest.raises(
        DataLossError, match="topic sensor-x partition 3 offsets 100 to 119"
    ) as lost:
        retention_check(tp, archive_end=100, log_start=120)
    assert lost.value.facts == {
        "topic": "sensor-x",
        "partition": 3,
        "first_missing": 100,
        "last_missing": 119,
    }


def test_following_archives_new_records_and_new_topics_until_stopped(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    create_topics(broker, ["sensor-a4-0"], partitions=1)
    config = ArchiverConfig(
        archive_uri=str(tmp_path / "archive"),
        topic_pattern="^sensor-a4-.+",
        max_wait_s=0.2,
        refresh_s=0.2,
        poll_s=0.1,
    )
    stop = threading.Event()
    runs: list[ArchiveRun] = []
    with Archiver(broker, config) as archiver:
        follower = threading.Thread(target=lambda: runs.append(archiver.follow(stop)))
        follower.start()
        try:
            create_topics(broker, ["sensor-a4-1"], partitions=1)  # appears while it runs
            spec = CaptureSpec(topics=2, partitions=1, sessions=4, updates=10, prefix="sensor-a4-")
            report = publish(broker, LoadSpec(spec, run_id="f"))
            deadline = time.monotonic() + 30
            while count(tmp_path / "archive") < report.messages:
                assert time.monotonic() < deadline, "the follower did not archive everything"
                time.sleep(0.2)
        finally:
            stop.set()
            follower.join(timeout=30)
    records = read_back(broker, {"sensor-a4-0": 1, "sensor-a4-1": 1})
    files = archived(tmp_path / "archive", ".*")
    assert set(files) == set(records)
    for tp, kafka in records.items():
        assert rows(files[tp]) == kafka_rows(kafka)
    assert runs and runs[0].partitions == 2


def test_the_cli_produces_one_message_per_batch_for_tansu(
    broker: KafkaEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tansu reports a partition's end from its last batch: right only with one message each."""
    create_topics(broker, ["sensor-c2-0", "sensor-c3-0"], partitions=1)
    servers = ["--bootstrap-servers", broker.bootstrap_servers]
    args = ["--sources", "1", "--sessions", "3", "--updates", "4", "--run-id", "b"]
    assert (
        main(["produce", *servers, "--prefix", "sensor-c2-", "--one-message-per-batch", *args]) == 0
    )
    monkeypatch.setenv(ONE_MESSAGE_PER_BATCH_VARIABLE, "1")  # what the pipeline's env.sh sets
    assert main(["produce", *servers, "--prefix", "sensor-c3-", *args]) == 0
    for topic in ("sensor-c2-0", "sensor-c3-0"):
        assert end_offset(broker, topic) == 18  # 3 sessions of snapshot, 4 updates and end


def end_offset(broker: KafkaEndpoint, topic: str) -> int:
    consumer = Consumer(broker.config(**{"group.id": "tests-end-offset"}))
    try:
        _, high = consumer.get_watermark_offsets(ConfluentTopicPartition(topic, 0), timeout=10)
        return int(high)
    finally:
        consumer.close()


def test_the_cli_produces_and_archives_with_explicit_brokers(
    broker: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_topics(broker, ["sensor-c1-0"], partitions=2)
    servers = ["--bootstrap-servers", broker.bootstrap_servers]
    assert (
        main(
            [
                "produce",
                *servers,
                "--prefix",
                "sensor-c1-",
                "--sources",
                "1",
                "--sessions",
                "3",
                "--updates",
                "4",
                "--run-id",
                "cli",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "archive",
                *servers,
                "--archive",
                str(tmp_path / "archive"),
                "--topic-pattern",
                "^sensor-c1-.+",
                "--timeout",
                "30s",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # 3 sessions of snapshot, 4 updates and end.
    assert "published 18 messages of 3 sessions to" in out
    assert "archived 18 records in" in out and "from 2 partitions" in out
    assert count(tmp_path / "archive") == 18


def test_the_archiver_reads_as_the_environments_job_does() -> None:
    """Signed in, configured and isolated as the hand-off's Kafka options say (the job's)."""
    from app import handoff
    from app.ops import archiver
    from app.ops.environment import Handoff
    from app.ops.errors import HandoffError
    from app.sources.kafka_client import Isolation, KafkaAuth

    secret = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:AmazonMSK_t-AbCdEf"
    base = {handoff.BOOTSTRAP_BROKERS_IAM: "b-1:9098", handoff.REGION: "eu-west-1"}
    found = Handoff(
        "t",
        base
        | {
            handoff.KAFKA_AUTH: "scram",
            handoff.BOOTSTRAP_BROKERS_SASL_SCRAM: "b-1:9096",
            handoff.KAFKA_SECRET_ARN: secret,
            handoff.KAFKA_ISOLATION_LEVEL: "read_uncommitted",
            handoff.KAFKA_OPTIONS: '["fetch.max.bytes=1048576"]',
        },
    )
    endpoint, isolation = found.job_kafka()
    assert endpoint == KafkaEndpoint(
        "b-1:9096",
        KafkaAuth.SCRAM,
        "eu-west-1",
        secret_arn=secret,
        options=(("fetch.max.bytes", "1048576"),),
    )
    assert isolation is Isolation.READ_UNCOMMITTED
    settings = archiver.consumer_settings(ArchiverConfig("archive", isolation=isolation))
    assert settings["isolation.level"] == "read_uncommitted"
    # Without them: the job's defaults.
    assert Handoff("t", base).job_kafka() == (
        KafkaEndpoint("b-1:9098", KafkaAuth.IAM, "eu-west-1"),
        Isolation.READ_COMMITTED,
    )
    assert archiver.consumer_settings(ArchiverConfig("archive"))["isolation.level"] == (
        "read_committed"
    )
    with pytest.raises(HandoffError, match="kafka-auth: 'kerberos' is not one of"):
        Handoff("t", base | {handoff.KAFKA_AUTH: "kerberos"}).job_kafka()
    with pytest.raises(HandoffError, match="bootstrap-brokers-tls: missing"):
        Handoff("t", base | {handoff.KAFKA_AUTH: "tls"}).job_kafka()


def produce_singly(broker: KafkaEndpoint, topic: str, count: int) -> None:
    """``count`` records, one batch each: tansu then reports the partition's end right."""
    producer = Producer(broker.config(**{"linger.ms": 0, "batch.num.messages": 1}))
    for index in range(count):
        producer.produce(topic, key=b"k", value=b"v%d" % index, partition=0)
        producer.flush(10)


def test_a_following_archiver_publishes_its_heartbeat_and_how_far_behind_kafka_it_is(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    topic = "sensor-m1-0"
    create_topics(broker, [topic], partitions=1)
    produce_singly(broker, topic, 7)
    lines: list[dict[str, Any]] = []
    publisher = LogPublisher(environment="dev", write=lambda line: lines.append(orjson.loads(line)))
    config = ArchiverConfig(
        archive_uri=str(tmp_path / "archive"),
        topic_pattern="^sensor-m1-.+",
        max_wait_s=3600,  # nothing is cut until it stops: all 7 stay behind
        poll_s=0.1,
        metrics_every_s=0.2,
    )
    stop = threading.Event()
    with Archiver(broker, config, publisher=publisher) as archiver:
        follower = threading.Thread(target=archiver.follow, args=(stop,))
        follower.start()
        try:
            deadline = time.monotonic() + 30
            while len(lines) < 2 or not any(  # two beats at least: it beats while it follows
                line["metrics"].get(metric_names.ARCHIVER_RECORDS_BEHIND) == 7 for line in lines
            ):
                assert time.monotonic() < deadline, lines[-3:]
                time.sleep(0.1)
        finally:
            stop.set()
            follower.join(timeout=30)
        assert archiver.records_behind() == 0  # written whole at the stop
    beats = [line["metrics"][metric_names.ARCHIVER_HEARTBEAT] for line in lines]
    assert len(beats) >= 2 and set(beats) == {1.0}
    assert all(line["Environment"] == "dev" and line["namespace"] == "Tablecast" for line in lines)
    assert count(tmp_path / "archive") == 7


@pytest.fixture
def locking_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Client]:
    """A moto server whose bucket has Object Lock on, as production's; the archive is there."""
    with moto_server(tmp_path / "moto.log") as endpoint:
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        s3: S3Client = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
        s3.create_bucket(
            Bucket="locked",
            CreateBucketConfiguration={"LocationConstraint": REGION},
            ObjectLockEnabledForBucket=True,
        )
        yield s3


def test_each_archive_file_is_locked_and_one_left_unlocked_by_a_crash_is_locked_at_start(
    broker: KafkaEndpoint, locking_s3: S3Client
) -> None:
    topic = "sensor-l1-0"
    create_topics(broker, [topic], partitions=1)
    produce_singly(broker, topic, 6)
    config = ArchiverConfig(
        archive_uri="s3://locked/archive", topic_pattern="^sensor-l1-.+", max_records=3
    )
    lock = ArchiveLock.of(locking_s3, 30, config.archive_uri)
    before = datetime.now(UTC)
    with Archiver(broker, config, lock=lock) as archiver:
        assert len(archiver.catch_up(timeout_s=60).files) == 2
    # A crash between a file's write and its lock: the next one is written unlocked ...
    produce_singly(broker, topic, 3)
    with Archiver(broker, config) as unlocked:
        (left,) = unlocked.catch_up(timeout_s=60).files
    files = archive.scan(resolve(config.archive_uri), config.topic_pattern).files
    (last,) = [f for f in files[TopicPartition(topic, 0)] if f.start == left.start]
    key = last.path.split("/", 1)[1]
    assert "ObjectLockMode" not in locking_s3.head_object(Bucket="locked", Key=key)
    # ... and the next archiver locks it before anything else.
    with Archiver(broker, config, lock=lock) as archiver:
        assert archiver.catch_up(timeout_s=60).files == []
    for file in files[TopicPartition(topic, 0)]:
        key = file.path.split("/", 1)[1]
        head = locking_s3.head_object(Bucket="locked", Key=key)
        assert head["ObjectLockMode"] == "GOVERNANCE"
        until = head["ObjectLockRetainUntilDate"]
        assert before + timedelta(days=30) <= until <= datetime.now(UTC) + timedelta(days=30)
        # Nobody deletes a locked version for good without bypassing governance.
        version = head["VersionId"]
        with pytest.raises(ClientError, match="AccessDenied"):
            locking_s3.delete_object(Bucket="locked", Key=key, VersionId=version)


def test_a_lock_is_refused_for_an_archive_off_s3() -> None:
    with pytest.raises(ConfigurationError, match="only an s3:// archive is put under lock"):
        ArchiveLock.of(boto3.client("s3", region_name=REGION), 30, "/tmp/archive")
