"""Putting records on the loopback broker (tansu) for the Kafka source's tests."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from app.contract.offsets import TopicPartition
from app.sources.kafka_client import KafkaEndpoint


def produce(
    broker: KafkaEndpoint,
    tp: TopicPartition,
    values: list[bytes],
    *,
    transaction_every: int = 0,
    timestamp_ms: int = 1_700_000_000_000,
    key: bytes = b"k",
) -> None:
    """``values`` in order, keyed ``key``, one message per batch (tansu's ends are right).

    With ``transaction_every`` > 0, a transaction is committed after every that
    many messages: each commit marker takes an offset that holds no record.
    """
    settings: dict[str, Any] = {"linger.ms": 0, "batch.num.messages": 1, "enable.idempotence": True}
    if transaction_every:
        settings["transactional.id"] = f"tests-{tp.topic}-{tp.partition}"
    producer = Producer(broker.config(**settings))
    if transaction_every:
        producer.init_transactions(30)
    for index, value in enumerate(values):
        if transaction_every and index % transaction_every == 0:
            producer.begin_transaction()
        producer.produce(
            tp.topic, key=key, value=value, partition=tp.partition, timestamp=timestamp_ms + index
        )
        if transaction_every and (index + 1) % transaction_every == 0:
            producer.commit_transaction(30)
    if transaction_every and len(values) % transaction_every:
        producer.commit_transaction(30)
    assert producer.flush(30) == 0


def delete_topics(broker: KafkaEndpoint, names: list[str]) -> None:
    """Delete topics and wait until the brokers no longer list them."""
    admin = AdminClient(broker.config())
    for future in admin.delete_topics(names, request_timeout=30).values():
        future.result()
    deadline = time.monotonic() + 30
    while set(names) & set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, f"topics {names} are still listed"
        time.sleep(0.1)


def open_transaction(broker: KafkaEndpoint, tp: TopicPartition, count: int) -> Producer:
    """A producer with ``count`` records of ``tp`` in a transaction it has not ended."""
    producer = Producer(
        broker.config(
            **{
                "transactional.id": f"tests-open-{tp.topic}",
                "linger.ms": 0,
                "batch.num.messages": 1,
            }
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for index in range(count):
        producer.produce(tp.topic, key=b"k", value=b"t%d" % index, partition=tp.partition)
        producer.flush(30)  # one record a batch: tansu's ends are right
    return producer
