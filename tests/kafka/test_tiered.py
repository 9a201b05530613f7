"""Kafka and the archive as one source: the tiered backend, and the job catching up with it.

tansu has no DeleteRecords and no retention; with its log in S3 (moto on
loopback) a test makes it lose a partition's first offsets as retention
would (:class:`tests.tansu.StoredBroker`). The archive is a real one, written
from the records the broker held before (by the archiver, for the job).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from app import cli, metric_names
from app.contract.offsets import TopicPartition
from app.errors import DataLossError
from app.metrics.listener import batch_metrics
from app.metrics.progress import batch_line
from app.metrics.publisher import CloudWatchPublisher, LogPublisher
from app.ops.archiver import Archiver, ArchiverConfig
from app.ops.produce import LoadSpec, publish
from app.sink.commit import BatchReport
from app.sources import archive, broker_quirks
from app.sources.archive import ArchiveBackend
from app.sources.backend import Bounds
from app.sources.backend_options import common_options, from_options, tiered_options
from app.sources.kafka import KafkaBackend
from app.sources.kafka_client import KafkaEndpoint
from app.sources.records import SCHEMA, SERVED_BY, SOURCE_SCHEMA, no_headers
from app.sources.stream import OffsetStreamReader
from app.sources.tiered import TieredBackend, TieredBounds
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.kafka.helpers import produce
from tests.ops.kafka_helpers import create_topics
from tests.spark.helpers import assert_exact, ledger_end
from tests.tansu import FETCH_WAIT_MS, StoredBroker, stored_broker

KAFKA, LAKE = "Kafka at k:9092", "the archive /lake"


def tiered(kafka: tuple[int, int] | None, *runs: tuple[int, int]) -> TieredBounds:
    return TieredBounds.of(
        None if kafka is None else Bounds(*kafka), tuple(Bounds(*r) for r in runs), KAFKA, LAKE
    )


def test_the_archive_extends_kafka_back_only_where_its_files_reach_kafkas_earliest() -> None:
    def bounds(b: TieredBounds) -> tuple[int, int]:
        return b.earliest, b.latest

    assert bounds(tiered((100, 300), (0, 150))) == (0, 300)  # overlapping
    assert bounds(tiered((100, 300), (0, 100))) == (0, 300)  # ending at Kafka's earliest
    assert bounds(tiered((100, 300), (0, 99))) == (100, 300)  # one offset short: a hole
    assert bounds(tiered((100, 300), (0, 50), (60, 120))) == (60, 300)  # the run that reaches
    assert bounds(tiered((100, 300), (0, 50), (150, 250))) == (100, 300)  # Kafka's own
    assert bounds(tiered((100, 300))) == (100, 300)  # nothing archived
    assert bounds(tiered(None, (0, 50), (60, 80))) == (60, 80)  # only archived: its last run
    assert bounds(tiered((40, 40), (0, 40))) == (0, 40)  # Kafka kept nothing


def test_data_loss_names_both_tiers_and_the_offsets_neither_holds() -> None:
    tp = TopicPartition("s-1", 0)
    where = f"{KAFKA} and {LAKE}"
    lost = tiered((100, 300), (0, 50), (60, 120)).data_loss(where, tp, 20)
    assert str(lost) == (
        f"data loss in {where}: topic s-1 partition 0 must continue at offset 20 but {KAFKA} "
        f"holds offsets 100 to 299 and {LAKE} holds offsets 0 to 49 and 60 to 119: "
        "offsets 50 to 59 are in neither"
    )
    assert lost.facts == {
        "source": where,
        "topic": "s-1",
        "partition": 0,
        "offset": 20,
        "earliest": 60,
        "latest": 300,
        "first_missing": 50,
        "last_missing": 59,
    }
    lost = tiered((100, 300), (10, 90)).data_loss(where, tp, 5)
    assert str(lost).endswith(
        f"{KAFKA} holds offsets 100 to 299 and {LAKE} holds offsets 10 to 89: "
        "offsets 5 to 9 are in neither"
    )
    assert (lost.facts["first_missing"], lost.facts["last_missing"]) == (5, 9)
    lost = tiered((100, 300)).data_loss(where, tp, 95)
    assert str(lost).endswith(f"{LAKE} holds none of it: offsets 95 to 99 are in neither")
    lost = tiered(None, (0, 50)).data_loss(where, tp, 60)
    assert str(lost).endswith(
        f"but {KAFKA} does not have the partition and {LAKE} holds offsets 0 to 49"
    )
    # Past the end: nothing is missing yet, the partition went back.
    assert "first_missing" not in lost.facts and lost.facts["latest"] == 50


def test_tablecast_run_takes_kafka_and_the_archive_together_and_refuses_bad_combinations(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    paths = ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt")]
    missing = tmp_path / "no-such-archive"
    archive = tmp_path / "archive"
    archive.mkdir()
    cases = {
        (): "give --bootstrap-servers (Kafka), --archive (the raw archive), or both (Kafka, "
        "and the archive for the offsets Kafka no longer holds)",
        (
            "--bootstrap-servers",
            "b:9092",
            "--archive",
            str(missing),
        ): f"archive {missing} does not exist",
        (
            "--bootstrap-servers",
            "b:9092",
            "--archive",
            str(archive),
            "--kafka-timeout",
            "0s",
        ): "--kafka-timeout '0s' must be positive",
        (
            "--archive",
            str(archive),
            "--kafka-client-rack",
            "euw1-az1",
        ): "--kafka-client-rack needs --bootstrap-servers",
    }
    for args, message in cases.items():
        assert cli.main(["run", *args, *paths]) == 64
        assert capsys.readouterr().err == f"tablecast run: {message}\n"
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "out").exists()


def test_a_job_reading_both_publishes_the_records_each_tier_served() -> None:
    """RecordsServed: one datum per tier (0 included), with the Source dimension."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    progress = {"batchId": 4, "numInputRows": 1, "batchDuration": 1000, "sources": []}  # a range
    report = BatchReport(
        batch_id=4,
        end={},
        published=True,
        files=2,
        rows=185,
        quarantined=0,
        bytes=9000,
        violations=0,
        messages=39,
        served={"archive": 39},
    )
    assert batch_metrics(progress, report).served == {}  # one source: nothing by tier
    metrics = batch_metrics(progress, report, ("archive", "kafka"))
    assert metrics.served == {"archive": 39, "kafka": 0}
    by_source = [d for d in metrics.datums(at) if d.name == metric_names.RECORDS_SERVED]
    assert [(d.value, d.dimensions) for d in by_source] == [
        (39.0, (("Source", "archive"),)),
        (0.0, (("Source", "kafka"),)),
    ]
    calls: list[Any] = []

    class CloudWatch:
        meta = type("Meta", (), {"endpoint_url": "stub"})

        def put_metric_data(self, **call: Any) -> None:
            calls.append(call)

    publisher = CloudWatchPublisher(environment="prod", client=CloudWatch())  # type: ignore[arg-type]
    publisher.publish(by_source)
    assert publisher.close().sent == 2
    assert [d["Dimensions"] for d in calls[0]["MetricData"]] == [
        [{"Name": "Environment", "Value": "prod"}, {"Name": "Source", "Value": tier}]
        for tier in ("archive", "kafka")
    ]
    lines: list[str] = []
    LogPublisher(environment="prod", write=lines.append).publish(metrics.datums(at))
    logged = orjson.loads(lines[0])["metrics"]
    assert logged["RecordsServed"] == {"archive": 39.0, "kafka": 0.0}
    assert logged["InputMessages"] == 39.0
    assert batch_line(metrics).startswith(
        "batch 4: 39 messages (39/s, 39 from archive, 0 from kafka), 185 rows in 2 files"
    )


