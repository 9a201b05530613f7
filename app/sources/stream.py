"""Kafka's streaming semantics, once, over any backend that holds Kafka's records.

One Python Data Source (``spark.readStream.format("tablecast")``) reads
every source of the job: the raw archive, Kafka, or both, Kafka first and
the archive for the offsets Kafka no longer holds (a :class:`Backend` each).
Whatever the backend, its offsets are ``{"topic:partition": next_offset}``
in the checkpoint, with each topic's identity beside them
(:mod:`app.contract.offsets`), and it behaves as Spark's Kafka source does
with ``failOnDataLoss=true``:

- a fresh checkpoint starts at ``startingOffsets`` (earliest by default,
  latest, or a time: :mod:`app.sources.starting`);
- topics matching the pattern (the whole name) are listed once per trigger
  (``latestOffset``, ``reportLatestOffset`` and the trigger's ranges share
  the listing), so topics and partitions that appear while it runs are
  read, from their earliest offset: a new partition first enters the
  offsets at its earliest offset, with nothing read, so that every range a
  micro-batch reads starts at an offset the checkpoint holds, and a redone
  batch reads the same;
- a partition whose earliest available offset is past the next offset to
  read, or that is gone with offsets unread, and a topic whose identity
  changed (deleted and created again) fail the query with
  :class:`DataLossError`; a topic that no longer matches, or is gone after
  it was read to the end the previous listing showed, leaves the offsets
  (logged);
- a micro-batch ends at each partition's readable end: the last stable
  offset under ``read_committed``, else the latest;
- ``maxOffsetsPerTrigger`` bounds a micro-batch, shared between partitions
  in proportion to their backlog; ``minOffsetsPerTrigger`` holds a trigger
  back until that many offsets are there, at most ``maxTriggerDelay``;
- ``Trigger.AvailableNow`` reads up to the offsets available when it starts;
- a micro-batch has one Spark partition per topic-partition, read in
  offset order (offsets the backend skips, such as transaction markers or
  compacted records, are simply absent), with the Kafka source's columns and
  the tier that served each record (``served_by``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from app.contract import offsets as offsets_mod
from app.contract.offsets import Identities, Offsets, TopicPartition
from app.errors import ConfigurationError, DataLossError
from app.sources import ranges
from app.sources.backend import Backend, Bounds, RangeReader
from app.sources.backend_options import from_options
from app.sources.records import SPARK_DDL
from app.sources.starting import StartingPosition, StartKind

FORMAT = "tablecast"
DEFAULT_MAX_TRIGGER_DELAY_S: Final = 900.0  # Spark's maxTriggerDelay: 15 minutes
_EARLIEST: Final = StartingPosition()

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One topic-partition's offsets ``[start, end)`` of a micro-batch."""

    tp: TopicPartition
    start: int
    end: int
    reader: RangeReader


class OffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader over a :class:`Backend` (runs in Spark's driver-side Python).

    Spark calls :meth:`latestOffset`, then :meth:`reportLatestOffset` and
    :meth:`partitions` at each trigger: they share one listing of the backend
    (:meth:`_listing`), made by the first of them.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_offsets: int,
        starting: Offsets,
        starting_position: StartingPosition = _EARLIEST,
        min_offsets: int = 0,
        max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S,
        clock: Callable[[], float] = time.monotonic,
        deliver: str = ranges.RECORDS,
    ) -> None:
        self.backend = backend
        self.deliver = deliver
        self.max_offsets = max_offsets
        self.starting = starting
        self.starting_position = starting_position
        self.min_offsets = min_offsets
        self.max_trigger_delay_s = max_trigger_delay_s
        self.clock = clock
        self.target: Offsets | None = None  # the end of an available-now run
        self.listings = 0  # backend listings made (the bench and tests read it)
        self._cached: dict[TopicPartition, Bounds] | None = None
        self._seen: dict[TopicPartition, Bounds] = {}  # the previous trigger's listing
        self._last_batch: float | None = None  # when a micro-batch was last planned

    def _listing(self, *, fresh: bool = False) -> dict[TopicPartition, Bounds]:
        """The backend's listing of this trigger (a new one when ``fresh``)."""
        if fresh or self._cached is None:
            if self._cached is not None:
                self._seen = self._cached
            self._cached = self.backend.bounds()
            self.listings += 1
        return self._cached

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (PySpark's names)
        bounds = self._listing(fresh=True)
        kind = self.starting_position.kind
        if kind is StartKind.LATEST:
            start = {tp: max(b.earliest, b.readable) for tp, b in bounds.items()}
        elif kind is StartKind.TIMESTAMP:
            at = self.backend.offsets_at(self.starting_position.timestamp_ms)
            start = {
                tp: max(b.earliest, min(at.get(tp, b.earliest), b.readable))
                for tp, b in bounds.items()
            }
        else:
            start = {tp: b.earliest for tp, b in bounds.items()}
        if kind is not StartKind.EARLIEST and not self.starting:
            log.info(
                "a fresh checkpoint starts at %s: %s",
                self.starting_position,
                offsets_mod.describe(start),
            )
        start.update(self.starting)
        return offsets_mod.to_source_json(start, _identities(bounds))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.max_offsets) if self.max_offsets > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = {tp: b.readable for tp, b in self._listing(fresh=True).items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        bounds = self._listing(fresh=True)
        begin = offsets_mod.from_json(start)
        known = offsets_mod.identities_from_json(start)
        self._check_identities(bounds, known)
        begin = self._without_departed(bounds, begin)
        ranges = self._ranges(bounds, begin)
        if self._delayed(ranges):
            return start
        end = dict(begin)
        for tp, (_, last) in share(ranges, limit).items():
            end[tp] = last
        for tp, b in bounds.items():  # new partitions enter at their earliest offset
            end.setdefault(tp, b.earliest)
        return offsets_mod.to_source_json(end, known | _identities(bounds))

    def _check_identities(self, bounds: Mapping[TopicPartition, Bounds], known: Identities) -> None:
        """Data loss if a topic the offsets were read from is another topic now (re-created)."""
        where = self.backend.description
        for topic, identity in sorted(_identities(bounds).items()):
            was = known.get(topic)
            if was and was != identity:
                raise DataLossError(
                    f"data loss in {where}: topic {topic} was deleted and created again (its "
                    f"identity was {was}, is {identity}): the checkpoint's offsets belong to the "
                    "deleted topic; restore it, or start a new run with a new --output and "
                    "--checkpoint",
                    source=where,
                    topic=topic,
                    identity=identity,
                    previous_identity=was,
                )

    def _without_departed(self, bounds: Mapping[TopicPartition, Bounds], begin: Offsets) -> Offsets:
        """``begin`` without the topics that left: no longer matched, or deleted once read.

        A topic deleted after it was read to the end the previous listing
        showed has nothing left to read; any other missing partition is data
        loss (:meth:`_ranges`).
        """
        listed = {tp.topic for tp in bounds}
        gone = {tp.topic for tp in begin} - listed
        kept = dict(begin)
        for topic in sorted(gone):
            parts = {tp: first for tp, first in begin.items() if tp.topic == topic}
            if not self.backend.matches(topic):
                log.warning(
                    "topic %s no longer matches the source's topics: it is no longer "
                    "read (its offsets were %s)",
                    topic,
                    offsets_mod.describe(parts),
                )
            elif all(
                tp in self._seen and first >= self._seen[tp].readable for tp, first in parts.items()
            ):
                log.warning(
                    "topic %s is gone from %s after it was read to its end (%s): it is "
                    "no longer read",
                    topic,
                    self.backend.description,
                    offsets_mod.describe(parts),
                )
            else:
                continue
            for tp in parts:
                del kept[tp]
        return kept

    def _delayed(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> bool:
        """Whether to wait for ``min_offsets`` (Spark's minOffsetsPerTrigger, maxTriggerDelay)."""
        now = self.clock()
        if self.min_offsets > 0 and self.target is None and self._last_batch is not None:
            waited = now - self._last_batch
            if waited < self.max_trigger_delay_s:
                backlog = sum(last - first for first, last in ranges.values())
                if backlog < self.min_offsets:
                    return True
        if ranges or self._last_batch is None:
            self._last_batch = now
        return False

    def _ranges(
        self, bounds: Mapping[TopicPartition, Bounds], begin: Offsets
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Each partition's unread range, checked for data loss."""
        where = self.backend.description
        for tp in begin:
            if tp not in bounds:
                raise DataLossError(
                    f"data loss in {where}: {tp} is gone but offsets from {begin[tp]} were "
                    "not read yet",
                    source=where,
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=begin[tp],
                )
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for tp, first in begin.items():
            b = bounds[tp]
            if first < b.earliest or first > b.latest:
                raise b.data_loss(where, tp, first)
            readable = b.readable
            last = readable if self.target is None else min(readable, self.target.get(tp, first))
            if last > first:
                ranges[tp] = (first, last)
        return ranges

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        bounds = self._listing()
        return offsets_mod.to_source_json(
            {tp: b.readable for tp, b in bounds.items()}, _identities(bounds)
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = offsets_mod.from_json(start)
        finish = offsets_mod.from_json(end)
        parts: list[InputPartition] = []
        for tp in read_in_order(begin, finish):
            if self._cached is None:  # a batch redone after a restart: list once
                self._listing()
            reader = self.backend.reader(tp, begin[tp], finish[tp])
            parts.append(RangePartition(tp, begin[tp], finish[tp], reader))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        if self.deliver == ranges.RANGES:  # the task that processes the range reads it
            yield ranges.PlannedRange(
                partition.tp, partition.start, partition.end, partition.reader
            ).to_batch()
        else:
            yield from partition.reader.read()

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: offsets live in Spark's checkpoint, never in the backend."""


def read_in_order(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[TopicPartition]:
    """The partitions a micro-batch reads, in the order of its Spark partitions.

    Those with offsets from ``start`` to ``end``; a partition new in the batch
    (not in ``start``) reads nothing yet. The engine's task knows its
    partition by this order before the first record arrives.
    """
    return [tp for tp in sorted(end) if end[tp] > start.get(tp, end[tp])]


def _identities(bounds: Mapping[TopicPartition, Bounds]) -> Identities:
    return {tp.topic: b.identity for tp, b in bounds.items() if b.identity}


def share(
    backlog: dict[TopicPartition, tuple[int, int]], limit: ReadLimit
) -> dict[TopicPartition, tuple[int, int]]:
    """Share ``maxOffsetsPerTrigger`` between partitions by backlog, as Kafka's source does."""
    if not isinstance(limit, ReadMaxRows) or not backlog:
        return backlog
    total = sum(last - first for first, last in backlog.values())
    if total <= limit.max_rows:
        return backlog
    limited: dict[TopicPartition, tuple[int, int]] = {}
    for tp, (first, last) in backlog.items():
        portion = max(1, math.floor(limit.max_rows * (last - first) / total))
        limited[tp] = (first, min(last, first + portion))
    return limited


class TablecastSource(DataSource):
    """``spark.readStream.format("tablecast")``; options name the backend.

    Options: ``backend`` (``archive``, ``kafka`` or ``tiered``) and the backend's own
    (see :func:`app.sources.backend_options.from_options`), ``topicPattern``,
    ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelayMs``,
    ``startingOffsets`` (``{"topic:partition": n}``, a repair's), ``startingPosition``
    (:class:`~app.sources.starting.StartingPosition`, for a fresh checkpoint),
    ``deliver`` (``records``, the default, or ``ranges``: one row per range,
    read where it is processed, :mod:`app.sources.ranges`).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ranges.SPARK_DDL if self._deliver() == ranges.RANGES else SPARK_DDL

    def _deliver(self) -> str:
        deliver = self.options.get(ranges.DELIVER_OPTION, ranges.RECORDS)
        if deliver not in (ranges.RECORDS, ranges.RANGES):
            raise ConfigurationError(
                f"the tablecast source's option {ranges.DELIVER_OPTION} is {deliver!r}: "
                f"it must be {ranges.RECORDS} or {ranges.RANGES}"
            )
        return deliver

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        options = self.options
        return OffsetStreamReader(
            from_options(options),
            max_offsets=int(options.get("maxOffsetsPerTrigger", "0")),
            starting=offsets_mod.from_json(options.get("startingOffsets", "{}")),
            starting_position=StartingPosition.parse(options.get("startingPosition", "earliest")),
            min_offsets=int(options.get("minOffsetsPerTrigger", "0")),
            max_trigger_delay_s=int(options.get("maxTriggerDelayMs", "0")) / 1000
            or DEFAULT_MAX_TRIGGER_DELAY_S,
            deliver=self._deliver(),
        )
