"""A load generator: realistic capture sessions in the contract's envelope, to Kafka.

The messages are :mod:`app.tools.generate`'s (the same generator ``tablecast
generate`` writes archives with): sessions spread over sources (topics),
snapshot then updates then end, optional periodic resync snapshots, and the
faults of CONTRACT.md section 2 injected where asked. The key is the session
id; each message goes to the partition the generator chose, in the
generator's order, with an idempotent producer so that retries never reorder
or duplicate. The report names the real offset of every injected fault.

``run_id`` is appended to every session id, so a second run never reuses a
session that the job has already seen end.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from app.contract.offsets import TopicPartition
from app.ops.errors import KafkaAdminError, ProduceError
from app.sources.kafka_client import KafkaEndpoint
from app.tools.generate import Capture, CaptureSpec, Fault, Message, generate

_MISSING = "it does not exist: create it with `tablecast-ops topics create`"


@dataclass(frozen=True, slots=True)
class LoadSpec:
    capture: CaptureSpec
    rate: float = 0.0
    """Messages per second over all topics; 0: as fast as the brokers take them."""
    run_id: str = ""
    """Suffix of every session id (``<session>-<run_id>``); empty: the generator's ids."""
    transaction_size: int = 0
    """Commit a transaction every this many messages (0: no transactions). Each
    commit leaves a marker that takes an offset: consumers see offset gaps."""
    one_message_per_batch: bool = False
    """Send every message in a record batch of its own (slower). For brokers
    that answer ListOffsets with the last batch's first offset + 1 instead of
    the partition's end, as tansu does: the end is then right."""


@dataclass(frozen=True, slots=True)
class PublishedFault:
    fault: Fault
    topic: str
    partition: int
    offset: int
    session: str


@dataclass(frozen=True, slots=True)
class ProduceReport:
    messages: int
    sessions: int
    offsets: dict[TopicPartition, tuple[int, int]]
    """Per topic-partition: the first and last offset written."""
    faults: list[PublishedFault]
    seconds: float

    def lines(self) -> list[str]:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"published {self.messages:,} messages of {self.sessions:,} sessions to "
            f"{len(self.offsets)} topic-partitions in {self.seconds:.1f} s ({rate:,.0f}/s)"
        ]
        lines += [
            f"  {tp.topic} partition {tp.partition}: offsets {first}..{last}"
            for tp, (first, last) in sorted(self.offsets.items())
        ]
        lines += [
            f"injected {f.fault.value} at topic {f.topic} partition {f.partition} "
            f"offset {f.offset}, session {f.session}"
            for f in self.faults
        ]
        return lines


def plan(spec: LoadSpec) -> Capture:
    """The capture to publish, session ids tagged with the run id."""
    capture = generate(spec.capture)
    if not spec.run_id:
        return capture
    return Capture(
        partitions={
            tp: [_tag(message, spec.run_id) for message in messages]
            for tp, messages in capture.partitions.items()
        },
        faults=[replace(f, session=f"{f.session}-{spec.run_id}") for f in capture.faults],
    )


def _tag(message: Message, run_id: str) -> Message:
    tagged = f"{message.session}-{run_id}"
    # The envelope's "session" value starts with the id (a session-mismatch
    # fault appends to it); rewrite the bytes, which may not be valid JSON.
    pattern = rb'("session"\s*:\s*")' + re.escape(message.session.encode())
    value = re.sub(pattern, lambda m: m.group(1) + tagged.encode(), message.value, count=1)
    return replace(message, session=tagged, value=value)


def interleave(capture: Capture) -> Iterator[tuple[TopicPartition, int, Message]]:
    """Every partition's messages in order, the partitions taking turns."""
    streams = sorted(capture.partitions.items())
    longest = max((len(messages) for _, messages in streams), default=0)
    for index in range(longest):
        for tp, messages in streams:
            if index < len(messages):
                yield tp, index, messages[index]


