"""Kafka as a backend of the job's source, over librdkafka (confluent-kafka).

:class:`KafkaBackend` gives :class:`~app.sources.stream.OffsetStreamReader`
what it needs on the driver, once per trigger: every partition of the topics
matching the pattern (one Metadata request), each topic's ID (one
DescribeTopics request: a topic deleted and created again has a new one),
and each partition's earliest offset, high watermark and, under
``read_committed``, last stable offset (batched ListOffsets requests for
all partitions); a partition the checkpoint reads that an answer lacks is
asked for again before it counts as gone (:meth:`KafkaBackend.bounds`).
Its :class:`KafkaRange` reads one partition's ``[start, end)`` in a Spark
task, at the same isolation level.

Reading a range:

1. Take an idle consumer of this process for the endpoint (or make one);
   it is *assigned* the partition at ``start``: it never joins a group and
   commits nothing, the offsets live in Spark's checkpoint.
2. Consume in offset order, building the records' columns a batch at a time.
3. Stop at ``end``: at a record at or past it, or at the partition's end
   (librdkafka's end-of-partition event, or the consumer's position) when the
   range's last offsets hold no record (transaction markers, compaction).
   Never wait for a record that does not exist.
4. Unassign and keep the consumer for the next range; a consumer whose read
   failed is closed instead.

Offsets the brokers no longer hold are data loss; brokers that do not answer
within ``timeout_s`` (no record for that long) fail the run with
:class:`~app.errors.SourceUnavailableError`, in one line.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import operator
import re
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar, cast

import numpy as np
import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KafkaPartition

# Public names of confluent_kafka.admin, which has no __all__ to say so.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from app.contract.offsets import TopicPartition
from app.errors import (
    ConfigurationError,
    DataLossError,
    SourceUnavailableError,
    UnreadableRecordError,
)
from app.sources.backend import Bounds
from app.sources.kafka_client import FETCH_WAIT_MS, Isolation, KafkaEndpoint
from app.sources.records import HEADERS, SCHEMA, Tier, no_headers, served_by

__all__ = ["DEFAULT_TIMEOUT_S", "KafkaBackend", "KafkaColumns", "KafkaRange"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S: Final = 30.0
BATCH_ROWS: Final = 10_000
_POLL_S: Final = 0.05  # a range's last offsets may hold no record: never wait long
# Messages a consume() call asks for. Each is a Python object the garbage
# collector tracks until its columns are taken: more at once would have them
# survive into older generations and make collections dearer (measured).
_CONSUME_MAX: Final = 1000
# A read without a record for this long asks the brokers whether its offsets
# are still there, then again every _RECHECK_S.
_CHECK_AFTER_S: Final = 1.0
_RECHECK_S: Final = 5.0
_RETRY_S: Final = 0.5
# Spark's timestampType by librdkafka's timestamp type: Kafka's TimestampType
# ids (CreateTime 0, LogAppendTime 1), -1 where the record has none.
_SPARK_TIMESTAMP_TYPES: Final = np.full(
    max(TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME) + 1, -1, np.int32
)
_SPARK_TIMESTAMP_TYPES[TIMESTAMP_CREATE_TIME] = 0
_SPARK_TIMESTAMP_TYPES[TIMESTAMP_LOG_APPEND_TIME] = 1
_TIMESTAMP_TYPE: Final = SCHEMA.field("timestamp").type
# The record timestamps (milliseconds) that the column's int64 microseconds hold.
_MILLIS_MAX: Final = (2**63 - 1) // 1000
_MILLIS_MIN: Final = -_MILLIS_MAX


class RangeMessage(Protocol):
    """A message as a range read takes it from its consumer (librdkafka's ``Message``)."""

    def error(self) -> KafkaError | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> object: ...  # a consumer's: a list of (name, bytes | None), or None


class RangeConsumer(Protocol):
    """What a range read asks of its consumer (librdkafka's ``Consumer``)."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> Sequence[RangeMessage]: ...
    def assign(self, partitions: list[KafkaPartition]) -> None: ...
    def unassign(self) -> None: ...
    def position(self, partitions: list[KafkaPartition]) -> list[KafkaPartition]: ...
    def get_watermark_offsets(
        self, partition: KafkaPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...
    def close(self) -> None: ...


# librdkafka's accessors, mapped over whole consume() batches (typed as a
# consumer's records give them: bytes, a record's offset, headers as a list).
_ERROR: Final = cast("Callable[[RangeMessage], KafkaError | None]", Message.error)
_KEY: Final = cast("Callable[[RangeMessage], bytes | None]", Message.key)
_VALUE: Final = cast("Callable[[RangeMessage], bytes | None]", Message.value)
_OFFSET: Final = cast("Callable[[RangeMessage], int]", Message.offset)
_TIMESTAMP: Final = cast("Callable[[RangeMessage], tuple[int, int]]", Message.timestamp)
_HEADERS: Final = cast(
    "Callable[[RangeMessage], list[tuple[str, bytes | None]] | None]", Message.headers
)
_FIRST: Final = operator.itemgetter(0)
_SECOND: Final = operator.itemgetter(1)
# librdkafka prefetches up to 100,000 messages or 64 MiB of a partition, and
# unassign() drops what the range did not use: on a range that ends before
# the partition does, that was up to 64 MiB more from the brokers than the
# range held, and as much held off the JVM's heap per Python worker. Bound to
# about 768 KiB past the range: a fetch of 256 KiB at most (whole record
# batches, so at least one), and none while 512 KiB or a batch's worth of
# records wait; the next fetch follows 1 ms after the queue drains (1 s by
# default). Measured by bench/kafka_source.py (fetched against used bytes).
_PREFETCH: Final = {
    "max.partition.fetch.bytes": 256 * 1024,
    "queued.max.messages.kbytes": 512,
    "queued.min.messages": BATCH_ROWS,
    "fetch.queue.backoff.ms": 1,
}
_CONSUMER_SETTINGS: Final = {
    **_PREFETCH,
    "group.id": "tablecast-source",  # librdkafka requires one; assigned, it joins no group
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # Never skip offsets silently: a start the brokers no longer hold is data loss.
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
    # At a partition's end the broker holds a fetch this long before it says
    # there is nothing more: a range whose last offsets hold no record learns
    # its end so. The source never waits for new records; short costs nothing.
    "fetch.wait.max.ms": FETCH_WAIT_MS,
}
_DATA_LOSS_CODES: Final = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
# librdkafka recovers from other errors by itself (they are reported for
# information); these it cannot.
_STOP_CODES: Final = frozenset(
    {
        KafkaError._SSL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
# A sign-in the brokers refused: often transient on MSK (a token or a SCRAM
# credential being rotated, a broker restarting): asked again until the
# timeout, then reported in one line.
_AUTH_CODES: Final = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
_REFUSED: Final = "the brokers refused the sign-in: "
_NO_TOPIC_ID: Final = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero UUID: a broker that has no topic IDs

T = TypeVar("T")


@dataclass(frozen=True)
class KafkaBackend:
    """Kafka's brokers as a :class:`~app.sources.stream.Backend`."""

    endpoint: KafkaEndpoint
    topic_pattern: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    isolation: Isolation = Isolation.READ_COMMITTED
    # None: the source's fetch wait. A test broker's longer one (app.sources.broker_quirks),
    # which each range takes to its task.
    fetch_wait_ms: int | None = field(default=None, kw_only=True)
    # Expected partitions this process found missing from every answer for the timeout.
    _gone: set[TopicPartition] = field(default_factory=set, init=False, compare=False, repr=False)

    @property
    def description(self) -> str:
        return self.endpoint.description

    def matches(self, topic: str) -> bool:
        return not topic.startswith("__") and re.fullmatch(self.topic_pattern, topic) is not None

    def partitions(self) -> list[TopicPartition]:
        """Every partition of the topics the pattern matches (the whole name), now.

        Internal topics (``__consumer_offsets``, MSK's ``__amazon_msk_canary``)
        are never read. A matching topic whose metadata carries an error
        (a leader being elected) is asked again until ``timeout_s``.
        """
        admin = _admin(self.endpoint)
        deadline = time.monotonic() + self.timeout_s
        while True:
            metadata = self._call(
                "list the topics", deadline, lambda: admin.list_topics(timeout=self.timeout_s)
            )
            found: list[TopicPartition] = []
            unsettled: list[str] = []
            for name, topic in metadata.topics.items():
                if not self.matches(name):
                    continue
                if topic.error is not None:
                    unsettled.append(f"topic {name}: {topic.error.str()}")
                    continue
                found.extend(TopicPartition(name, p) for p in topic.partitions)
            if not unsettled:
                return sorted(found)
            if time.monotonic() >= deadline:
                raise SourceUnavailableError(
                    f"{self.description} gave no usable metadata within {self.timeout_s:g} s: "
                    + "; ".join(unsettled)
                )
            time.sleep(_RETRY_S)

    def bounds(self, expected: Collection[TopicPartition] = ()) -> dict[TopicPartition, Bounds]:
        """Every partition the pattern matches, with its offsets and its topic's ID, now.

        A partition of ``expected`` (one the checkpoint reads) missing from an
        answer is not taken for gone at once: brokers answer metadata from an
        empty cache around a restart (MSK's rolling patches do). The brokers
        are asked again every half second: the first answer that lists every
        expected partition is taken. One missing from every answer for
        ``timeout_s`` is confirmed gone (and not waited for again by this
        process until it is listed again); one that some answers listed and
        the last did not fails the trigger in one line (exit 5): the brokers
        disagree, and a restart asks them again.
        """
        wanted = {tp for tp in expected if self.matches(tp.topic)} - self._gone
        deadline = time.monotonic() + self.timeout_s
        listed: set[TopicPartition] = set()  # the wanted partitions some answer listed
        while True:
            found, named = self._bounds_now()
            self._gone.difference_update(found)
            missing = wanted - found.keys()
            listed |= wanted & named
            if not missing:
                return found
            if time.monotonic() + _RETRY_S >= deadline:
                break
            log.info(
                "%s answered without %s: asking again",
                self.description,
                ", ".join(str(tp) for tp in sorted(missing)),
            )
            time.sleep(_RETRY_S)
        unsettled = sorted(missing & listed)
        if unsettled:
            raise SourceUnavailableError(
                f"{self.description} answered inconsistently for {self.timeout_s:g} s: "
                f"{', '.join(str(tp) for tp in unsettled)} listed in some answers, "
                "missing from others (the brokers' metadata is not settled; a restart asks again)"
            )
        log.warning(
            "%s has no %s: missing from every answer for %g s",
            self.description,
            ", ".join(str(tp) for tp in sorted(missing)),
            self.timeout_s,
        )
        self._gone.update(missing)
        return found

    def _bounds_now(self) -> tuple[dict[TopicPartition, Bounds], set[TopicPartition]]:
        """One answer of the brokers: the partitions, their topics' IDs and their offsets.

        Also the partitions the metadata named, those whose topic then had no
        ID included (deleted meanwhile, or an answer from another cache).
        """
        named = self.partitions()
        if not named:
            return {}, set()
        identities = self.identities(sorted({tp.topic for tp in named}))
        # A topic deleted since it was listed has no ID: it is absent.
        partitions = [tp for tp in named if tp.topic in identities]
        if not partitions:
            return {}, set(named)
        earliest = self._offsets(partitions, OffsetSpec.earliest(), "earliest")  # type: ignore[no-untyped-call]
        latest = self._offsets(partitions, OffsetSpec.latest(), "latest")  # type: ignore[no-untyped-call]
        stable: dict[TopicPartition, int] = {}
        if self.isolation is Isolation.READ_COMMITTED:
            stable = self._offsets(
                partitions,
                OffsetSpec.latest(),  # type: ignore[no-untyped-call]
                "last stable",
                IsolationLevel.READ_COMMITTED,
            )
        found = {
            tp: Bounds(
                earliest[tp], latest[tp], stable=stable.get(tp), identity=identities[tp.topic]
            )
            for tp in partitions
        }
        return found, set(named)

    def identities(self, topics: list[str]) -> dict[str, str]:
        """Each topic's ID ("" from a broker without them); topics gone meanwhile are left out."""
        if not topics:
            return {}
        admin = _admin(self.endpoint)

        def ask() -> dict[str, str]:
            futures = admin.describe_topics(TopicCollection(topics), request_timeout=self.timeout_s)
            found: dict[str, str] = {}
            for name, future in futures.items():
                try:
                    topic_id = str(future.result().topic_id)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if isinstance(error, KafkaError) and (
                        error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                    ):
                        continue
                    raise
                found[name] = "" if topic_id == _NO_TOPIC_ID else topic_id
            return found

        deadline = time.monotonic() + self.timeout_s
        return self._call(f"describe {len(topics)} topics", deadline, ask)

    def offsets_at(self, timestamp_ms: int) -> dict[TopicPartition, int]:
        partitions = self.partitions()
        if not partitions:
            return {}
        at = self._offsets(partitions, OffsetSpec.for_timestamp(timestamp_ms), "timed")
        latest = self._offsets(partitions, OffsetSpec.latest(), "latest")  # type: ignore[no-untyped-call]
        return {tp: at[tp] if at[tp] >= 0 else latest[tp] for tp in partitions}

    def reader(self, tp: TopicPartition, start: int, end: int) -> KafkaRange:
        return KafkaRange(
            endpoint=self.endpoint,
            tp=tp,
            start=start,
            end=end,
            timeout_s=self.timeout_s,
            isolation=self.isolation,
            fetch_wait_ms=self.fetch_wait_ms,
        )

    def _offsets(
        self,
        partitions: list[TopicPartition],
        spec: Any,
        which: str,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, int]:
        """One ListOffsets request per leader for all ``partitions``, not one per partition."""
        admin = _admin(self.endpoint)
        request = {KafkaPartition(tp.topic, tp.partition): spec for tp in partitions}

        def ask() -> dict[TopicPartition, int]:
            futures = admin.list_offsets(
                request, isolation_level=isolation, request_timeout=self.timeout_s
            )
            return {
                TopicPartition(kp.topic, kp.partition): int(future.result().offset)
                for kp, future in futures.items()
            }

        deadline = time.monotonic() + self.timeout_s
        return self._call(
            f"list the {which} offsets of {len(partitions)} partitions", deadline, ask
        )

    def _call(self, what: str, deadline: float, call: Callable[[], T]) -> T:
        """``call``, again while its error is retriable and time is left; else one line.

        A refused sign-in is retried too (until the deadline); the line then
        says that the brokers refused it, and why.
        """
        _admin(self.endpoint)
        sign_in = _ADMIN_SIGN_INS[self.endpoint]
        sign_in.refused = ""
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in _AUTH_CODES
                )
                if not retriable or time.monotonic() + _RETRY_S >= deadline:
                    _admin(self.endpoint)  # serves the error callback
                    why = f"{_REFUSED}{sign_in.refused}" if sign_in.refused else _error_text(exc)
                    raise SourceUnavailableError(
                        f"{self.description}: could not {what} within {self.timeout_s:g} s: {why}"
                    ) from None
            time.sleep(_RETRY_S)


