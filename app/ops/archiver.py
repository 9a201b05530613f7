"""Keep the raw archive (CONTRACT.md section 4) in step with Kafka.

The archive's files are the archiver's only state: it starts each partition
where the partition's last file ends and commits nothing to Kafka, so a crash
at any moment loses nothing (what it had not written is still on the
brokers) and duplicates nothing (a file is written whole or not at all). One
archiver per archive: two would each cut their own files, and the job would
stop on the overlap, so every write first checks that the partition's archive
still ends where the new file starts.

The order of one partition's file:

1. Consume the partition from its archive end: the last file's end, or the
   first record on the brokers for a partition not archived yet. Offsets the
   broker's retention already dropped are data loss: the archiver stops.
2. Cut a file when it holds ``max_records`` records or ``max_bytes`` bytes,
   when its first record has waited ``max_wait_s``, when a catch-up run found
   the partition's end, or when the archiver stops.
3. Check that the partition's archive still ends at the file's start.
4. Write ``<start>-<end>.parquet`` whole (write, then rename into place), where
   ``start`` is the previous file's end and ``end`` the last record's offset
   + 1: the files continue one another exactly. Each record keeps its
   headers (the ``headers`` column, CONTRACT.md 1.1). A file may hold fewer records
   than ``end - start`` where Kafka skipped offsets (transaction markers,
   compaction), never one outside its range. Where the archive is under Object
   Lock, lock the file.
5. The partition's next file starts at ``end``.

It reads what the job's Kafka source reads (its isolation level, by default
``read_committed``: no record of an aborted transaction; the same columns:
:mod:`app.sources.kafka`), so the job sees the same records from either.

Run it as a catch-up (``catch_up``: until every partition is at its end, then
exit; from cron or a systemd timer) or as a service (``follow``: until told to
stop, picking up new topics and partitions of the pattern as they appear).
A service publishes, every ``metrics_every_s``, its heartbeat and how many
records Kafka holds that the archive does not yet
(:data:`app.metric_names.ARCHIVER`): infra's alarms watch them, since once
Kafka's retention passes the archive is the only copy. Where the archive is
under Object Lock (:mod:`app.ops.archive_lock`), step 4 locks each file.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import TopicPartition as KafkaPartition

from app import handoff, metric_names
from app.contract.offsets import TopicPartition
from app.errors import DataLossError
from app.metrics.publisher import Datum, MetricsPublisher, NullPublisher, Unit
from app.ops.archive_lock import ArchiveLock
from app.ops.errors import ArchiveConflictError, KafkaClientError
from app.sources import archive
from app.sources.kafka import KafkaBackend, KafkaColumns
from app.sources.kafka_client import Isolation, KafkaEndpoint
from app.storage import Location, resolve

log = logging.getLogger(__name__)

_DATA_LOSS_CODES = frozenset(
    {ConfluentError._AUTO_OFFSET_RESET, ConfluentError.OFFSET_OUT_OF_RANGE}
)
# librdkafka recovers from other consumer errors by itself (they are reported
# for information); these need the operator. Group errors are not among them:
# the archiver commits nothing, so its group's coordinator does not matter.
_STOP_CODES = frozenset(
    {
        ConfluentError._AUTHENTICATION,
        ConfluentError.SASL_AUTHENTICATION_FAILED,
        ConfluentError.TOPIC_AUTHORIZATION_FAILED,
        ConfluentError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


@dataclass(frozen=True, slots=True)
class ArchiverConfig:
    archive_uri: str
    topic_pattern: str = handoff.DEFAULT_TOPIC_PATTERN
    max_records: int = 50_000
    max_bytes: int = 64 << 20
    max_wait_s: float = 60.0
    refresh_s: float = 60.0
    """How often a following archiver looks for new topics and partitions."""
    poll_s: float = 1.0
    group_id: str = "tablecast-archiver"
    """Only names the client to the brokers: the archiver commits no offsets."""
    isolation: Isolation = Isolation.READ_COMMITTED
    """The job's isolation level (the environment's ``kafka-isolation-level``): the archive
    holds the records the job reads from Kafka, so the tiered source reads the same."""
    metrics_every_s: float = 60.0
    """How often a following archiver publishes its heartbeat and lag."""


@dataclass(frozen=True, slots=True)
class WrittenFile:
    tp: TopicPartition
    start: int
    end: int
    records: int
    path: str


@dataclass(slots=True)
class ArchiveRun:
    files: list[WrittenFile] = field(default_factory=list)
    partitions: int = 0
    caught_up: bool = False

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    def lines(self) -> list[str]:
        lines = [
            f"archived {self.records:,} records in {len(self.files)} files from "
            f"{self.partitions} partitions"
            + ("" if self.caught_up else " (stopped before every partition was at its end)")
        ]
        lines += [
            f"  {f.tp.topic}/{f.tp.partition}/{archive.file_name(f.start, f.end)}: "
            f"{f.records:,} records"
            for f in self.files
        ]
        return lines


def retention_check(tp: TopicPartition, archive_end: int, log_start: int) -> None:
    """Data loss unless the brokers still hold the archive's next offset."""
    if log_start > archive_end:
        raise DataLossError(
            f"data loss: {tp} offsets {archive_end} to {log_start - 1} left the brokers "
            "(retention) before they were archived",
            topic=tp.topic,
            partition=tp.partition,
            first_missing=archive_end,
            last_missing=log_start - 1,
        )


