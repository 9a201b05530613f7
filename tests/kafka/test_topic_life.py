"""A broker's bad minute and a topic's life, as the Kafka source meets them (tansu, no Spark).

Metadata answers without a topic (a broker answering from an empty cache around a
restart, staged by a proxy in front of tansu that rewrites its Metadata answers:
``tests/kafka/metadata_proxy.py``), topics found after the start, topics deleted
with records unread or read to their end, topics retired on purpose
(``tablecast-ops retire-topic``), the settings the source owns, and a transaction
left open.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from app import cli
from app.contract.offsets import SourceReport, TopicPartition
from app.errors import ConfigurationError, DataLossError, SourceUnavailableError
from app.metrics.listener import Lag, batch_metrics, source_lag
from app.metrics.progress import batch_line
from app.ops import cli as ops_cli
from app.ops.retire import retire_topic
from app.sources import kafka as kafka_source
from app.sources.kafka import KafkaBackend
from app.sources.kafka_client import (
    HONOURED_SETTINGS,
    OWNED_SETTINGS,
    Isolation,
    KafkaAuth,
    KafkaEndpoint,
    parse_option,
)
from app.sources.records import SOURCE_SCHEMA
from app.sources.retired import EndsFrom, read_retired, retired_uri
from app.sources.stream import OffsetStreamReader, new_in_order, read_in_order
from tests.kafka.helpers import delete_topics, open_transaction, produce
from tests.kafka.metadata_proxy import Proxied
from tests.ops.kafka_helpers import create_topics

ROOT = Path(__file__).resolve().parents[2]


def _offsets(doc: dict[str, Any]) -> dict[str, Any]:
    """A source offset without the topics' identities."""
    return {key: value for key, value in doc.items() if not key.startswith("@")}


def _read(reader: Any) -> list[int]:
    table = pa.Table.from_batches(list(reader.read()), schema=SOURCE_SCHEMA)
    return list(table.column("offset").to_pylist())


def _reader(endpoint: KafkaEndpoint, pattern: str, **options: Any) -> OffsetStreamReader:
    timeout_s = options.pop("timeout_s", 10)
    return OffsetStreamReader(
        KafkaBackend(endpoint, pattern, timeout_s=timeout_s), max_offsets=0, starting={}, **options
    )


# -- a broker's bad minute -------------------------------------------------------


def test_a_topic_missing_from_the_metadata_for_a_moment_is_asked_for_again_not_dropped(
    proxied: Proxied,
) -> None:
    """Read to its end, the topic is missing from every answer for 2 s: the planner, a
    restarted planner and a task each ask again and carry on with the same topic."""
    endpoint, proxy = proxied.endpoint, proxied.proxy
    create_topics(endpoint, ["tl1-a", "tl1-b"], partitions=1)
    a = TopicPartition("tl1-a", 0)
    produce(endpoint, a, [b"x"] * 4)
    produce(endpoint, TopicPartition("tl1-b", 0), [b"y"] * 2)
    reader = _reader(endpoint, "^tl1-.+")
    read_up_to = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert _offsets(read_up_to) == {"tl1-a:0": 4, "tl1-b:0": 2}
    produce(endpoint, a, [b"x"] * 3)

    withheld = proxy.withheld
    proxy.hide_for("tl1-a", 2.0)
    started = time.monotonic()
    after = reader.latestOffset(read_up_to, ReadAllAvailable())
    assert time.monotonic() - started >= 1.5  # it waited for the topic to be answered again
    assert proxy.withheld > withheld
    assert _offsets(after) == {"tl1-a:0": 7, "tl1-b:0": 2}  # kept, and its new records planned
    assert after["@topic-ids"] == read_up_to["@topic-ids"]  # the same topic

    # A planner that never listed it (the job restarted) asks again as well.
    proxy.hide_for("tl1-a", 2.0)
    restarted = _reader(endpoint, "^tl1-.+")
    assert _offsets(restarted.latestOffset(after, ReadAllAvailable())) == _offsets(after)

    # So does a task reading a range of it.
    proxy.hide_for("tl1-a", 2.0)
    assert _read(restarted.backend.reader(a, 4, 7)) == [4, 5, 6]


