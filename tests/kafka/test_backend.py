"""The Kafka backend against a real Kafka-protocol broker (tansu on loopback), without Spark.

Bounds (the pattern's partitions with their earliest and latest offsets),
range reads (offset order, the source's columns, ranges whose last offsets
hold no record), consumers kept between ranges, data loss, unreachable
brokers, and the options that carry the settings to Spark's workers.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
import urllib.parse
from collections.abc import Collection, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from app.contract.offsets import TopicPartition
from app.errors import (
    ConfigurationError,
    DataLossError,
    ExitCode,
    SourceUnavailableError,
    UnreadableRecordError,
)
from app.local import tansu
from app.local.processes import LOOPBACK, free_port
from app.sources import kafka as kafka_source
from app.sources.archive import ArchiveBackend
from app.sources.backend import Bounds
from app.sources.backend_options import archive_options, common_options, from_options, kafka_options
from app.sources.kafka import KafkaBackend, KafkaRange
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint
from app.sources.records import SOURCE_SCHEMA
from app.sources.stream import OffsetStreamReader
from tests.kafka.helpers import delete_topics, open_transaction, produce
from tests.ops.kafka_helpers import create_topics
from tests.tansu import listening


def _read(reader: KafkaRange) -> pa.Table:
    return pa.Table.from_batches(list(reader.read()), schema=SOURCE_SCHEMA)


def _held(bounds: dict[TopicPartition, Bounds]) -> dict[TopicPartition, Bounds]:
    """The offsets each partition holds, without its stable offset and identity."""
    return {tp: Bounds(b.earliest, b.latest) for tp, b in bounds.items()}


def test_bounds_list_every_partition_the_pattern_matches_and_new_ones_later(
    broker: KafkaEndpoint,
) -> None:
    create_topics(broker, ["kb1-a", "kb1-b", "xkb1-a", "__kb1-internal"], partitions=2)
    a0, a1 = TopicPartition("kb1-a", 0), TopicPartition("kb1-a", 1)
    produce(broker, a0, [b"x"] * 5)
    produce(broker, a1, [b"y"] * 3)
    produce(broker, TopicPartition("__kb1-internal", 0), [b"z"])
    backend = KafkaBackend(broker, "kb1-.+")
    bounds = backend.bounds()
    assert _held(bounds) == {
        a0: Bounds(0, 5),
        a1: Bounds(0, 3),
        TopicPartition("kb1-b", 0): Bounds(0, 0),
        TopicPartition("kb1-b", 1): Bounds(0, 0),
    }
    # Each topic's ID, the same for all its partitions; no transaction: all is stable.
    assert bounds[a0].identity == bounds[a1].identity != bounds[TopicPartition("kb1-b", 0)].identity
    assert all(b.identity and b.stable == b.latest for b in bounds.values())
    # The whole name must match (xkb1-a does not), and internal topics are never read.
    assert KafkaBackend(broker, "kb1").bounds() == {}
    assert set(KafkaBackend(broker, ".*kb1-internal").bounds()) == set()
    # A topic created later is in the next listing.
    create_topics(broker, ["kb1-c"], partitions=1)
    assert _held(backend.bounds())[TopicPartition("kb1-c", 0)] == Bounds(0, 0)


def test_the_checkpoints_offsets_are_the_archives_json(broker: KafkaEndpoint) -> None:
    create_topics(broker, ["kb2-a"], partitions=2)
    produce(broker, TopicPartition("kb2-a", 0), [b"v"] * 30)
    produce(broker, TopicPartition("kb2-a", 1), [b"w"] * 10)
    reader = OffsetStreamReader(KafkaBackend(broker, "^kb2-.+"), max_offsets=20, starting={})
    start = reader.initialOffset()
    assert _offsets(start) == {"kb2-a:0": 0, "kb2-a:1": 0}
    assert start["@topic-ids"] == {
        "kb2-a": reader.backend.bounds()[TopicPartition("kb2-a", 0)].identity
    }
    # maxOffsetsPerTrigger is shared by backlog, as for the archive.
    assert _offsets(reader.latestOffset(start, ReadMaxRows(20))) == {"kb2-a:0": 15, "kb2-a:1": 5}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert _offsets(end) == {"kb2-a:0": 30, "kb2-a:1": 10}
    parts = reader.partitions(start, end)
    assert [(p.tp, p.start, p.end) for p in parts] == [  # type: ignore[attr-defined]
        (TopicPartition("kb2-a", 0), 0, 30),
        (TopicPartition("kb2-a", 1), 0, 10),
    ]
    assert _read(parts[1].reader).column("value").to_pylist() == [b"w"] * 10  # type: ignore[attr-defined]


def test_a_range_gives_its_records_in_offset_order_with_the_sources_columns(
    broker: KafkaEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topics(broker, ["kb3-a"], partitions=1)
    tp = TopicPartition("kb3-a", 0)
    produce(broker, tp, [f"v{i}".encode() for i in range(25)], timestamp_ms=1_700_000_000_000)
    monkeypatch.setattr(kafka_source, "BATCH_ROWS", 4)
    batches = list(KafkaRange(broker, tp, 3, 20).read())
    assert all(b.schema == SOURCE_SCHEMA for b in batches)
    assert [b.num_rows for b in batches] == [4, 4, 4, 4, 1]
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(3, 20))
    assert table.column("value").to_pylist() == [f"v{i}".encode() for i in range(3, 20)]
    assert set(table.column("key").to_pylist()) == {b"k"}
    assert set(table.column("topic").to_pylist()) == {"kb3-a"}
    assert set(table.column("partition").to_pylist()) == {0}
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [
        (1_700_000_000_000 + i) * 1000 for i in range(3, 20)
    ]
    assert set(table.column("timestampType").to_pylist()) == {0}  # CreateTime, as Spark says
    assert set(table.column("served_by").to_pylist()) == {"kafka"}


def test_a_record_timestamp_no_timestamp_column_holds_is_refused_naming_the_record(
    broker: KafkaEndpoint,
) -> None:
    """A producer's CreateTime past int64 microseconds was wrapped by NumPy's product (2**62 ms
    written as 1970-01-01); Spark's source fails on it, and so does a range, naming it."""
    create_topics(broker, ["kb5-t"], partitions=1)
    tp = TopicPartition("kb5-t", 0)
    edge = (2**63 - 1) // 1000  # the last millisecond a timestamp column holds
    for index, stamp in enumerate([edge, edge + 1, 2**62, 1_700_000_000_000]):
        produce(broker, tp, [b"r%d" % index], timestamp_ms=stamp)
    backend = KafkaBackend(broker, "^kb5-.+", timeout_s=3)

    def refusal(start: int, end: int) -> UnreadableRecordError:
        with pytest.raises(UnreadableRecordError) as caught:
            _read(backend.reader(tp, start, end))
        return caught.value

    assert _read(backend.reader(tp, 0, 1)).column("timestamp").cast(pa.int64()).to_pylist() == [
        edge * 1000
    ]
    first = refusal(0, 4)
    assert first.facts == {"topic": "kb5-t", "partition": 0, "offset": 1, "timestamp_ms": edge + 1}
    assert f"offset 1 has the Kafka timestamp {edge + 1} ms" in str(first)
    assert first.exit_code == ExitCode.DATA_LOSS
    assert refusal(2, 3).facts["timestamp_ms"] == 2**62
    assert _read(backend.reader(tp, 3, 4)).column("offset").to_pylist() == [3]