@dataclass(frozen=True)
class KafkaRange:
    """A task's read of one partition's offsets ``[start, end)`` (pickled to executors)."""

    endpoint: KafkaEndpoint
    tp: TopicPartition
    start: int
    end: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    isolation: Isolation = Isolation.READ_COMMITTED
    fetch_wait_ms: int | None = field(default=None, kw_only=True)  # see KafkaBackend

    def read(self) -> Iterator[pa.RecordBatch]:
        """The range's records in offset order, ``BATCH_ROWS`` at a time (served by Kafka)."""
        # Step 1
        consumer = _CONSUMERS.take(self.endpoint, self.isolation, self.fetch_wait_ms)
        if isinstance(consumer, _RangeConsumer):
            consumer.sign_in.refused = ""  # a kept consumer's earlier refusal is not this read's
        try:
            for batch in self._batches(consumer):
                yield served_by(batch, Tier.KAFKA)
        except BaseException:
            consumer.close()  # a failed or abandoned read leaves nothing to reuse
            raise
        # Step 4
        consumer.unassign()
        _CONSUMERS.give_back(self.endpoint, self.isolation, consumer, self.fetch_wait_ms)

    def earliest(self) -> int | None:
        """The partition's earliest offset on the brokers now; None if they do not say in time.

        Asked from a task, just before it reads: retention may have moved
        since the micro-batch was planned (:mod:`app.sources.tiered`).
        """
        consumer = _CONSUMERS.take(self.endpoint, self.isolation, self.fetch_wait_ms)
        try:
            low, _ = consumer.get_watermark_offsets(
                KafkaPartition(self.tp.topic, self.tp.partition),
                timeout=self.timeout_s,
                cached=False,
            )
        except KafkaException as exc:
            log.info(
                "the earliest offset of %s from %s: %s",
                self.tp,
                self.endpoint.description,
                _error_text(exc),
            )
            return None
        finally:
            _CONSUMERS.give_back(self.endpoint, self.isolation, consumer, self.fetch_wait_ms)
        return int(low) if low >= 0 else None  # librdkafka's "invalid offset" is negative

    def _batches(self, consumer: RangeConsumer) -> Iterator[pa.RecordBatch]:
        where = KafkaPartition(self.tp.topic, self.tp.partition)
        # A consumer new to a topic learns its leader from a later, rate-limited
        # metadata refresh (about a second, measured); asked first, the fetch
        # starts at once.
        self._check_exists(consumer)
        consumer.assign([KafkaPartition(self.tp.topic, self.tp.partition, self.start)])
        columns = KafkaColumns(self.tp)
        next_offset = self.start
        last_progress = time.monotonic()
        next_check = last_progress + _CHECK_AFTER_S
        ended_at: int | None = None  # where the partition ended, if before ``end``
        # Step 2: whole consume() batches at a time, no Python call per record
        # beyond librdkafka's own (KafkaColumns.extend).
        while next_offset < self.end:
            # consume() returns early only with as many messages as it asked
            # for: never ask for more than the range still holds, nor than
            # fills the batch being built.
            wanted = min(_CONSUME_MAX, self.end - next_offset, BATCH_ROWS - len(columns))
            messages = consumer.consume(num_messages=wanted, timeout=_POLL_S)
            errors = list(map(_ERROR, messages))
            # (``is not``: a KafkaError compared with None leaves an exception set.)
            if any(map(operator.is_not, errors, itertools.repeat(None))):  # events (rare)
                for message, error in zip(messages, errors, strict=True):
                    if error is not None:
                        reached = self._on_error(message, error)
                        if reached is not None:
                            ended_at = reached
                messages = [m for m, e in zip(messages, errors, strict=True) if e is None]
            if messages:
                offsets = list(map(_OFFSET, messages))
                self._check_order(offsets, next_offset)
                if offsets[-1] >= self.end:  # Step 3: past the range (its last offsets are empty)
                    kept = bisect.bisect_left(offsets, self.end)
                    messages, offsets = messages[:kept], offsets[:kept]
                    next_offset = self.end
                if offsets:
                    columns.extend(messages, offsets)
                    next_offset = max(next_offset, offsets[-1] + 1)
                    last_progress = time.monotonic()
                    next_check = last_progress + _CHECK_AFTER_S
                if len(columns) >= BATCH_ROWS:
                    yield columns.batch()
            if ended_at is not None and ended_at >= self.end:
                break  # Step 3: the partition ends at or past the range
            if next_offset >= self.end:
                break
            if not messages and consumer.position([where])[0].offset >= self.end:
                break  # Step 3: the consumer passed the range without a record or an event
            now = time.monotonic()
            if now - last_progress > self.timeout_s:
                self._check_signed_in(consumer)
                raise SourceUnavailableError(self._stalled(next_offset, ended_at))
            if now >= next_check:  # nothing for a while: are the offsets still there?
                self._check_still_held(consumer, where, next_offset, last_progress)
                next_check = now + _RECHECK_S
        if len(columns):
            yield columns.batch()

    def _check_signed_in(self, consumer: RangeConsumer) -> None:
        """One line naming the sign-in, if the brokers refused this read's consumer its own.

        librdkafka asks again by itself until the read's timeout; the refusal
        reaches only the consumer's error callback, served by consume().
        """
        sign_in = getattr(consumer, "sign_in", None)
        if sign_in is None:
            return
        consumer.consume(num_messages=1, timeout=0)  # an unassigned or stalled consumer: no record
        if sign_in.refused:
            raise SourceUnavailableError(
                f"{self.endpoint.description}: could not read {self.tp} within "
                f"{self.timeout_s:g} s: {_REFUSED}{sign_in.refused}"
            )

    def _check_order(self, offsets: list[int], next_offset: int) -> None:
        """One partition's records come in increasing offsets, from ``next_offset`` on."""
        increasing = all(map(operator.lt, offsets, itertools.islice(offsets, 1, None)))
        if increasing and offsets[0] >= next_offset:
            return
        previous = next_offset - 1
        for offset in offsets:
            if offset <= previous:
                raise SourceUnavailableError(
                    f"{self.endpoint.description} returned {self.tp} offset {offset} "
                    f"after {previous}: records out of order"
                )
            previous = offset

    def _check_exists(self, consumer: RangeConsumer) -> None:
        """Data loss if the topic or partition is gone since the batch was planned.

        An answer without it is asked again, as the planner does
        (:meth:`KafkaBackend.bounds`): it is gone once every answer for the
        timeout lacked it.
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                metadata = consumer.list_topics(self.tp.topic, timeout=self.timeout_s)
            except KafkaException as exc:
                self._check_signed_in(consumer)
                raise SourceUnavailableError(
                    f"{self.endpoint.description}: could not read the metadata of {self.tp} "
                    f"within {self.timeout_s:g} s: {_error_text(exc)}"
                ) from None
            topic = metadata.topics.get(self.tp.topic)
            error = None if topic is None else topic.error
            if topic is None or (
                error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                gone = True
            else:
                gone = error is None and self.tp.partition not in topic.partitions
            if not gone:
                return
            if time.monotonic() + _RETRY_S >= deadline:
                break
            time.sleep(_RETRY_S)
        raise DataLossError(
            f"data loss in {self.endpoint.description}: {self.tp} is gone but offsets "
            f"{self.start} to {self.end - 1} were not read yet",
            **self._facts(),
            first_missing=self.start,
            last_missing=self.end - 1,
        )

    def _on_error(self, message: RangeMessage, error: KafkaError) -> int | None:
        """Where the partition ends (an end-of-partition event), or None; raise what is fatal."""
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            return _OFFSET(message)  # an event's offset: where the partition ends
        if code in _DATA_LOSS_CODES:
            raise DataLossError(
                f"data loss in {self.endpoint.description}: {self.tp} offset {self.start} is no "
                f"longer on the brokers ({error.str()}): retention or deletion dropped it, or "
                "the topic was recreated",
                **self._facts(),
                offset=self.start,
                kafka_error=error.str(),
            )
        if error.fatal() or code in _STOP_CODES:
            raise SourceUnavailableError(
                f"{self.endpoint.description}: reading {self.tp}: {error.str()}"
            )
        log.info(
            "reading %s from %s: %s (the client retries)",
            self.tp,
            self.endpoint.description,
            error.str(),
        )
        return None

    def _check_still_held(
        self, consumer: RangeConsumer, where: KafkaPartition, next_offset: int, last_progress: float
    ) -> None:
        """Data loss if the brokers no longer hold ``[next_offset, end)``.

        Some brokers answer a fetch out of their range with nothing at all
        instead of an error; their watermarks tell.
        """
        remaining = last_progress + self.timeout_s - time.monotonic()
        try:
            low, high = consumer.get_watermark_offsets(
                where, timeout=max(remaining, _POLL_S), cached=False
            )
        except KafkaException:
            return  # unreachable: the timeout reports it
        if low > next_offset:
            raise DataLossError(
                f"data loss in {self.endpoint.description}: {self.tp} must continue at offset "
                f"{next_offset} but its earliest offset is {low}: retention or deletion dropped "
                "the rest, or the topic was recreated",
                **self._facts(),
                offset=next_offset,
                earliest=low,
            )
        if high < self.end:
            raise DataLossError(
                f"data loss in {self.endpoint.description}: {self.tp} ends at offset {high} "
                f"but the micro-batch reads it up to {self.end - 1}: records were lost on the "
                "brokers, or the topic was recreated",
                **self._facts(),
                first_missing=high,
                last_missing=self.end - 1,
            )

    def _facts(self) -> dict[str, str | int]:
        """What every data loss error of this range names."""
        return {
            "source": self.endpoint.description,
            "topic": self.tp.topic,
            "partition": self.tp.partition,
        }

    def _stalled(self, next_offset: int, ended_at: int | None) -> str:
        if ended_at is not None:  # a follower behind its leader, or offsets lost on the brokers
            return (
                f"{self.endpoint.description} gave {self.tp} only up to offset {ended_at - 1} "
                f"within {self.timeout_s:g} s, but the micro-batch reads it up to {self.end - 1}"
            )
        return (
            f"{self.endpoint.description} gave no record of {self.tp} from offset {next_offset} "
            f"within {self.timeout_s:g} s (the micro-batch reads it up to {self.end - 1}): "
            "are the brokers reachable?"
        )


class KafkaColumns:
    """librdkafka's messages of one partition as the Kafka source's columns (records.SCHEMA).

    Built a consume() batch at a time: each column is taken from all of the
    batch's messages by one ``map`` over librdkafka's accessor, and the Arrow
    arrays from whole lists, so no Python code runs per record.
    """

    __slots__ = ("headers", "keys", "kinds", "millis", "offsets", "tp", "values")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.millis: list[int] = []
        self.kinds: list[int] = []  # librdkafka's timestamp types
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, messages: Sequence[RangeMessage], offsets: list[int]) -> None:
        """Append ``messages`` (records, no events) whose offsets are ``offsets``."""
        self.keys += map(_KEY, messages)
        self.values += map(_VALUE, messages)
        # Unpacked at once: the pairs are freed here, not kept for the garbage collector.
        stamps = list(map(_TIMESTAMP, messages))
        self.kinds += map(_FIRST, stamps)
        self.millis += map(_SECOND, stamps)
        self.headers += map(_HEADERS, messages)
        self.offsets += offsets

    def batch(self) -> pa.RecordBatch:
        """The columns so far, as one record batch; starts over empty."""
        count = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.repeat(pa.scalar(self.tp.topic, pa.string()), count),
                pa.repeat(pa.scalar(self.tp.partition, pa.int32()), count),
                pa.array(self.offsets, pa.int64()),
                pa.array(self._micros(), _TIMESTAMP_TYPE),
                pa.array(_spark_timestamp_types(self.kinds), pa.int32()),
                _headers_column(self.headers),
            ],
            schema=SCHEMA,
        )
        self.keys, self.values, self.offsets, self.millis, self.kinds, self.headers = (
            [],
            [],
            [],
            [],
            [],
            [],
        )
        return batch

    def _micros(self) -> Any:
        """The record timestamps as microseconds (numpy int64); one past int64 is refused.

        NumPy's product would wrap silently (2**62 ms comes out as 1970), where
        Spark's source fails the query (``Math.multiplyExact``).
        """
        millis = np.array(self.millis, np.int64)
        if len(millis) and (millis.min() < _MILLIS_MIN or millis.max() > _MILLIS_MAX):
            at = int(np.flatnonzero((millis < _MILLIS_MIN) | (millis > _MILLIS_MAX))[0])
            raise UnreadableRecordError(
                f"{self.tp} offset {self.offsets[at]} has the Kafka timestamp "
                f"{self.millis[at]} ms, beyond what a timestamp column holds "
                f"({_MILLIS_MIN} to {_MILLIS_MAX} ms): its producer set it, and Spark's "
                "Kafka source refuses it too; the brokers keep such records out with "
                "log.message.timestamp.after.max.ms (docs/operations.md)",
                topic=self.tp.topic,
                partition=self.tp.partition,
                offset=self.offsets[at],
                timestamp_ms=self.millis[at],
            )
        return millis * 1000


def _spark_timestamp_types(kinds: list[int]) -> Any:
    """librdkafka's timestamp types as Spark's ``timestampType`` values (numpy int32)."""
    if kinds.count(TIMESTAMP_CREATE_TIME) == len(kinds):  # what producers set: the usual case
        return np.zeros(len(kinds), np.int32)
    return _SPARK_TIMESTAMP_TYPES[np.array(kinds, np.intp)]


def _headers_column(headers: list[list[tuple[str, bytes | None]] | None]) -> pa.Array:
    """Each record's headers in order, an empty list where it has none (CONTRACT.md 4)."""
    if headers.count(None) == len(headers):
        return no_headers(len(headers))
    return pa.array([h or () for h in headers], HEADERS)