def test_answers_that_disagree_until_the_timeout_stop_the_trigger_in_one_line_then_carry_on(
    proxied: Proxied,
) -> None:
    endpoint, proxy = proxied.endpoint, proxied.proxy
    create_topics(endpoint, ["tl2-a"], partitions=1)
    tp = TopicPartition("tl2-a", 0)
    produce(endpoint, tp, [b"x"] * 3)
    reader = _reader(endpoint, "^tl2-.+")
    read_up_to = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    proxy.flap("tl2-a")  # listed by some answers, unknown to the others
    try:
        with pytest.raises(SourceUnavailableError) as unsettled:
            _reader(endpoint, "^tl2-.+", timeout_s=3).latestOffset(read_up_to, ReadAllAvailable())
    finally:
        proxy.show("tl2-a")
    assert str(unsettled.value) == (
        f"{endpoint.description} answered inconsistently for 3 s: topic tl2-a partition 0 "
        "listed in some answers, missing from others (the brokers' metadata is not "
        "settled; a restart asks again)"
    )
    assert unsettled.value.exit_code == 5
    produce(endpoint, tp, [b"x"] * 2)
    # Once the brokers agree, the next start carries on where the checkpoint is.
    carried_on = _reader(endpoint, "^tl2-.+").latestOffset(read_up_to, ReadAllAvailable())
    assert _offsets(carried_on) == {"tl2-a:0": 5}


# -- topics found after the start ----------------------------------------------------


def test_a_topic_found_in_a_trigger_is_planned_in_that_trigger_from_offset_0(
    broker: KafkaEndpoint,
) -> None:
    create_topics(broker, ["tl3-a"], partitions=1)
    produce(broker, TopicPartition("tl3-a", 0), [b"x"] * 3)
    reader = _reader(broker, "^tl3-.+")
    first = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert _offsets(first) == {"tl3-a:0": 3}
    create_topics(broker, ["tl3-0", "tl3-b"], partitions=1)
    produce(broker, TopicPartition("tl3-0", 0), [b"z"] * 2)
    produce(broker, TopicPartition("tl3-a", 0), [b"x"] * 2)
    produce(broker, TopicPartition("tl3-b", 0), [b"y"] * 4)
    # The trigger that finds them plans them (no empty batch first).
    second = reader.latestOffset(first, ReadAllAvailable())
    assert _offsets(second) == {"tl3-0:0": 2, "tl3-a:0": 5, "tl3-b:0": 4}
    parts = reader.partitions(first, second)
    planned = [(p.tp.topic, p.start, p.end) for p in parts]  # type: ignore[attr-defined]
    # The partitions the checkpoint had come first, in the engine's order; the new ones after.
    assert planned == [("tl3-a", 3, 5), ("tl3-0", 0, 2), ("tl3-b", 0, 4)]
    begin, end = reader_offsets(first), reader_offsets(second)
    assert [tp.topic for tp in read_in_order(begin, end)] == ["tl3-a"]
    assert [tp.topic for tp in new_in_order(begin, end)] == ["tl3-0", "tl3-b"]
    assert _read(parts[2].reader) == [0, 1, 2, 3]  # type: ignore[attr-defined]
    # maxOffsetsPerTrigger is shared with them by backlog.
    create_topics(broker, ["tl3-c"], partitions=1)
    produce(broker, TopicPartition("tl3-c", 0), [b"w"] * 6)
    assert _offsets(reader.latestOffset(second, ReadMaxRows(3)))["tl3-c:0"] == 3


def reader_offsets(doc: dict[str, Any]) -> dict[TopicPartition, int]:
    from app.contract.offsets import from_json

    return from_json(doc)


# -- topics deleted, and retired ---------------------------------------------------


def test_a_topic_deleted_while_a_transaction_held_records_back_is_data_loss_naming_them(
    broker: KafkaEndpoint,
) -> None:
    """Read to its last stable offset, not to its high watermark: the records of the open
    transaction were never read (they were dropped with a warning before)."""
    create_topics(broker, ["tl4-a"], partitions=1)
    tp = TopicPartition("tl4-a", 0)
    produce(broker, tp, [b"c"] * 3)
    producer = open_transaction(broker, tp, 2)  # offsets 3 and 4
    reader = _reader(broker, "^tl4-.+", timeout_s=2)
    checkpoint = {"tl4-a:0": 3}
    assert _offsets(reader.latestOffset(checkpoint, ReadAllAvailable())) == checkpoint
    delete_topics(broker, ["tl4-a"])
    with pytest.raises(DataLossError) as lost:
        reader.latestOffset(checkpoint, ReadAllAvailable())
    assert str(lost.value) == (
        f"data loss in {broker.description}: topic tl4-a is gone with records not read yet: "
        "partition 0 offsets 3 to 4"
    )
    assert lost.value.facts == {
        "source": broker.description,
        "topic": "tl4-a",
        "partition": 0,
        "first_missing": 3,
        "last_missing": 4,
    }
    assert lost.value.exit_code == 3
    del producer


