"""Reading a topic back from the loopback broker, and creating topics for a test."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from app.contract.offsets import TopicPartition as Tp
from app.ops.topics import TopicPolicy, Topics
from app.sources.kafka_client import KafkaEndpoint


def create_topics(broker: KafkaEndpoint, names: list[str], partitions: int) -> None:
    Topics(broker).create(names, TopicPolicy(72, 1, partitions), topic_pattern=None)


def read_back(
    broker: KafkaEndpoint, topics: dict[str, int], timeout_s: float = 30.0
) -> dict[Tp, list[Any]]:
    """Every record of the topics' partitions, in offset order, until each partition's end."""
    consumer = Consumer(
        broker.config(
            **{
                "group.id": "tests-read-back",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            }
        )
    )
    wanted = [TopicPartition(t, p, OFFSET_BEGINNING) for t, n in topics.items() for p in range(n)]
    consumer.assign(wanted)
    records: dict[Tp, list[Any]] = {Tp(w.topic, w.partition): [] for w in wanted}
    at_end: set[Tp] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while at_end != set(records):
            assert time.monotonic() < deadline, f"read back stopped at {at_end}"
            for record in consumer.consume(500, 0.5):
                topic, partition = record.topic(), record.partition()
                assert topic is not None and partition is not None
                tp = Tp(topic, partition)
                error = record.error()
                if error is None:
                    records[tp].append(record)
                    at_end.discard(tp)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(tp)
                else:
                    raise AssertionError(error.str())
    finally:
        consumer.close()
    return records