class _ConsumerPool:
    """This process's idle consumers, by endpoint and settings, reused across micro-batches.

    Spark reuses its Python workers between tasks, so a consumer made for one
    range keeps its connections (and, on MSK, its signed-in sessions) for the
    next. A worker runs one task at a time; a consumer in use is out of the
    pool, so two reads never share one.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[KafkaEndpoint, Isolation, int | None], list[RangeConsumer]] = {}
        self._lock = threading.Lock()

    def take(
        self, endpoint: KafkaEndpoint, isolation: Isolation, fetch_wait_ms: int | None = None
    ) -> RangeConsumer:
        with self._lock:
            idle = self._idle.get((endpoint, isolation, fetch_wait_ms))
            if idle:
                return idle.pop()
        sign_in = _SignIn(endpoint)
        settings = consumer_settings(isolation, fetch_wait_ms, endpoint) | {"error_cb": sign_in}
        consumer: _RangeConsumer = _client(_RangeConsumer, endpoint, settings)
        consumer.sign_in = sign_in
        return consumer

    def give_back(
        self,
        endpoint: KafkaEndpoint,
        isolation: Isolation,
        consumer: RangeConsumer,
        fetch_wait_ms: int | None = None,
    ) -> None:
        with self._lock:
            self._idle.setdefault((endpoint, isolation, fetch_wait_ms), []).append(consumer)


class _SignIn:
    """A client's error callback: keeps the last sign-in the brokers refused, logs the rest."""

    __slots__ = ("endpoint", "refused")

    def __init__(self, endpoint: KafkaEndpoint) -> None:
        self.endpoint = endpoint
        self.refused = ""

    def __call__(self, error: KafkaError) -> None:
        if error.code() in _AUTH_CODES:
            self.refused = error.str()
        else:
            log.info("%s: %s (the client retries)", self.endpoint.description, error.str())