def test_a_range_whose_last_offsets_hold_no_record_ends_there(broker: KafkaEndpoint) -> None:
    """Transaction markers take offsets 4 and 9; a reader that waited for them would time out."""
    create_topics(broker, ["kb4-t"], partitions=1)
    tp = TopicPartition("kb4-t", 0)
    produce(broker, tp, [f"r{i}".encode() for i in range(8)], transaction_every=4)
    backend = KafkaBackend(broker, "^kb4-.+", timeout_s=3)
    assert _held(backend.bounds())[tp] == Bounds(0, 10)

    def offsets(start: int, end: int) -> list[int]:
        return list(_read(backend.reader(tp, start, end)).column("offset").to_pylist())

    assert offsets(0, 10) == [0, 1, 2, 3, 5, 6, 7, 8]  # the partition's last offset is a marker
    assert offsets(2, 5) == [2, 3]  # a marker last, records after it
    assert offsets(4, 5) == []  # a marker alone
    assert offsets(9, 10) == []


def test_consumers_are_kept_between_ranges_and_dropped_after_a_failure(
    broker: KafkaEndpoint,
) -> None:
    create_topics(broker, ["kb5-a"], partitions=1)
    tp = TopicPartition("kb5-a", 0)
    produce(broker, tp, [b"x"] * 6)
    # An endpoint of its own, so that this test alone uses its pool entry.
    endpoint = KafkaEndpoint(broker.bootstrap_servers, client_rack="kb5-reuse")
    idle = kafka_source._CONSUMERS._idle  # the process's pool (private: no public view needed)
    pooled = (endpoint, Isolation.READ_COMMITTED, None)  # by endpoint and settings
    assert _read(KafkaRange(endpoint, tp, 0, 3)).num_rows == 3
    [first] = idle[pooled]
    assert _read(KafkaRange(endpoint, tp, 3, 6)).num_rows == 3
    assert idle[pooled] == [first]  # the same consumer, reassigned
    with pytest.raises(DataLossError) as lost:
        _read(KafkaRange(endpoint, tp, 10, 12))  # offsets the partition never had
    assert {k: lost.value.facts[k] for k in ("source", "topic", "partition")} == {
        "source": endpoint.description,
        "topic": "kb5-a",
        "partition": 0,
    }
    assert idle[pooled] == []  # the failed one was closed, not kept