# -- against the broker --------------------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoredBroker]:
    """tansu with its log in S3; the jobs started meanwhile wait long enough for it.

    (Backends made here are given FETCH_WAIT_MS themselves.)
    """
    with (
        broker_quirks.fetch_wait(FETCH_WAIT_MS),
        stored_broker(tmp_path_factory.mktemp("tansu-s3") / "tansu.log") as broker,
    ):
        yield broker


def stored_kafka(broker: StoredBroker, pattern: str) -> KafkaBackend:
    """The stored broker as a backend, with the fetch wait it needs (FETCH_WAIT_MS)."""
    return KafkaBackend(broker.endpoint, pattern, timeout_s=10, fetch_wait_ms=FETCH_WAIT_MS)


def put(broker: StoredBroker, topic: str, count: int) -> TopicPartition:
    """``count`` records (values v0, v1, ...) in a new topic of one partition."""
    create_topics(broker.endpoint, [topic], partitions=1)
    tp = TopicPartition(topic, 0)
    produce(broker.endpoint, tp, [f"v{i}".encode() for i in range(count)])
    broker.settle([tp])
    return tp


def archive_of(
    broker: StoredBroker, root: Path, tp: TopicPartition, files: list[tuple[int, int]]
) -> None:
    """Archive files of the records Kafka holds now, as the archiver writes them."""
    held = read(stored_kafka(broker, tp.topic).reader(tp, 0, files[-1][1]))
    records = held.select(SCHEMA.names)
    for start, end in files:
        archive.write_file(resolve(str(root)), tp, start, end, records.slice(start, end - start))