class _RangeConsumer(Consumer):
    """A range reader's consumer, with its :class:`_SignIn` callback."""

    sign_in: _SignIn


def consumer_settings(
    isolation: Isolation, fetch_wait_ms: int | None = None, endpoint: KafkaEndpoint | None = None
) -> dict[str, Any]:
    """A range reader's librdkafka settings (beside its endpoint's).

    ``fetch_wait_ms``: a test broker's longer fetch wait (:mod:`app.sources.broker_quirks`);
    the endpoint's operator may give a longer one too (``--kafka-option``): the
    longest of the three is taken.
    """
    settings: dict[str, Any] = dict(_CONSUMER_SETTINGS)
    waits = (FETCH_WAIT_MS, fetch_wait_ms, None if endpoint is None else endpoint.fetch_wait_ms())
    settings["fetch.wait.max.ms"] = max(w for w in waits if w is not None)
    # The records the planner planned: under read_committed it plans up to the
    # last stable offset, and the brokers leave aborted transactions out.
    settings["isolation.level"] = isolation.value
    return settings


_CONSUMERS = _ConsumerPool()
_ADMINS: dict[KafkaEndpoint, Any] = {}
_ADMINS_LOCK = threading.Lock()
# The admin clients' error callbacks: librdkafka reports a refused sign-in to
# the callback only, the request itself just times out.
_ADMIN_SIGN_INS: dict[KafkaEndpoint, _SignIn] = {}


def _error_text(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def _admin(endpoint: KafkaEndpoint) -> Any:
    """This process's admin client for ``endpoint`` (the driver asks at every trigger)."""
    with _ADMINS_LOCK:
        admin = _ADMINS.get(endpoint)
        if admin is None:
            sign_in = _ADMIN_SIGN_INS[endpoint] = _SignIn(endpoint)
            admin = _ADMINS[endpoint] = _client(AdminClient, endpoint, {"error_cb": sign_in})
    admin.poll(0)  # serves the token refresh and log callbacks
    return admin


def _client(
    kind: Callable[[dict[str, Any]], Any], endpoint: KafkaEndpoint, settings: dict[str, Any]
) -> Any:
    try:
        client = kind(endpoint.config(**settings))
    except KafkaException as exc:
        raise ConfigurationError(
            f"the Kafka client settings for {endpoint.description} are refused: {exc}"
        ) from None
    endpoint.prime(client)
    return client