def test_offsets_gone_from_the_brokers_are_data_loss_with_both_offsets(
    broker: KafkaEndpoint,
) -> None:
    """tansu has no DeleteRecords and no retention: the topic is deleted and recreated."""
    create_topics(broker, ["kb6-a", "kb6-b"], partitions=1)
    a, b = TopicPartition("kb6-a", 0), TopicPartition("kb6-b", 0)
    produce(broker, a, [b"x"] * 6)
    produce(broker, b, [b"y"] * 4)
    backend = KafkaBackend(broker, "^kb6-.+", timeout_s=5)
    reader = OffsetStreamReader(backend, max_offsets=0, starting={})
    read_up_to = _offsets(reader.latestOffset(reader.initialOffset(), ReadAllAvailable()))
    assert read_up_to == {"kb6-a:0": 6, "kb6-b:0": 4}
    delete_topics(broker, ["kb6-a", "kb6-b"])
    create_topics(broker, ["kb6-a"], partitions=1)
    produce(broker, a, [b"x"] * 2)
    with pytest.raises(DataLossError) as lost:  # offsets without identities: an older checkpoint
        reader.latestOffset({"kb6-a:0": 6}, ReadAllAvailable())
    message = str(lost.value)
    assert message.startswith(f"data loss in Kafka at {broker.bootstrap_servers}: ")
    assert "topic kb6-a partition 0 must continue at offset 6" in message
    assert "holds offsets 0 to 1" in message and "\n" not in message
    where = backend.description
    assert lost.value.facts == {
        "source": where,
        "topic": "kb6-a",
        "partition": 0,
        "offset": 6,
        "earliest": 0,
        "latest": 2,
    }
    restarted = OffsetStreamReader(backend, max_offsets=0, starting={})  # has seen neither
    with pytest.raises(DataLossError, match="topic kb6-b is gone: the job read it up to kb6-b:0@4"):
        restarted.latestOffset({"kb6-b:0": 4}, ReadAllAvailable())
    # Tasks planned before the topics were deleted (and one recreated) find them gone too.
    with pytest.raises(
        DataLossError,
        match=r"topic kb6-a partition 0 ends at offset 2 but the "
        r"micro-batch reads it up to 5",
    ) as lost:
        _read(backend.reader(a, 4, 6))
    assert lost.value.facts == {
        "source": where,
        "topic": "kb6-a",
        "partition": 0,
        "first_missing": 2,
        "last_missing": 5,
    }
    with pytest.raises(
        DataLossError,
        match=r"topic kb6-b partition 0 is gone but offsets 1 to 3 "
        r"were not read yet",
    ) as lost:
        _read(backend.reader(b, 1, 4))
    assert lost.value.facts == {
        "source": where,
        "topic": "kb6-b",
        "partition": 0,
        "first_missing": 1,
        "last_missing": 3,
    }


