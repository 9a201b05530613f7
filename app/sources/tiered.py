"""Kafka and the raw archive as one source: catch-up past Kafka's retention.

A job stopped for longer than Kafka keeps records (72 h on MSK) finds its
next offsets gone from the brokers; the archiver copied them to the raw
archive before retention dropped them. :class:`TieredBackend` reads every
partition as one ordered stream from both: the offsets Kafka no longer holds
from the archive, the rest from Kafka.

Per partition (:class:`TieredBounds`):

- earliest: the archive's earliest offset when its files reach Kafka's
  earliest offset without a hole (the run of continuous files that holds
  Kafka's earliest offset or ends at it), else Kafka's earliest; latest:
  Kafka's latest. A partition that only one of them has gets that one's
  bounds (for the archive, its last run of continuous files).
- So the streaming reader (:mod:`app.sources.stream`) finds data loss
  exactly when neither holds an offset the job still needs, and its error
  names both and the offsets that neither holds. A hole between the
  archive's files is data loss only where Kafka lacks those offsets too.
- A range ``[start, end)`` is read from the archive up to Kafka's earliest
  offset, the rest from Kafka (:class:`TieredRange`). Just before reading,
  the task asks Kafka's earliest offset again: when retention moved on since
  the micro-batch was planned, the archive serves what the brokers dropped
  meanwhile, as far as its files go, instead of the run failing.

A topic's identity is Kafka's topic ID where Kafka has the topic, else the
archive's (``_topic-id``, :mod:`app.sources.archive`); the checkpoint keeps
it and refuses a change as data loss (:mod:`app.sources.stream`). Where the
archive names another identity than Kafka's for a topic, its files are
another topic's records (the topic was deleted and created again): they
serve none of its offsets.

Each record carries the tier that served it (``served_by``,
:mod:`app.sources.records`); the job counts them per batch (the
``RecordsServed`` metric, :mod:`app.metrics.listener`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from app.contract.offsets import TopicPartition
from app.errors import DataLossError
from app.sources.archive import ArchiveBackend, ArchiveFile, ArchiveIndex, ArchiveRange
from app.sources.backend import Bounds
from app.sources.kafka import KafkaBackend, KafkaRange

__all__ = ["TieredBackend", "TieredBounds", "TieredRange", "runs"]

log = logging.getLogger(__name__)


def runs(files: Sequence[ArchiveFile]) -> tuple[Bounds, ...]:
    """The offsets that runs of continuous files hold (``files`` sorted by start)."""
    found: list[Bounds] = []
    for f in files:
        if found and found[-1].latest == f.start:
            found[-1] = Bounds(found[-1].earliest, f.end)
        else:
            found.append(Bounds(f.start, f.end))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class TieredBounds(Bounds):
    """A partition's bounds over both tiers, and what each of them holds (for errors)."""

    kafka: Bounds | None  # None: Kafka does not have the partition
    archive: tuple[Bounds, ...]  # the archive's runs of continuous files, in order
    kafka_name: str
    archive_name: str

    @classmethod
    def of(
        cls,
        kafka: Bounds | None,
        archive: tuple[Bounds, ...],
        kafka_name: str,
        archive_name: str,
        identity: str = "",
    ) -> TieredBounds:
        """``identity``: the archive's, for a partition Kafka does not have."""
        if kafka is None:
            last = archive[-1]  # a partition is listed by at least one tier
            return cls(
                last.earliest,
                last.latest,
                None,
                archive,
                kafka_name,
                archive_name,
                identity=identity,
            )
        earliest = kafka.earliest
        for run in archive:
            if run.earliest <= kafka.earliest <= run.latest:
                earliest = run.earliest
        return cls(
            earliest,
            kafka.latest,
            kafka,
            archive,
            kafka_name,
            archive_name,
            stable=kafka.stable,
            identity=kafka.identity or identity,
        )

    def data_loss(
        self, where: str, tp: TopicPartition, first: int, *, found_late: bool = False
    ) -> DataLossError:
        held = f"{self.kafka_name} {self._kafka_holds()} and {self.archive_name} " + (
            self._archive_holds()
        )
        missing = None
        if first <= self.latest:
            lo, hi = self.missing_from(first)
            missing = (lo, hi - 1)
        return self._loss_error(
            where, tp, first, held=held, missing=missing, gone="in neither", found_late=found_late
        )

    def missing_from(self, first: int) -> tuple[int, int]:
        """The first offsets at or after ``first`` that neither tier holds: ``[lo, hi)``."""
        held = sorted(
            (b.earliest, b.latest)
            for b in (*self.archive, self.kafka)
            if b is not None and b.latest > b.earliest
        )
        lo = first
        for begin, finish in held:
            if begin <= lo < finish:
                lo = finish
        after = [begin for begin, _ in held if begin > lo]
        return lo, min(after, default=max(lo + 1, self.earliest))

    def _kafka_holds(self) -> str:
        if self.kafka is None:
            return "does not have the partition"
        if self.kafka.latest > self.kafka.earliest:
            return f"holds offsets {self.kafka.earliest} to {self.kafka.latest - 1}"
        return f"holds none of it (its next offset is {self.kafka.latest})"

    def _archive_holds(self) -> str:
        if not self.archive:
            return "holds none of it"
        return "holds offsets " + " and ".join(
            f"{r.earliest} to {r.latest - 1}" for r in self.archive
        )