def read(reader: object) -> pa.Table:
    batches = list(reader.read())  # type: ignore[attr-defined]
    return pa.Table.from_batches(batches, schema=SOURCE_SCHEMA)


def served(table: pa.Table) -> list[tuple[int, str]]:
    return list(
        zip(table.column("offset").to_pylist(), table.column(SERVED_BY).to_pylist(), strict=True)
    )


def test_offsets_kafka_lost_are_read_from_the_archive_the_rest_from_kafka(
    stored: StoredBroker, tmp_path: Path
) -> None:
    tp = put(stored, "tt1-a", 60)
    archive_of(stored, tmp_path, tp, [(0, 20), (20, 40)])
    # A partition the archive alone still has (its topic is gone from Kafka).
    only = TopicPartition("tt1-old", 0)
    archive.write_file(resolve(str(tmp_path)), only, 0, 3, stand_in(only, 0, 3))
    stored.expire({tp: 30})
    kafka = stored_kafka(stored, "^tt1-.+")
    held = {t: Bounds(b.earliest, b.latest) for t, b in kafka.bounds().items()}
    assert held == {tp: Bounds(30, 60)}  # Kafka lost offsets 0 to 29
    backend = TieredBackend(kafka, ArchiveBackend(str(tmp_path), "^tt1-.+"))
    assert (
        backend.description == f"Kafka at {stored.endpoint.bootstrap_servers} and the "
        f"archive {tmp_path}"
    )
    bounds = backend.bounds()
    assert {t: (b.earliest, b.latest) for t, b in bounds.items()} == {tp: (0, 60), only: (0, 3)}

    # One ordered stream: the archive before Kafka's earliest offset, Kafka from it
    # (offsets 30 to 39 are in both: Kafka serves them).
    whole = read(backend.reader(tp, 0, 60))
    assert whole.column("offset").to_pylist() == list(range(60))
    assert whole.column("value").to_pylist() == [f"v{i}".encode() for i in range(60)]
    assert served(whole) == [(i, "archive" if i < 30 else "kafka") for i in range(60)]
    assert set(served(read(backend.reader(tp, 5, 25)))) == {(i, "archive") for i in range(5, 25)}
    assert set(served(read(backend.reader(tp, 35, 50)))) == {(i, "kafka") for i in range(35, 50)}
    assert served(read(backend.reader(only, 1, 3))) == [(1, "archive"), (2, "archive")]

    # The streaming reader starts at the archive's earliest offsets and reads to Kafka's latest.
    stream = OffsetStreamReader(backend, max_offsets=0, starting={})
    start = stream.initialOffset()
    identity = kafka.bounds()[tp].identity
    assert start == {"tt1-a:0": 0, "tt1-old:0": 0, "@topic-ids": {"tt1-a": identity}}
    end = stream.latestOffset(start, ReadAllAvailable())
    assert end == {"tt1-a:0": 60, "tt1-old:0": 3, "@topic-ids": {"tt1-a": identity}}

    # The archive's files are the topic's by its identity: Kafka's, the archive's own for a
    # topic Kafka no longer has. Files of another identity serve none of its offsets.
    archive.write_identity(resolve(str(tmp_path)), "tt1-a", identity)
    archive.write_identity(resolve(str(tmp_path)), "tt1-old", "old-id")
    assert stream.latestOffset(start, ReadAllAvailable()) == {
        "tt1-a:0": 60,
        "tt1-old:0": 3,
        "@topic-ids": {"tt1-a": identity, "tt1-old": "old-id"},
    }
    archive.write_identity(resolve(str(tmp_path)), "tt1-a", "another-topics-id")
    assert backend.bounds()[tp].earliest == 30
    with pytest.raises(DataLossError, match="tt1-a partition 0 must continue at offset 0"):
        stream.latestOffset(start, ReadAllAvailable())
    archive.write_identity(resolve(str(tmp_path)), "tt1-a", identity)

    # The options of `tablecast run --bootstrap-servers ... --archive ...` rebuild it.
    options = common_options("^tt1-.+", 0, None) | tiered_options(
        stored.endpoint, str(tmp_path), 10
    )
    assert options["backend"] == "tiered"
    assert from_options(options) == backend