def test_unreachable_brokers_fail_in_one_line_within_the_timeout() -> None:
    endpoint = KafkaEndpoint(f"127.0.0.1:{free_port()}")  # nothing listens there
    backend = KafkaBackend(endpoint, "^kb7-.+", timeout_s=2)
    started = time.monotonic()
    with pytest.raises(SourceUnavailableError) as listing:
        backend.bounds()
    with pytest.raises(SourceUnavailableError) as reading:
        _read(backend.reader(TopicPartition("kb7-a", 0), 0, 10))
    # Bounded: each gives up after its timeout instead of waiting for the brokers.
    assert time.monotonic() - started < 30
    assert str(listing.value).startswith(
        f"Kafka at {endpoint.bootstrap_servers}: could not list the topics within 2 s: "
    )
    assert str(reading.value).startswith(
        f"Kafka at {endpoint.bootstrap_servers}: could not read the metadata of topic kb7-a "
        "partition 0 within 2 s: "
    )
    assert "\n" not in str(listing.value)


def test_the_options_carry_every_setting_and_rebuild_the_same_backend() -> None:
    endpoint = KafkaEndpoint(
        "b-1:9098,b-2:9098", KafkaAuth.IAM, region="eu-west-1", client_rack="euw1-az2"
    )
    options = common_options("^sensor-.+", 1000, None) | kafka_options(endpoint, 12.5)
    assert options == {
        "topicPattern": "^sensor-.+",
        "maxOffsetsPerTrigger": "1000",
        "backend": "kafka",
        "bootstrapServers": "b-1:9098,b-2:9098",
        "kafkaAuth": "iam",
        "timeoutMs": "12500",
        "region": "eu-west-1",
        "clientRack": "euw1-az2",
        "isolationLevel": "read_committed",
    }
    assert from_options(options) == KafkaBackend(endpoint, "^sensor-.+", 12.5)
    passed = (("fetch.min.bytes", "1024"),)
    scram = KafkaEndpoint(
        "b-1:9096", KafkaAuth.SCRAM, region="eu-west-1", secret_arn="AmazonMSK_job", options=passed
    )
    options = common_options("^s-.+", 0, None) | kafka_options(scram)
    assert (options["secretArn"], options["kafkaOptions"]) == (
        "AmazonMSK_job",
        '{"fetch.min.bytes":"1024"}',
    )
    assert from_options(options) == KafkaBackend(scram, "^s-.+")
    plain = common_options("^s-.+", 0, None) | kafka_options(KafkaEndpoint("h:9092"))
    assert from_options(plain) == KafkaBackend(KafkaEndpoint("h:9092"), "^s-.+", 30.0)
    archive = common_options("^s-.+", 0, None) | archive_options("/lake")
    assert from_options(archive) == ArchiveBackend("/lake", "^s-.+")


def test_client_rack_is_set_on_the_clients_which_still_read(broker: KafkaEndpoint) -> None:
    create_topics(broker, ["kb8-a"], partitions=1)
    tp = TopicPartition("kb8-a", 0)
    produce(broker, tp, [b"x"] * 4)
    endpoint = KafkaEndpoint(broker.bootstrap_servers, client_rack="use1-az4")
    assert endpoint.config()["client.rack"] == "use1-az4"
    assert "client.rack" not in broker.config()
    backend = KafkaBackend(endpoint, "^kb8-.+")
    assert _held(backend.bounds()) == {tp: Bounds(0, 4)}
    assert _read(backend.reader(tp, 0, 4)).num_rows == 4


def test_iam_signs_in_with_oauthbearer_over_tls_with_tokens_of_the_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")  # signs locally; nothing is sent
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    endpoint = KafkaEndpoint(
        "b-1.msk.example:9098", KafkaAuth.IAM, region="eu-west-1", client_rack="euw1-az1"
    )
    config = endpoint.config()
    assert (config["security.protocol"], config["sasl.mechanisms"]) == ("SASL_SSL", "OAUTHBEARER")
    token, expires_at = config["oauth_cb"]("")
    signed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    url = urllib.parse.urlparse(signed)
    assert url.hostname == "kafka.eu-west-1.amazonaws.com"
    assert urllib.parse.parse_qs(url.query)["Action"] == ["kafka-cluster:Connect"]
    assert expires_at > time.time()
    # librdkafka takes these settings for every kind of client the project makes.
    for kind in (Consumer, AdminClient):
        kind(endpoint.config(**({"group.id": "t"} if kind is Consumer else {})))
    with pytest.raises(ConfigurationError, match="needs the AWS region"):
        KafkaEndpoint("b-1:9098", KafkaAuth.IAM).config()


