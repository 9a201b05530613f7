"""The load generator against a real Kafka-protocol broker (tansu on loopback)."""

from __future__ import annotations

import orjson
import pytest

from app.contract.offsets import TopicPartition
from app.ops.errors import KafkaAdminError
from app.ops.produce import LoadSpec, plan, publish, topic_partitions
from app.sources.kafka_client import KafkaEndpoint
from app.tools.generate import CaptureSpec, Fault
from tests.ops.kafka_helpers import create_topics, read_back


def test_sessions_are_published_in_the_envelope_keyed_and_in_order(broker: KafkaEndpoint) -> None:
    spec = LoadSpec(
        CaptureSpec(
            topics=2,
            partitions=2,
            sessions=6,
            updates=12,
            resync_every=5,
            prefix="sensor-p1-",
            seed=3,
        ),
        run_id="r1",
    )
    create_topics(broker, ["sensor-p1-0", "sensor-p1-1"], partitions=2)
    report = publish(broker, spec)
    expected = plan(spec)
    assert report.messages == expected.messages and report.sessions == 6
    records = read_back(broker, {"sensor-p1-0": 2, "sensor-p1-1": 2})
    for tp, messages in expected.partitions.items():
        got = records[tp]
        # Exactly the planned messages, in the planned order, from offset 0 on.
        assert [(r.key(), r.value()) for r in got] == [
            (m.session.encode(), m.value) for m in messages
        ]
        assert [r.offset() for r in got] == list(range(len(messages)))
        assert [r.timestamp()[1] for r in got] == [m.ts for m in messages]
        assert report.offsets[tp] == (0, len(messages) - 1)
    # The envelope: the key is the session (tagged with the run id), seq runs
    # 0, 1, 2, ... per session, snapshot first, resyncs, end last.
    sessions: dict[str, list[dict[str, object]]] = {}
    for tp in sorted(records):
        for record in records[tp]:
            doc = orjson.loads(record.value())
            assert doc["session"] == record.key().decode()
            assert record.key().decode().endswith("-r1")
            sessions.setdefault(doc["session"], []).append(doc)
    assert len(sessions) == 6
    for docs in sessions.values():
        assert [d["seq"] for d in docs] == list(range(len(docs)))
        kinds = [d["type"] for d in docs]
        assert kinds[0] == "snapshot" and kinds[-1] == "end"
        assert kinds[5] == "snapshot" and kinds[10] == "snapshot"  # resync every 5
        assert all(isinstance(d["ts"], int) for d in docs)


def test_the_rate_spreads_the_messages_over_time(broker: KafkaEndpoint) -> None:
    spec = LoadSpec(
        CaptureSpec(topics=1, partitions=1, sessions=2, updates=8, prefix="sensor-rate-", seed=4),
        rate=20.0,
    )
    create_topics(broker, ["sensor-rate-0"], partitions=1)
    report = publish(broker, spec)
    # The n-th message is not sent before n / rate seconds: a floor, never a ceiling.
    assert report.messages == plan(spec).messages > 1
    assert report.seconds >= (report.messages - 1) / spec.rate


def test_injected_faults_are_reported_at_their_real_offsets(broker: KafkaEndpoint) -> None:
    faults = (Fault.SEQ_GAP, Fault.SESSION_MISMATCH, Fault.BAD_JSON)
    spec = LoadSpec(
        CaptureSpec(
            topics=1,
            partitions=1,
            sessions=4,
            updates=6,
            prefix="sensor-p2-",
            faults=faults,
            seed=5,
        ),
        run_id="r2",
    )
    create_topics(broker, ["sensor-p2-0"], partitions=1)
    report = publish(broker, spec)
    records = read_back(broker, {"sensor-p2-0": 1})[TopicPartition("sensor-p2-0", 0)]
    assert sorted(f.fault for f in report.faults) == sorted(faults)
    for fault in report.faults:
        record = records[fault.offset]
        assert record.key().decode() == fault.session
        if fault.fault is Fault.BAD_JSON:
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(record.value())
        elif fault.fault is Fault.SESSION_MISMATCH:
            # The key is the session; the envelope names another one.
            assert orjson.loads(record.value())["session"] == f"{fault.session}-other"
        else:
            doc = orjson.loads(record.value())
            assert doc["session"] == fault.session


def test_producing_to_a_missing_topic_is_refused(broker: KafkaEndpoint) -> None:
    spec = LoadSpec(CaptureSpec(topics=1, partitions=1, sessions=1, prefix="sensor-p3-"))
    with pytest.raises(KafkaAdminError, match="create it with `tablecast-ops topics create`"):
        publish(broker, spec)


def test_a_load_spreads_over_the_fewest_partitions_and_needs_that_many_in_each_topic(
    broker: KafkaEndpoint,
) -> None:
    create_topics(broker, ["sensor-p5-0"], partitions=3)
    create_topics(broker, ["sensor-p5-1"], partitions=1)
    assert topic_partitions(broker, ["sensor-p5-0", "sensor-p5-1"]) == 1
    with pytest.raises(KafkaAdminError, match="create it with"):
        topic_partitions(broker, ["sensor-p5-0", "sensor-p5-9"])
    spec = LoadSpec(CaptureSpec(topics=2, partitions=2, sessions=8, prefix="sensor-p5-"))
    with pytest.raises(KafkaAdminError) as refused:
        publish(broker, spec)
    assert str(refused.value) == (
        "produce to topic 'sensor-p5-1' failed: it has 1 partitions, the load needs partition 1"
    )