@dataclass
class _Listing:
    """What the last :meth:`TieredBackend.bounds` saw, for the readers of the same plan."""

    kafka: dict[TopicPartition, Bounds] | None = None
    index: ArchiveIndex | None = None


@dataclass(frozen=True)
class TieredBackend:
    """Kafka first, the archive for the offsets Kafka no longer holds."""

    kafka: KafkaBackend
    archive: ArchiveBackend
    _listing: _Listing = field(default_factory=_Listing, init=False, compare=False, repr=False)

    @property
    def description(self) -> str:
        return f"{self.kafka.description} and {self.archive.description}"

    def matches(self, topic: str) -> bool:
        return self.kafka.matches(topic)

    def offsets_at(self, timestamp_ms: int) -> dict[TopicPartition, int]:
        """Kafka's answer: the archive's records are older than any Kafka still holds."""
        return self.kafka.offsets_at(timestamp_ms)

    def bounds(self, expected: Collection[TopicPartition] = ()) -> dict[TopicPartition, Bounds]:
        """Both tiers' listings; Kafka asks again for an expected partition it lacks."""
        kafka = self.kafka.bounds(expected)
        index = self.archive.index(holes=True)
        kafka_ids = {tp.topic: b.identity for tp, b in kafka.items() if b.identity}
        for topic, identity in sorted(index.identities.items()):
            if kafka_ids.get(topic, identity) != identity:  # another topic's records
                log.warning(
                    "%s holds topic %s of identity %s, %s has %s: the archive's files "
                    "serve none of its offsets",
                    self.archive.description,
                    topic,
                    identity,
                    self.kafka.description,
                    kafka_ids[topic],
                )
                index.files = {tp: f for tp, f in index.files.items() if tp.topic != topic}
        self._listing.kafka, self._listing.index = kafka, index
        return {
            tp: TieredBounds.of(
                kafka.get(tp),
                runs(index.files.get(tp, [])),
                self.kafka.description,
                self.archive.description,
                index.identities.get(tp.topic, ""),
            )
            for tp in sorted(set(kafka) | set(index.files))
        }

    def reader(self, tp: TopicPartition, start: int, end: int) -> TieredRange:
        """The archive up to Kafka's earliest offset (as last listed), then Kafka."""
        if self._listing.kafka is None or self._listing.index is None:
            self.bounds()  # a batch planned without a listing first (a restart redoes one)
        kafka, index = self._listing.kafka, self._listing.index
        assert kafka is not None and index is not None
        in_kafka = kafka.get(tp)
        split = end if in_kafka is None else min(end, max(start, in_kafka.earliest))
        # As far as the archive could serve from start, should retention move on.
        run = next(
            (r for r in runs(index.files.get(tp, [])) if r.earliest <= start < r.latest), None
        )
        reach = max(split, start if run is None else min(end, run.latest))
        archive = None
        if reach > start:  # the archive's files must hold [start, split): data loss if not
            files = tuple(index.covering(tp, start, reach))
            archive = ArchiveRange(self.archive.uri, files, start, reach)
        kafka_range = self.kafka.reader(tp, split, end) if end > split else None
        return TieredRange(tp, start, end, split, archive, kafka_range)


@dataclass(frozen=True)
class TieredRange:
    """A task's read of ``[start, end)``: the archive before ``split``, Kafka from it.

    ``archive`` holds the files of every offset the archive could serve from
    ``start`` (up to its ``end``), so that the task can move the split up to
    Kafka's earliest offset when it reads, should retention have passed it.
    """

    tp: TopicPartition
    start: int
    end: int
    split: int
    archive: ArchiveRange | None
    kafka: KafkaRange | None

    def read(self) -> Iterator[pa.RecordBatch]:
        cut = self.split
        if self.kafka is not None and self.archive is not None and self.archive.end > cut:
            earliest = self.kafka.earliest()  # None: the Kafka read reports what is wrong
            if earliest is not None:
                cut = min(self.archive.end, max(cut, earliest))
        if self.archive is not None and cut > self.start:
            files = tuple(f for f in self.archive.files if f.start < cut)
            yield from replace(self.archive, files=files, end=cut).read()
        if self.kafka is not None and self.end > cut:
            yield from replace(self.kafka, start=cut).read()