def test_only_offsets_that_neither_tier_holds_are_data_loss(
    stored: StoredBroker, tmp_path: Path
) -> None:
    tp = put(stored, "tt2-a", 50)
    # A hole in the archive's files (10 to 19) and a gap before Kafka's earliest (40).
    archive_of(stored, tmp_path, tp, [(0, 10), (20, 30)])
    stored.expire({tp: 40})
    backend = TieredBackend(
        stored_kafka(stored, "^tt2-.+"), ArchiveBackend(str(tmp_path), "^tt2-.+")
    )
    stream = OffsetStreamReader(backend, max_offsets=0, starting={})
    # Nothing reaches Kafka: from its earliest.
    assert stream.initialOffset()["tt2-a:0"] == 40
    where = backend.description
    with pytest.raises(DataLossError) as lost:
        stream.latestOffset({"tt2-a:0": 25}, ReadAllAvailable())
    assert str(lost.value) == (
        f"data loss in {where}: topic tt2-a partition 0 must continue at offset 25 but "
        f"Kafka at {stored.endpoint.bootstrap_servers} holds offsets 40 to 49 and the archive "
        f"{tmp_path} holds offsets 0 to 9 and 20 to 29: offsets 30 to 39 are in neither"
    )

    # Archived up to Kafka's earliest: the hole before is loss only for a run from before it.
    archive.write_file(resolve(str(tmp_path)), tp, 30, 40, stand_in(tp, 30, 40))
    assert stream.latestOffset({"tt2-a:0": 20}, ReadAllAvailable())["tt2-a:0"] == 50
    with pytest.raises(DataLossError, match="offsets 10 to 19 are in neither"):
        stream.latestOffset({"tt2-a:0": 5}, ReadAllAvailable())
    assert read(backend.reader(tp, 20, 50)).column("offset").to_pylist() == list(range(20, 50))