def test_the_kafka_options_of_tablecast_run_are_checked_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from app import cli

    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    paths = ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt")]
    cases = {
        (
            "--archive",
            "lake",
            "--kafka-client-rack",
            "euw1-az1",
        ): "--kafka-client-rack needs --bootstrap-servers",
        (
            "--bootstrap-servers",
            "b:9092",
            "--kafka-timeout",
            "0s",
        ): "--kafka-timeout '0s' must be positive",
        (
            "--bootstrap-servers",
            "b:9098",
            "--kafka-auth",
            "iam",
        ): "MSK with IAM needs the AWS region (--region, or AWS_REGION in the environment)",
        ("--archive", "lake", "--starting-offsets", "1000"): (
            "--starting-offsets with a time needs Kafka (--bootstrap-servers): the archive "
            "alone starts at earliest or latest"
        ),
        ("--archive", "lake", "--starting-offsets", "²"): (
            "--starting-offsets '²' is neither earliest, latest, milliseconds since the epoch "
            "nor an ISO 8601 time"
        ),
        ("--bootstrap-servers", "b:9092", "--starting-offsets", "253402300800000"): (
            "--starting-offsets '253402300800000' is past 9999-12-31T23:59:59.999Z "
            "(253402300799999 milliseconds since the epoch)"
        ),
    }
    for args, message in cases.items():
        assert cli.main(["run", *args, *paths]) == 64
        assert capsys.readouterr().err == f"tablecast run: {message}\n"
    assert not (tmp_path / "ckpt").exists()


def _offsets(doc: dict[str, object]) -> dict[str, object]:
    """A source offset without the topics' identities."""
    return {key: value for key, value in doc.items() if not key.startswith("@")}


def test_a_batch_is_planned_to_the_last_stable_offset_not_into_an_open_transaction(
    broker: KafkaEndpoint,
) -> None:
    """read_committed by default: nothing of an open transaction is planned; the option
    read_uncommitted plans to the high watermark. (tansu filters no aborted record; what
    this shows is the planning against the offsets each isolation level reports.)"""
    create_topics(broker, ["kb20-a"], partitions=1)
    tp = TopicPartition("kb20-a", 0)
    producer = open_transaction(broker, tp, 4)
    committed = OffsetStreamReader(KafkaBackend(broker, "^kb20-.+"), max_offsets=0, starting={})
    start = committed.initialOffset()
    assert _offsets(start) == {"kb20-a:0": 0}
    assert _offsets(committed.latestOffset(start, ReadAllAvailable())) == {"kb20-a:0": 0}
    assert _offsets(committed.reportLatestOffset() or {}) == {"kb20-a:0": 0}

    uncommitted = OffsetStreamReader(
        KafkaBackend(broker, "^kb20-.+", isolation=Isolation.READ_UNCOMMITTED),
        max_offsets=0,
        starting={},
    )
    assert _offsets(uncommitted.latestOffset(start, ReadAllAvailable())) == {"kb20-a:0": 4}
    producer.commit_transaction(30)
    # The commit marker takes offset 4: the committed records are 0 to 3.
    assert _offsets(committed.latestOffset(start, ReadAllAvailable())) == {"kb20-a:0": 5}


def test_a_last_stable_offset_behind_the_checkpoint_plans_nothing_and_is_no_data_loss(
    broker: KafkaEndpoint,
) -> None:
    """tansu answers a partition's last stable offset as 0 while a transaction is open,
    whatever was committed before it: read_committed waits, it does not fail."""
    create_topics(broker, ["kb21-a"], partitions=1)
    tp = TopicPartition("kb21-a", 0)
    produce(broker, tp, [b"x"] * 3)
    producer = open_transaction(broker, tp, 2)
    reader = OffsetStreamReader(KafkaBackend(broker, "^kb21-.+"), max_offsets=0, starting={})
    assert _offsets(reader.latestOffset({"kb21-a:0": 3}, ReadAllAvailable())) == {"kb21-a:0": 3}
    bounds = reader.backend.bounds()[tp]
    assert (bounds.latest, bounds.readable) == (5, bounds.stable) and bounds.readable <= 3
    producer.abort_transaction(30)
    # The abort marker takes offset 5; tansu still gives the aborted records (no filtering).
    assert _offsets(reader.latestOffset({"kb21-a:0": 3}, ReadAllAvailable())) == {"kb21-a:0": 6}


