"""What a range read fetches from the brokers, by librdkafka's own statistics (tansu on loopback).

A range that ends before its partition does must not make the consumer
fetch far past its end: unassign() drops whatever was prefetched.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, Producer

from app.contract.offsets import TopicPartition
from app.sources import kafka as kafka_source
from app.sources.kafka import KafkaRange
from app.sources.kafka_client import Isolation, KafkaEndpoint
from tests.ops.kafka_helpers import create_topics

RECORD = b"x" * 1024
RECORDS = 8_000  # 8 MiB in the partition


class Fetched:
    """A consumer made as the source makes its own, with librdkafka's statistics on."""

    def __init__(self, broker: KafkaEndpoint, tp: TopicPartition) -> None:
        self.tp = tp
        self.bytes: list[int] = []
        settings = kafka_source.consumer_settings(Isolation.READ_COMMITTED) | {
            "statistics.interval.ms": 100,
            "stats_cb": self._on_stats,
        }
        self.consumer: Any = Consumer(broker.config(**settings))

    def _on_stats(self, text: str) -> None:
        topic = json.loads(text)["topics"].get(self.tp.topic, {})
        partition = topic.get("partitions", {}).get(str(self.tp.partition))
        if partition is not None:
            self.bytes.append(int(partition["rxbytes"]))

    def settled(self) -> int:
        """The partition's fetched key and value bytes so far, once the statistics stop growing."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self.consumer.poll(0.2)
            if len(self.bytes) >= 3 and self.bytes[-1] == self.bytes[-3]:
                break
        return self.bytes[-1]


def test_a_range_fetches_little_past_its_end(broker: KafkaEndpoint) -> None:
    tp = TopicPartition("kp1", 0)
    create_topics(broker, [tp.topic], partitions=1)
    producer = Producer(broker.config(**{"linger.ms": 20, "batch.size": 64 * 1024}))
    for _ in range(RECORDS):
        producer.produce(tp.topic, key=b"k", value=RECORD, partition=0)
    assert producer.flush(30) == 0

    fetched = Fetched(broker, tp)
    kafka_source._CONSUMERS.give_back(
        broker, Isolation.READ_COMMITTED, fetched.consumer
    )  # the read takes this one
    try:
        table = pa.Table.from_batches(list(KafkaRange(broker, tp, 0, 100).read()))
        assert (
            kafka_source._CONSUMERS.take(broker, Isolation.READ_COMMITTED) is fetched.consumer
        )  # kept for the next
        used = sum(pc.sum(pc.binary_length(table.column(c))).as_py() for c in ("key", "value"))
        assert table.num_rows == 100 and used == 100 * (1 + len(RECORD))
        # About 100 KiB used; librdkafka's defaults fetched megabytes of the 8 MiB
        # behind it. Bounded: a fetch of 256 KiB (whole batches of 64 KiB) while
        # less than 512 KiB waits.
        assert fetched.settled() < 1024 * 1024
    finally:
        fetched.consumer.close()