def test_a_topic_deleted_after_it_was_read_to_its_end_stops_saying_what_is_known(
    broker: KafkaEndpoint,
) -> None:
    """Records produced after the last listing went with it: the job cannot tell, and says
    so, with the way out for a topic deleted on purpose."""
    create_topics(broker, ["tl5-a", "tl5-b"], partitions=1)
    produce(broker, TopicPartition("tl5-a", 0), [b"x"] * 3)
    produce(broker, TopicPartition("tl5-b", 0), [b"y"] * 4)
    reader = _reader(broker, "^tl5-.+", timeout_s=2)
    read_up_to = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert _offsets(read_up_to) == {"tl5-a:0": 3, "tl5-b:0": 4}
    delete_topics(broker, ["tl5-b"])
    retire = (
        "if it was retired on purpose, `tablecast-ops retire-topic --topic tl5-b` records "
        "that, and the next start carries on without it"
    )
    with pytest.raises(DataLossError) as running:
        reader.latestOffset(read_up_to, ReadAllAvailable())
    assert str(running.value) == (
        f"data loss in {broker.description}: topic tl5-b is gone: the job read it to "
        "tl5-b:0@4, its end when last listed; records produced to it after that are lost "
        f"with it; {retire}"
    )
    with pytest.raises(DataLossError) as restarted:  # a job that never listed it
        _reader(broker, "^tl5-.+", timeout_s=2).latestOffset(read_up_to, ReadAllAvailable())
    assert str(restarted.value) == (
        f"data loss in {broker.description}: topic tl5-b is gone: the job read it up to "
        "tl5-b:0@4 before it stopped; whether records were produced to it after them "
        f"cannot be told; {retire}"
    )