def test_range_readers_consume_at_the_planned_isolation_level() -> None:

    settings = kafka_source.consumer_settings
    assert settings(Isolation.READ_COMMITTED)["isolation.level"] == "read_committed"
    assert settings(Isolation.READ_UNCOMMITTED)["isolation.level"] == "read_uncommitted"
    backend = KafkaBackend(KafkaEndpoint("h:9092"), "^s-.+")
    assert backend.isolation is Isolation.READ_COMMITTED
    assert backend.reader(TopicPartition("s-a", 0), 0, 5).isolation is Isolation.READ_COMMITTED
    options = common_options("^s-.+", 0, None) | kafka_options(
        KafkaEndpoint("h:9092"), isolation=Isolation.READ_UNCOMMITTED
    )
    assert options["isolationLevel"] == "read_uncommitted"
    assert from_options(options) == KafkaBackend(
        KafkaEndpoint("h:9092"), "^s-.+", isolation=Isolation.READ_UNCOMMITTED
    )


def test_a_topic_deleted_and_created_again_is_refused_as_data_loss_naming_it(
    broker: KafkaEndpoint,
) -> None:
    """Re-created with more records than the checkpoint's offsets, it is another topic."""
    create_topics(broker, ["kb22-a"], partitions=1)
    tp = TopicPartition("kb22-a", 0)
    produce(broker, tp, [b"old"] * 6)
    backend = KafkaBackend(broker, "^kb22-.+", timeout_s=5)
    reader = OffsetStreamReader(backend, max_offsets=0, starting={})
    read_up_to = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert _offsets(read_up_to) == {"kb22-a:0": 6}
    delete_topics(broker, ["kb22-a"])
    create_topics(broker, ["kb22-a"], partitions=1)
    produce(broker, tp, [b"new"] * 10)
    restarted = OffsetStreamReader(backend, max_offsets=0, starting={})  # from the checkpoint
    with pytest.raises(DataLossError) as lost:
        restarted.latestOffset(read_up_to, ReadAllAvailable())
    message = str(lost.value)
    assert message.startswith(
        f"data loss in Kafka at {broker.bootstrap_servers}: topic kb22-a "
        "was deleted and created again"
    )
    assert "start a new run with a new --output and --checkpoint" in message
    assert "\n" not in message
    assert lost.value.facts["topic"] == "kb22-a"
    assert lost.value.facts["identity"] != lost.value.facts["previous_identity"]
    assert lost.value.exit_code == 3


class _CountedBackend:
    """A backend's listings counted (the driver's metadata requests of a trigger)."""

    def __init__(self, backend: KafkaBackend) -> None:
        self.backend = backend
        self.listings = 0
        self.description = backend.description

    def bounds(self, expected: Collection[TopicPartition] = ()) -> dict[TopicPartition, Bounds]:
        self.listings += 1
        return self.backend.bounds(expected)

    def matches(self, topic: str) -> bool:
        return self.backend.matches(topic)

    def offsets_at(self, timestamp_ms: int) -> dict[TopicPartition, int]:
        return self.backend.offsets_at(timestamp_ms)

    def reader(self, tp: TopicPartition, start: int, end: int) -> KafkaRange:
        return self.backend.reader(tp, start, end)


def test_a_trigger_lists_the_topics_and_their_offsets_once(broker: KafkaEndpoint) -> None:
    create_topics(broker, ["kb24-a"], partitions=2)
    produce(broker, TopicPartition("kb24-a", 0), [b"x"] * 3)
    counted = _CountedBackend(KafkaBackend(broker, "^kb24-.+"))
    reader = OffsetStreamReader(counted, max_offsets=0, starting={})
    start = {"kb24-a:0": 0, "kb24-a:1": 0}
    triggers = 3
    for _ in range(triggers):  # what Spark calls at each trigger
        end = reader.latestOffset(start, ReadAllAvailable())
        reader.reportLatestOffset()
        reader.partitions(start, end)
    # One Metadata, one DescribeTopics and three ListOffsets requests a trigger (was twice that).
    assert counted.listings == triggers
    print(f"\nKafka listings for {triggers} triggers: {counted.listings}")