def stand_in(tp: TopicPartition, start: int, end: int) -> pa.Table:
    """Stand-in records for offsets Kafka no longer holds (their values are not checked)."""
    count = end - start
    return pa.table(
        {
            "key": pa.array([b"k"] * count),
            "value": pa.array([b"archived"] * count),
            "topic": pa.array([tp.topic] * count),
            "partition": pa.array([tp.partition] * count, pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "timestamp": pa.array([0] * count, pa.timestamp("us", "UTC")),
            "timestampType": pa.array([0] * count, pa.int32()),
            "headers": no_headers(count),
        },
        schema=SCHEMA,
    )


def test_offsets_retention_drops_after_planning_are_read_from_the_archive(
    stored: StoredBroker, tmp_path: Path
) -> None:
    tp = put(stored, "tt3-a", 40)
    archive_of(stored, tmp_path, tp, [(0, 15), (15, 30)])
    stored.expire({tp: 10})
    backend = TieredBackend(
        stored_kafka(stored, "^tt3-.+"), ArchiveBackend(str(tmp_path), "^tt3-.+")
    )
    backend.bounds()
    planned = backend.reader(tp, 0, 40)
    assert planned.split == 10
    stored.expire({tp: 25})  # retention moves on while the batch waits for its task
    table = read(planned)
    assert table.column("offset").to_pylist() == list(range(40))
    assert served(table) == [(i, "archive" if i < 25 else "kafka") for i in range(40)]


def test_a_topic_found_after_the_start_without_its_first_offsets_is_data_loss_unless_archived(
    stored: StoredBroker, tmp_path: Path
) -> None:
    """Spark's Kafka source fails such a query too: "Added partition ... starts from 6
    instead of 0. Some data may have been missed"."""
    put(stored, "tt6-a", 3)
    kafka = stored_kafka(stored, "^tt6-.+")
    reader = OffsetStreamReader(kafka, max_offsets=0, starting={})
    begin = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert {k: v for k, v in begin.items() if not k.startswith("@")} == {"tt6-a:0": 3}
    # A producer starts on a new topic; its first records outlive the retention unread
    # (the archiver copied them).
    late = put(stored, "tt6-b", 10)
    archive_of(stored, tmp_path, late, [(0, 6)])
    stored.expire({late: 6})
    with pytest.raises(DataLossError) as lost:
        reader.latestOffset(begin, ReadAllAvailable())
    where = kafka.description
    assert str(lost.value) == (
        f"data loss in {where}: topic tt6-b partition 0, found after the job started, must "
        f"be read from offset 0 but {where} holds offsets 6 to 9: offsets 0 to 5 are gone"
    )
    assert (lost.value.facts["first_missing"], lost.value.facts["last_missing"]) == (0, 5)
    assert lost.value.exit_code == 3

    # An archive that stops short of Kafka's earliest offset does not cover the gap.
    short = tmp_path / "short"
    archive.write_file(resolve(str(short)), late, 0, 3, stand_in(late, 0, 3))
    partial = TieredBackend(stored_kafka(stored, "^tt6-.+"), ArchiveBackend(str(short), "^tt6-.+"))
    with pytest.raises(DataLossError) as gap:
        OffsetStreamReader(partial, max_offsets=0, starting={}).latestOffset(
            begin, ReadAllAvailable()
        )
    assert str(gap.value).endswith(
        f"topic tt6-b partition 0, found after the job started, must be read from offset 0 "
        f"but {where} holds offsets 6 to 9 and the archive {short} holds offsets 0 to 2: "
        "offsets 3 to 5 are in neither"
    )

    # The archive holds them: read from it, then Kafka, in the trigger that finds the topic.
    both = TieredBackend(stored_kafka(stored, "^tt6-.+"), ArchiveBackend(str(tmp_path), "^tt6-.+"))
    tiered = OffsetStreamReader(both, max_offsets=0, starting={})
    end = tiered.latestOffset(begin, ReadAllAvailable())
    assert {k: v for k, v in end.items() if not k.startswith("@")} == {
        "tt6-a:0": 3,
        "tt6-b:0": 10,
    }
    [part] = tiered.partitions(begin, end)
    assert (part.tp, part.start, part.end) == (late, 0, 10)  # type: ignore[attr-defined]
    assert served(read(part.reader)) == [  # type: ignore[attr-defined]
        (i, "archive" if i < 6 else "kafka") for i in range(10)
    ]


@pytest.mark.spark
def test_a_run_whose_kafka_lost_its_first_offsets_completes_exactly_from_archive_and_kafka(
    stored: StoredBroker, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The proof of catch-up past retention: `tablecast run --bootstrap-servers --archive`.

    The archiver copies every record while Kafka has them all (the expected
    output's archive); Kafka then loses about the first half of each
    partition, and the job is given only the archive files that hold those,
    so that neither tier alone has every record.
    """
    pattern = "^sensor-tt9-.+"
    spec = CaptureSpec(
        topics=1,
        partitions=2,
        sessions=6,
        updates=20,
        resync_every=8,
        prefix="sensor-tt9-",
        seed=11,
    )
    create_topics(stored.endpoint, ["sensor-tt9-0"], spec.partitions)
    report = publish(stored.endpoint, LoadSpec(spec, run_id="catch-up", one_message_per_batch=True))
    ends = {tp: last + 1 for tp, (_, last) in report.offsets.items()}
    stored.settle(sorted(ends))
    everything = tmp_path / "everything"
    config = ArchiverConfig(
        archive_uri=str(everything), topic_pattern=pattern, max_records=20, max_wait_s=3600
    )
    with Archiver(stored.endpoint, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up
    lost = {tp: end // 2 for tp, end in ends.items()}
    lake = tmp_path / "archive"  # the files that hold what Kafka loses, and no more
    index = archive.scan(resolve(str(everything)), pattern)
    for tp, files in index.files.items():
        for f in files:
            if f.start < lost[tp]:
                target = lake / tp.topic / str(tp.partition) / Path(f.path).name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f.path, target)
    archived = archive.scan(resolve(str(lake)), pattern)
    assert all(lost[tp] <= archived.latest(tp) < ends[tp] for tp in ends), (lost, ends)
    stored.expire(lost)
    held = KafkaBackend(stored.endpoint, pattern).bounds()
    assert {tp: Bounds(b.earliest, b.latest) for tp, b in held.items()} == {
        tp: Bounds(lost[tp], ends[tp]) for tp in ends
    }

    output = tmp_path / "out"
    code = cli.main(
        [
            "run",
            "--bootstrap-servers",
            stored.endpoint.bootstrap_servers,
            "--archive",
            str(lake),
            "--topic-pattern",
            pattern,
            "--output",
            str(output),
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--trigger",
            "available-now",
            "--max-offsets-per-trigger",
            "40",
            "--metrics",
            "log",
            "--kafka-timeout",
            "20s",
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0

    comparison = assert_exact(everything, output)
    assert comparison.expected_rows > report.messages
    assert ledger_end(output) == ends
    assert (
        cli.main(
            [
                "verify",
                "--archive",
                str(everything),
                "--output",
                str(output),
                "--topic-pattern",
                pattern,
            ]
        )
        == 0
    )
    assert "OK" in capsys.readouterr().out
    # Which tier served each batch: the metrics, and the progress lines.
    batches = [
        orjson.loads(line)["metrics"] for line in stdout.splitlines() if line.startswith("{")
    ]
    by_tier = [b["RecordsServed"] for b in batches]
    assert len(by_tier) >= 3 and all(set(s) == {"archive", "kafka"} for s in by_tier)
    assert sum(s["archive"] for s in by_tier) == sum(lost.values())
    assert sum(s["kafka"] for s in by_tier) == report.messages - sum(lost.values())
    assert by_tier[0]["kafka"] == 0 and by_tier[-1]["archive"] == 0  # the archive first
    assert any(s["archive"] and s["kafka"] for s in by_tier)  # a batch served by both
    assert [b["InputMessages"] for b in batches] == [sum(s.values()) for s in by_tier]
    first = int(by_tier[0]["archive"])
    assert f"batch 0: {first} messages (" in stdout
    assert f"/s, {first} from archive, 0 from kafka), " in stdout
    assert (
        f"messages served: {sum(lost.values()):,} from archive, "
        f"{report.messages - sum(lost.values()):,} from kafka"
    ) in stdout


def test_the_archiver_keeps_each_topics_id_and_refuses_a_topic_created_again(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    """The archive's identity of a topic is the Kafka topic ID the archiver copied it from."""
    from tests.kafka.helpers import delete_topics

    create_topics(broker, ["tt5-a"], partitions=1)
    tp = TopicPartition("tt5-a", 0)
    produce(broker, tp, [b"x"] * 5)
    config = ArchiverConfig(archive_uri=str(tmp_path), topic_pattern="^tt5-.+", max_wait_s=3600)
    with Archiver(broker, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up
    identity = KafkaBackend(broker, "^tt5-.+").bounds()[tp].identity
    assert (tmp_path / "tt5-a" / archive.IDENTITY_FILE).read_text() == identity
    tiered = TieredBackend(
        KafkaBackend(broker, "^tt5-.+"), ArchiveBackend(str(tmp_path), "^tt5-.+")
    )
    assert tiered.bounds()[tp].identity == identity
    delete_topics(broker, ["tt5-a"])
    create_topics(broker, ["tt5-a"], partitions=1)
    produce(broker, tp, [b"y"] * 8)
    with Archiver(broker, config) as archiver, pytest.raises(DataLossError) as lost:
        archiver.catch_up(timeout_s=60)
    assert str(lost.value) == (
        f"data loss in the archive {tmp_path}: topic tt5-a holds the records of topic ID "
        f"{identity} but Kafka's topic tt5-a is {lost.value.facts['identity']} (deleted and "
        f"created again): archive it under another archive, or move {tmp_path}/tt5-a aside"
    )
    assert (tmp_path / "tt5-a" / archive.IDENTITY_FILE).read_text() == identity