def test_a_retired_topic_is_read_to_its_end_then_left_whether_kafka_keeps_it_or_not(
    broker: KafkaEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = str(tmp_path / "out")
    create_topics(broker, ["tl6-a", "tl6-b"], partitions=1)
    a, b = TopicPartition("tl6-a", 0), TopicPartition("tl6-b", 0)
    produce(broker, a, [b"x"] * 5)
    produce(broker, b, [b"y"] * 2)
    reader = _reader(broker, "^tl6-.+", timeout_s=2, retired_uri=retired_uri(output))
    begin = reader.initialOffset()
    identity = begin["@topic-ids"]["tl6-a"]
    partly = {**begin, "tl6-a:0": 2, "tl6-b:0": 2}

    done = retire_topic(broker, output, "tl6-a", topic_pattern="^tl6-.+")
    assert done.record.ends == {0: 5} and done.record.identity == identity
    assert done.record.ends_from is EndsFrom.KAFKA
    assert done.lines() == [
        f"retired topic tl6-a at tl6-a:0@5 (its high watermarks): {done.uri}",
        "0 sessions still open (the output has no batch yet)",
    ]
    assert read_retired(retired_uri(output)) == {"tl6-a": done.record}
    produce(broker, a, [b"late"] * 3)  # after its end was taken: never read

    # Read up to its recorded end, then left (logged), whether or not Kafka keeps it.
    to_end = reader.latestOffset(partly, ReadAllAvailable())
    assert _offsets(to_end) == {"tl6-a:0": 5, "tl6-b:0": 2}
    with caplog.at_level("WARNING", logger="app.sources.stream"):
        left = reader.latestOffset(to_end, ReadAllAvailable())
    assert _offsets(left) == {"tl6-b:0": 2}
    assert "topic tl6-a was retired" in caplog.text and "no longer read" in caplog.text
    delete_topics(broker, ["tl6-a"])
    assert _offsets(reader.latestOffset(left, ReadAllAvailable())) == {"tl6-b:0": 2}

    # Created again under its name, it is not this output's to read: never again.
    create_topics(broker, ["tl6-a"], partitions=1)
    produce(broker, a, [b"new"] * 2)
    assert _offsets(reader.latestOffset(left, ReadAllAvailable())) == {"tl6-b:0": 2}
    fresh = _reader(broker, "^tl6-.+", retired_uri=retired_uri(output))  # a new checkpoint too
    assert _offsets(fresh.initialOffset()) == {"tl6-b:0": 0}
    again = retire_topic(broker, output, "tl6-a", topic_pattern="^tl6-.+")
    assert again.recorded_before and again.record == done.record
    assert again.lines()[0].endswith("at tl6-a:0@5: unchanged")


def test_a_retired_topic_gone_before_it_was_read_to_its_end_is_data_loss_naming_the_rest(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    create_topics(broker, ["tl7-a"], partitions=1)
    produce(broker, TopicPartition("tl7-a", 0), [b"x"] * 6)
    retire_topic(broker, output, "tl7-a", topic_pattern="^tl7-.+")
    delete_topics(broker, ["tl7-a"])
    reader = _reader(broker, "^tl7-.+", timeout_s=2, retired_uri=retired_uri(output))
    with pytest.raises(DataLossError) as lost:
        reader.latestOffset({"tl7-a:0": 2}, ReadAllAvailable())
    assert str(lost.value) == (
        f"data loss in {broker.description}: topic tl7-a was retired at tl7-a:0@6 but is "
        "gone before the job read it to that end: partition 0 offsets 2 to 5 were not read"
    )
    assert (lost.value.facts["first_missing"], lost.value.facts["last_missing"]) == (2, 5)


def test_retire_topic_refuses_a_topic_the_job_does_not_read_in_one_line(
    broker: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["retire-topic", "--bootstrap-servers", broker.bootstrap_servers]
    base += ["--output", str(tmp_path / "out")]
    assert ops_cli.main([*base, "--topic", "other-1"]) == 64
    assert capsys.readouterr().err == (
        "tablecast-ops retire-topic: topic other-1 does not match the job's topics "
        "(^sensor-.+): the job never reads it, there is nothing to retire\n"
    )
    assert ops_cli.main([*base, "--topic", "sensor-tl8-none"]) == 64
    assert capsys.readouterr().err == (
        f"tablecast-ops retire-topic: topic sensor-tl8-none: {broker.description} does not "
        f"have it and the output {tmp_path / 'out'} never read it: there is nothing to retire\n"
    )
    assert not (tmp_path / "out").exists()


# -- the settings the source owns --------------------------------------------------


def docs_settings_table() -> dict[str, str]:
    """docs/operations.md's table of the settings the source sets: setting -> its row."""
    text = (ROOT / "docs" / "operations.md").read_text()
    header = "| setting | the source sets it to | `--kafka-option` |"
    rows = text[text.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    found: dict[str, str] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            found[name] = cells[2]
    return found


def test_every_setting_the_source_sets_is_refused_or_honoured_and_the_docs_list_them_all(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")  # IAM's token is signed locally; nothing is sent
    # What the source's clients are given, for every sign-in that needs no secret.
    endpoints = [
        KafkaEndpoint("b:9092"),
        KafkaEndpoint("b:9094", KafkaAuth.TLS, client_rack="euw1-az1"),
        KafkaEndpoint("b:9098", KafkaAuth.IAM, region="eu-west-1"),
    ]
    set_by_source: set[str] = set()
    for endpoint in endpoints:
        consumer = kafka_source.consumer_settings(Isolation.READ_COMMITTED, None, endpoint)
        set_by_source |= set(endpoint.config(**consumer, error_cb=print))
    assert set_by_source - OWNED_SETTINGS - set(HONOURED_SETTINGS) == set()
    # The five consumer settings the source sets for its prefetch and end of a range.
    assert {
        "fetch.wait.max.ms",
        "max.partition.fetch.bytes",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.queue.backoff.ms",
    } <= set_by_source

    # Owned: refused in one line before anything starts (exit 64).
    paths = ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt")]
    for key in sorted(OWNED_SETTINGS):
        args = ["run", "--bootstrap-servers", "b:9092", "--kafka-option", f"{key}=1", *paths]
        assert cli.main(args) == 64, key
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"tablecast run: --kafka-option {key}: the source sets {key}")
    assert not (tmp_path / "ckpt").exists()

    # Honoured: a longer fetch wait reaches the range readers' consumers; a shorter one,
    # or one past the longest, is refused.
    slower = KafkaEndpoint("b:9092", options=(parse_option("fetch.wait.max.ms=200"),))
    settings = kafka_source.consumer_settings(Isolation.READ_COMMITTED, None, slower)
    assert slower.config(**settings)["fetch.wait.max.ms"] == 200
    assert (
        kafka_source.consumer_settings(Isolation.READ_COMMITTED, 500, slower)["fetch.wait.max.ms"]
        == 500
    )  # a test broker's longer wait still wins
    for wait in ("5", "60000", "soon"):
        with pytest.raises(ConfigurationError, match=r"fetch\.wait\.max\.ms"):
            parse_option(f"fetch.wait.max.ms={wait}")
    # A CA bundle of the operator's replaces the probe.
    own_ca = KafkaEndpoint("b:9094", KafkaAuth.TLS, options=(("ssl.ca.location", "/ca.pem"),))
    assert own_ca.config()["ssl.ca.location"] == "/ca.pem"
    # A client's own setting is never silently replaced by an operator's.
    given = KafkaEndpoint("b:9092", options=(("linger.ms", "5"),))
    with pytest.raises(ConfigurationError, match=r"this client sets linger\.ms itself"):
        given.config(**{"linger.ms": 0})

    # The docs' table names every one, and says which are refused.
    table = docs_settings_table()
    owned = {key for key in OWNED_SETTINGS if not key.startswith("sasl.")} | {"sasl.*"}
    assert set(table) == owned | set(HONOURED_SETTINGS)
    assert all(table[key].startswith("refused") for key in owned)
    assert all(table[key].startswith("honoured") for key in HONOURED_SETTINGS)


# -- a transaction left open ---------------------------------------------------------


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_transaction_left_open_shows_behind_the_high_watermark_and_how_long_it_stalled(
    broker: KafkaEndpoint,
) -> None:
    """Committed records wait behind an open transaction: behind its last stable offset the
    job is caught up (0), behind the high watermark it is not, and the stable offset stays
    put while the high watermark moves."""
    create_topics(broker, ["tl9-a"], partitions=1)
    tp = TopicPartition("tl9-a", 0)
    producer = open_transaction(broker, tp, 2)  # offsets 0 and 1, not committed
    produce(broker, tp, [b"c"] * 3)  # committed, behind the transaction
    clock = WallClock(1_767_225_600.0)  # 2026-01-01
    reader = _reader(broker, "^tl9-.+", wall_clock=clock)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert _offsets(end) == {"tl9-a:0": 0}  # nothing readable yet
    first = SourceReport.from_json(reader.reportLatestOffset())
    assert (first.readable, first.high_watermarks) == ({tp: 0}, {tp: 5})
    assert first.stable_since == {tp: 1_767_225_600_000}

    clock.now += 120
    produce(broker, tp, [b"c"] * 2)
    assert _offsets(reader.latestOffset(end, ReadAllAvailable())) == {"tl9-a:0": 0}
    report = reader.reportLatestOffset()
    later = SourceReport.from_json(report)
    assert later.high_watermarks == {tp: 7}  # the high watermark moved on
    assert later.stable_since == first.stable_since  # the stable offset did not

    # What the job publishes and prints of it, from the trigger's progress.
    at = datetime.fromtimestamp(clock.now, UTC).isoformat().replace("+00:00", "Z")
    progress = {
        "timestamp": at,
        "batchId": 4,
        "sources": [{"endOffset": end, "latestOffset": report}],
    }
    lag = source_lag(progress)
    assert lag is not None
    assert (lag.readable, lag.high, lag.stable_stalled_s) == (Lag(0, None, 0), Lag(7, tp, 7), 120)
    line = batch_line(batch_metrics(progress, None))
    assert "behind 0, 7 to the high watermark, a last stable offset stalled 120 s" in line

    producer.commit_transaction(30)
    clock.now += 5
    reader.latestOffset(end, ReadAllAvailable())
    assert SourceReport.from_json(reader.reportLatestOffset()).stable_since == {}