def test_a_fresh_checkpoint_starts_at_the_latest_offsets_or_at_a_time(
    broker: KafkaEndpoint,
) -> None:
    from app.sources.starting import StartingPosition

    create_topics(broker, ["kb25-a"], partitions=2)
    a0, a1 = TopicPartition("kb25-a", 0), TopicPartition("kb25-a", 1)
    produce(broker, a0, [b"x"] * 10, timestamp_ms=1_000_000)  # at 1,000,000 + offset ms
    produce(broker, a1, [b"y"] * 4, timestamp_ms=2_000_000)

    def first(where: str) -> dict[str, object]:
        reader = OffsetStreamReader(
            KafkaBackend(broker, "^kb25-.+"),
            max_offsets=0,
            starting={},
            starting_position=StartingPosition.parse(where),
        )
        return _offsets(reader.initialOffset())

    assert first("earliest") == {"kb25-a:0": 0, "kb25-a:1": 0}
    assert first("latest") == {"kb25-a:0": 10, "kb25-a:1": 4}
    # A time: each partition where the brokers' ListOffsets by timestamp puts it. (tansu
    # answers offset 0 for any time: this shows the request and its use, not the search.)
    admin = AdminClient(broker.config())
    asked = admin.list_offsets(
        {KafkaPartition("kb25-a", p): OffsetSpec.for_timestamp(1_000_006) for p in (0, 1)},
        request_timeout=10,
    )
    answer = {f"kb25-a:{kp.partition}": f.result().offset for kp, f in asked.items()}
    assert first("1000006") == first("1970-01-01T00:16:40.006") == answer
    # A repair's offsets still win over the starting position.
    latest = StartingPosition.parse("latest")
    repaired = OffsetStreamReader(
        KafkaBackend(broker, "^kb25-.+"), max_offsets=0, starting={a0: 2}, starting_position=latest
    )
    assert _offsets(repaired.initialOffset()) == {"kb25-a:0": 2, "kb25-a:1": 4}


def test_topics_by_name_read_exactly_those(broker: KafkaEndpoint) -> None:
    from app.cli import topic_pattern

    create_topics(broker, ["kb26-a", "kb26-ab", "kb26-b", "kb26-c"], partitions=1)
    backend = KafkaBackend(broker, topic_pattern("kb26-a, kb26-b", "ignored"))
    assert sorted({tp.topic for tp in backend.bounds()}) == ["kb26-a", "kb26-b"]


@contextlib.contextmanager
def _refusing_sign_in(tmp_path: Path) -> Iterator[KafkaEndpoint]:
    """tansu requiring authentication, and an endpoint whose SCRAM user it does not know.

    It refuses the user as a credential being rotated would be, until the timeout (a user
    cannot be added to a running tansu that requires authentication, so the refusal here
    never ends).
    """
    port = free_port()
    address = f"{LOOPBACK}:{port}"
    log = tmp_path / "tansu.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            tansu.command(address, authentication=True), stdout=out, stderr=subprocess.STDOUT
        )
    with listening(process, port, log, kill=True):
        scram = (
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", "nobody"),
            ("sasl.password", "wrong"),
        )
        yield KafkaEndpoint(address, options=scram)


def test_a_refused_sign_in_is_asked_again_until_the_timeout_then_named_in_one_line(
    tmp_path: Path,
) -> None:
    with _refusing_sign_in(tmp_path) as endpoint:
        started = time.monotonic()
        with pytest.raises(SourceUnavailableError) as refused:
            KafkaBackend(endpoint, "^kb28-.+", timeout_s=3).bounds()
        assert time.monotonic() - started >= 2.5  # asked again, not given up at the first
        message = str(refused.value)
        assert message.startswith(
            f"{endpoint.description}: could not list the topics within "
            "3 s: the brokers refused the sign-in: "
        )
        assert "SASL SCRAM authentication failed" in message and "\n" not in message


def test_a_sign_in_refused_to_a_range_read_is_named_in_one_line_as_the_planners_is(
    tmp_path: Path,
) -> None:
    """A task's consumer refused its sign-in until the timeout: the line says so and why
    (exit 5, as the planner's), not that the brokers gave no record."""
    tp = TopicPartition("kb29-a", 0)
    with _refusing_sign_in(tmp_path) as endpoint:
        with pytest.raises(SourceUnavailableError) as refused:
            _read(KafkaRange(endpoint, tp, 0, 5, timeout_s=3))
        message = str(refused.value)
        assert message.startswith(
            f"{endpoint.description}: could not read {tp} within 3 s: "
            "the brokers refused the sign-in: "
        )
        assert "SASL SCRAM authentication failed" in message and "\n" not in message
        assert refused.value.exit_code == 5
        pooled = (endpoint, Isolation.READ_COMMITTED, None)
        assert not kafka_source._CONSUMERS._idle.get(pooled)  # the refused consumer is closed