def _partitions(endpoint: KafkaEndpoint, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
    """Each topic's partition count; refuse a topic that does not exist."""
    admin = AdminClient(endpoint.config())
    endpoint.prime(admin)
    metadata = admin.list_topics(timeout=timeout_s)
    for name in topics:
        if name not in metadata.topics:
            raise KafkaAdminError(name, "produce to", _MISSING)
    return {name: len(metadata.topics[name].partitions) for name in topics}


def topics_check(endpoint: KafkaEndpoint, capture: Capture, timeout_s: float = 30.0) -> None:
    """Every topic exists with the partitions the capture writes to."""
    counts = _partitions(endpoint, sorted({tp.topic for tp in capture.partitions}), timeout_s)
    for tp in sorted(capture.partitions):
        if tp.partition >= counts[tp.topic]:
            raise KafkaAdminError(
                tp.topic,
                "produce to",
                f"it has {counts[tp.topic]} partitions, the load needs partition {tp.partition}",
            )


def topic_partitions(endpoint: KafkaEndpoint, topics: list[str], timeout_s: float = 30.0) -> int:
    """The fewest partitions among ``topics`` (the load spreads over that many)."""
    return min(_partitions(endpoint, topics, timeout_s).values())


def publish(
    endpoint: KafkaEndpoint,
    spec: LoadSpec,
    *,
    progress: Callable[[int, int], None] | None = None,
    progress_every: int = 1000,
    flush_timeout_s: float = 120.0,
) -> ProduceReport:
    """Publish the load; fail unless every message was delivered, in order.

    ``progress(sent, total)`` runs on this thread after message ``sent`` (from
    0) was handed to the producer, every ``progress_every`` messages: while it
    runs, the stream waits (the pipeline test holds it there).
    """
    capture = plan(spec)
    topics_check(endpoint, capture)
    settings: dict[str, Any] = {
        "enable.idempotence": True,  # acks=all, ordered retries, no duplicates
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
    }
    if spec.one_message_per_batch:
        settings.update({"linger.ms": 0, "batch.num.messages": 1})
    if spec.transaction_size > 0:
        settings["transactional.id"] = f"tablecast-produce-{spec.run_id or int(time.time())}"
    producer = Producer(endpoint.config(**settings))
    endpoint.prime(producer)
    delivered: dict[TopicPartition, list[tuple[int, int]]] = {tp: [] for tp in capture.partitions}
    errors: list[str] = []

    def on_delivery(tp: TopicPartition, index: int) -> Callable[[Any, Any], None]:
        def report(error: Any, record: Any) -> None:
            if error is not None:
                errors.append(f"{tp}: {error.str()}")
            else:
                delivered[tp].append((index, record.offset()))

        return report

    total = capture.messages
    started = time.monotonic()
    in_transaction = 0
    if spec.transaction_size > 0:
        producer.init_transactions(flush_timeout_s)
    for sent, (tp, index, message) in enumerate(interleave(capture)):
        if spec.rate > 0:
            due = started + sent / spec.rate
            # poll returns at the first delivery report, long before ``due``.
            while (wait := due - time.monotonic()) > 0:
                producer.poll(wait)
        if spec.transaction_size > 0 and in_transaction == 0:
            producer.begin_transaction()
        _produce(producer, tp, message, on_delivery(tp, index))
        in_transaction += 1
        if spec.transaction_size > 0 and in_transaction >= spec.transaction_size:
            producer.commit_transaction(flush_timeout_s)
            in_transaction = 0
        if progress is not None and sent % progress_every == 0:
            progress(sent, total)
    if spec.transaction_size > 0 and in_transaction:
        producer.commit_transaction(flush_timeout_s)
    left = producer.flush(flush_timeout_s)
    seconds = time.monotonic() - started
    if progress is not None:
        progress(total, total)
    return _report(capture, delivered, errors + ([f"{left} still queued"] if left else []), seconds)


def _produce(producer: Any, tp: TopicPartition, message: Message, callback: Any) -> None:
    while True:
        try:
            producer.produce(
                tp.topic,
                key=message.session.encode(),
                value=message.value,
                partition=tp.partition,
                timestamp=message.ts,
                on_delivery=callback,
            )
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.5)


def _report(
    capture: Capture,
    delivered: dict[TopicPartition, list[tuple[int, int]]],
    errors: list[str],
    seconds: float,
) -> ProduceReport:
    total = capture.messages
    offsets: dict[TopicPartition, tuple[int, int]] = {}
    where: dict[tuple[TopicPartition, int], int] = {}
    for tp, reports in delivered.items():
        reports.sort()
        sent = [offset for _, offset in reports]
        if sent != sorted(sent) or len(set(sent)) != len(sent):
            errors.append(f"{tp}: offsets out of production order")
        if len(reports) != len(capture.partitions[tp]) and not errors:
            errors.append(f"{tp}: {len(reports)} of {len(capture.partitions[tp])} delivered")
        if sent:
            offsets[tp] = (sent[0], sent[-1])
        where.update({(tp, index): offset for index, offset in reports})
    if errors:
        failed = total - sum(len(r) for r in delivered.values())
        raise ProduceError(max(failed, 1), total, errors[0])
    faults = [
        PublishedFault(
            f.fault,
            f.topic,
            f.partition,
            where[(TopicPartition(f.topic, f.partition), f.offset)],
            f.session,
        )
        for f in capture.faults
    ]
    sessions = len({m.session for messages in capture.partitions.values() for m in messages})
    return ProduceReport(total, sessions, offsets, faults, seconds)