class _Buffer:
    """One partition's records not written yet, as the archive's columns."""

    __slots__ = ("bytes", "columns", "first_at", "start")

    def __init__(self, tp: TopicPartition, start: int, first_at: float) -> None:
        self.start = start
        self.first_at = first_at
        self.columns = KafkaColumns(tp)
        self.bytes = 0

    def add(self, record: Any, offset: int) -> None:
        self.columns.extend((record,), [offset])
        self.bytes += len(record.key() or b"") + len(record.value() or b"") + 32

    @property
    def offsets(self) -> list[int]:
        return self.columns.offsets

    @property
    def end(self) -> int:
        return self.offsets[-1] + 1

    def table(self) -> pa.Table:
        return pa.Table.from_batches([self.columns.batch()])


def consumer_settings(config: ArchiverConfig) -> dict[str, Any]:
    """The archiver's consumer's librdkafka settings (beside its endpoint's)."""
    return {
        "group.id": config.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Never skip offsets silently: out of range is data loss.
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "isolation.level": config.isolation.value,
    }


class Archiver:
    """Copies the pattern's topics into the archive, file by whole file."""

    def __init__(
        self,
        endpoint: KafkaEndpoint,
        config: ArchiverConfig,
        *,
        on_file: Callable[[WrittenFile], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 30.0,
        publisher: MetricsPublisher | None = None,
        lock: ArchiveLock | None = None,
    ) -> None:
        self.config = config
        self._publisher: MetricsPublisher = publisher or NullPublisher()
        self._lock = lock
        self._pattern = re.compile(config.topic_pattern)
        self._location: Location = resolve(config.archive_uri)
        self._on_file = on_file
        self._clock = clock
        self._timeout_s = timeout_s
        self._endpoint = endpoint
        self._consumer = Consumer(endpoint.config(**consumer_settings(config)))
        endpoint.prime(self._consumer)
        # Where each assigned partition's archive ends (None: no file yet).
        self._archived: dict[TopicPartition, int | None] = {}
        self._buffers: dict[TopicPartition, _Buffer] = {}
        self._at_end: set[TopicPartition] = set()
        self._run = ArchiveRun()
        self._started = False

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> Archiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def catch_up(self, timeout_s: float = 3600.0) -> ArchiveRun:
        """Archive until every partition is at its end (or ``timeout_s``); write all."""
        self._start()
        deadline = self._clock() + timeout_s
        while self._archived and not set(self._archived) <= self._at_end:
            if self._clock() > deadline:
                break
            self._poll()
            self._cut(force=False)
        self._run.caught_up = set(self._archived) <= self._at_end
        self._cut(force=True)
        return self._run

    def follow(self, stop: threading.Event) -> ArchiveRun:
        """Archive until ``stop`` is set, then write what is buffered; a heartbeat and the
        lag every ``metrics_every_s`` meanwhile."""
        self._start()
        refreshed = published = self._clock()
        self._publish()
        while not stop.is_set():
            self._poll()
            self._cut(force=False)
            if self._clock() - refreshed >= self.config.refresh_s:
                self._discover()
                refreshed = self._clock()
            if self._clock() - published >= self.config.metrics_every_s:
                self._publish()
                published = self._clock()
        self._cut(force=True)
        self._run.caught_up = set(self._archived) <= self._at_end
        return self._run

    def records_behind(self) -> int:
        """Records Kafka holds (by the high watermarks of the last fetches) that the archive
        does not yet, over every partition; a partition not fetched yet counts none."""
        behind = 0
        for tp, end in self._archived.items():
            low, high = self._consumer.get_watermark_offsets(
                KafkaPartition(tp.topic, tp.partition), cached=True
            )
            if high < 0:
                continue
            behind += max(0, high - (end if end is not None else max(low, 0)))
        return behind

    def _publish(self) -> None:
        now = datetime.now(UTC)
        self._publisher.publish(
            [
                Datum(metric_names.ARCHIVER_HEARTBEAT, 1.0, Unit.COUNT, now),
                Datum(metric_names.ARCHIVER_RECORDS_BEHIND, self.records_behind(), Unit.COUNT, now),
            ]
        )

    def _start(self) -> None:
        # The end-of-partition events come once per arrival at the end: an
        # archiver that ran already cannot tell where the ends are now.
        if self._started:
            raise RuntimeError("an Archiver runs once: make a new one for the next run")
        self._started = True
        self._discover()

    # Step 1: what to read, from where. ------------------------------------
    def _discover(self) -> None:
        metadata = self._consumer.list_topics(timeout=self._timeout_s)
        found = {
            TopicPartition(name, partition)
            for name, topic in metadata.topics.items()
            if not name.startswith("__") and self._pattern.fullmatch(name)
            for partition in topic.partitions
        }
        new = sorted(found - set(self._archived))
        if not new:
            return
        # The archive's listing checks its files: a hole or overlap stops here.
        index = archive.scan(self._location, self.config.topic_pattern)
        # A topic's files are one Kafka topic's records: its topic ID beside them.
        kafka = KafkaBackend(self._endpoint, self.config.topic_pattern, self._timeout_s)
        for topic, identity in kafka.identities(sorted({tp.topic for tp in new})).items():
            archive.claim_identity(self._location, index, topic, identity)
        starts: list[KafkaPartition] = []
        for tp in new:
            files = index.files.get(tp)
            end = files[-1].end if files else None
            if files and self._lock is not None and self._lock.ensure_locked(files[-1].path):
                # Written, then the archiver died before locking it (step 4).
                log.warning("locked %s, which its writer left unlocked", files[-1].path)
            if end is not None:
                low, _high = self._consumer.get_watermark_offsets(
                    KafkaPartition(tp.topic, tp.partition), timeout=self._timeout_s, cached=False
                )
                retention_check(tp, end, low)
            self._archived[tp] = end
            starts.append(
                KafkaPartition(tp.topic, tp.partition, OFFSET_BEGINNING if end is None else end)
            )
            log.info("archiving %s from %s", tp, "its first record" if end is None else end)
        self._consumer.incremental_assign(starts)
        self._run.partitions = len(self._archived)

    def _poll(self) -> None:
        for record in self._consumer.consume(num_messages=1000, timeout=self.config.poll_s):
            error = record.error()
            if error is not None:
                self._on_error(record, error)
                continue
            tp, offset = _position(record)
            self._at_end.discard(tp)
            buffer = self._buffers.get(tp)
            if buffer is None:
                start = self._archived[tp]
                buffer = _Buffer(tp, offset if start is None else start, self._clock())
                self._buffers[tp] = buffer
            last = buffer.offsets[-1] if buffer.offsets else buffer.start - 1
            if offset <= last:
                raise KafkaClientError(f"{tp}: the broker returned offset {offset} after {last}")
            buffer.add(record, offset)
            # Step 2: a full file is written at once, which bounds memory.
            full = len(buffer.offsets) >= self.config.max_records
            if full or buffer.bytes >= self.config.max_bytes:
                self._write(tp)

    def _on_error(self, record: Any, error: Any) -> None:
        code = error.code()
        topic, partition = record.topic(), record.partition()
        tp = (
            TopicPartition(topic, partition)
            if topic is not None and partition is not None
            else None
        )
        if code == ConfluentError._PARTITION_EOF and tp is not None:
            self._at_end.add(tp)
        elif code in _DATA_LOSS_CODES:
            offset = self._archived.get(tp) if tp else None
            facts: dict[str, str | int] = {"kafka_error": error.str()}
            if tp is not None:
                facts |= {"topic": tp.topic, "partition": tp.partition}
            if offset is not None:
                facts["offset"] = offset
            raise DataLossError(
                f"data loss: {tp} offset {offset if tp else '?'} is out of the "
                f"brokers' range ({error.str()}): retention dropped it, or the topic was recreated",
                **facts,
            )
        elif error.fatal() or code in _STOP_CODES:
            raise KafkaClientError(f"consuming {tp or 'from the brokers'}: {error.str()}")
        else:
            log.warning(
                "consuming %s: %s (the client retries)", tp or "from the brokers", error.str()
            )

    # Steps 2 to 5: cut, check, write, move on. -------------------------------
    def _cut(self, *, force: bool) -> None:
        now = self._clock()
        for tp in sorted(self._buffers):
            buffer = self._buffers[tp]
            if force or now - buffer.first_at >= self.config.max_wait_s:
                self._write(tp)

    def _write(self, tp: TopicPartition) -> None:
        buffer = self._buffers.pop(tp)
        start, end = buffer.start, buffer.end
        # Step 3: nobody else extended this partition's archive meanwhile.
        files = archive.scan(self._location, re.escape(tp.topic)).files.get(tp)
        found = files[-1].end if files else None
        if found != self._archived[tp]:
            ended = -1 if found is None else found
            raise ArchiveConflictError(tp.topic, tp.partition, start, ended)
        # Step 4: the whole file, then Step 5: the next one starts at its end.
        records = len(buffer.offsets)
        path = archive.write_file(self._location, tp, start, end, buffer.table())
        if self._lock is not None:
            self._lock.lock(path)
        self._archived[tp] = end
        written = WrittenFile(tp, start, end, records, path)
        self._run.files.append(written)
        log.info("wrote %s (%d records)", path, written.records)
        if self._on_file is not None:
            self._on_file(written)


def _position(record: Any) -> tuple[TopicPartition, int]:
    topic, partition, offset = record.topic(), record.partition(), record.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaClientError("the consumer returned a record without topic, partition or offset")
    return TopicPartition(topic, partition), offset
