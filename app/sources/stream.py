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
  the listing); a partition the checkpoint reads that a listing lacks is
  asked for again before it counts as gone (:meth:`Backend.bounds`: brokers
  answer from an empty cache around a restart);
- topics and partitions that appear while it runs are read in the trigger
  that finds them, from offset 0 (Spark's new partitions): one whose
  earliest offset is already past 0 lost records before the job found it,
  which is data loss unless the archive holds them (the tiered backend);
- a partition whose earliest available offset is past the next offset to
  read, or that is gone with offsets unread, and a topic whose identity
  changed (deleted and created again) fail the query with
  :class:`DataLossError`; so does a topic gone from the backend, naming
  what it knows was not read, unless it was retired on purpose
  (:mod:`app.sources.retired`): a retired topic is read up to its recorded
  end, then leaves the offsets (logged), as does a topic that no longer
  matches;
- a micro-batch ends at each partition's readable end: the last stable
  offset under ``read_committed``, else the latest; the newest offsets it
  reports with each trigger (for the job's lag) carry the high watermarks
  beside the readable ends, and since when a last stable offset has stayed
  behind its high watermark (:class:`~app.contract.offsets.SourceReport`);
- ``maxOffsetsPerTrigger`` bounds a micro-batch, shared between partitions
  in proportion to their backlog; ``minOffsetsPerTrigger`` holds a trigger
  back until that many offsets are there, at most ``maxTriggerDelay``;
- ``Trigger.AvailableNow`` reads up to the offsets available when it starts;
- a check before each trigger's new end goes back to Spark
  (``before_planning``: the job's fence, :mod:`app.spark.planning`), which
  then records it in the checkpoint's offset log: a raise stops the query
  with nothing recorded;
- a micro-batch has one Spark partition per topic-partition, read in
  offset order (offsets the backend skips, such as transaction markers or
  compacted records, are simply absent), with the Kafka source's columns and
  the tier that served each record (``served_by``); with ``groupOffsets``
  (the job's), one per group of topic-partitions (:func:`task_groups`): the
  small ones share a Spark partition, each still read whole and in order.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
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
from app.contract.offsets import Identities, Offsets, SourceReport, TopicPartition
from app.errors import ConfigurationError, DataLossError
from app.sources import ranges
from app.sources.archive import ArchiveBackend
from app.sources.backend import Backend, Bounds, RangeReader
from app.sources.backend_options import from_options
from app.sources.records import SPARK_DDL
from app.sources.retired import RETIRED_OPTION, RetiredTopic, read_retired
from app.sources.starting import StartingPosition, StartKind

FORMAT = "tablecast"
DEFAULT_MAX_TRIGGER_DELAY_S: Final = 900.0  # Spark's maxTriggerDelay: 15 minutes
_EARLIEST: Final = StartingPosition()
GROUP_OFFSETS_OPTION = "groupOffsets"
# The job's bound of a task's topic-partitions (:func:`task_groups`): offsets of their
# ranges together (0: a task each). The job keeps it below the engine's offsets per
# output file, so that each range of a group is one block (app.engine.segments).
GROUP_OFFSETS: Final = int(os.environ.get("TABLECAST_GROUP_OFFSETS", "50000"))

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One topic-partition's offsets ``[start, end)`` of a micro-batch."""

    tp: TopicPartition
    start: int
    end: int
    reader: RangeReader


@dataclass(frozen=True)
class GroupPartition(InputPartition):
    """The ranges of a group of topic-partitions (:func:`task_groups`), read one after another."""

    ranges: tuple[RangePartition, ...]


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
        wall_clock: Callable[[], float] = time.time,
        deliver: str = ranges.RECORDS,
        retired_uri: str = "",
        group_offsets: int = 0,
        before_planning: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        # Called before a trigger's end goes back to Spark, which records it (raise: stop).
        self.before_planning = before_planning
        self.group_offsets = group_offsets  # :func:`task_groups`' bound (0: no groups)
        self.deliver = deliver
        self.max_offsets = max_offsets
        self.starting = starting
        self.starting_position = starting_position
        self.min_offsets = min_offsets
        self.max_trigger_delay_s = max_trigger_delay_s
        self.clock = clock
        self.wall_clock = wall_clock
        self.retired_uri = retired_uri  # where retired topics are recorded ("": nowhere)
        self.target: Offsets | None = None  # the end of an available-now run
        self.listings = 0  # backend listings made (the bench and tests read it)
        self._cached: dict[TopicPartition, Bounds] | None = None
        self._retired: dict[str, RetiredTopic] = {}  # as read with the cached listing
        # Each partition as last listed, kept after it leaves a listing: what a
        # deleted topic held when the job last saw it.
        self._last_listed: dict[TopicPartition, Bounds] = {}
        # Per partition whose last stable offset has records beyond it: that
        # offset, and since when (ms since the epoch) it has stayed there.
        self._stable_since: dict[TopicPartition, tuple[int, int]] = {}
        self._ignored: set[str] = set()  # retired topics found again, logged once
        self._last_batch: float | None = None  # when a micro-batch was last planned

    def _listing(
        self, *, fresh: bool = False, begin: Offsets | None = None
    ) -> dict[TopicPartition, Bounds]:
        """The partitions this trigger reads, from a backend listing (a new one when ``fresh``).

        ``begin``: the checkpoint's offsets, whose partitions the backend asks
        for again before it leaves one out. A retired topic is read only while
        ``begin`` holds it short of its recorded end, and only up to it
        (``begin`` None: every retired topic the listing has, up to its end).
        """
        if fresh or self._cached is None:
            self._retired = read_retired(self.retired_uri) if self.retired_uri else {}
            listed = self.backend.bounds(begin or ())
            self.listings += 1
            self._last_listed.update(listed)
            self._track_stable(listed)
            self._cached = self._without_retired(listed, begin)
        return self._cached

    def _without_retired(
        self, listed: Mapping[TopicPartition, Bounds], begin: Offsets | None
    ) -> dict[TopicPartition, Bounds]:
        """``listed`` with the retired topics the job no longer reads left out, the rest capped."""
        reading = None if begin is None else {tp.topic for tp in begin}
        found: dict[TopicPartition, Bounds] = {}
        for tp, b in listed.items():
            record = self._retired.get(tp.topic)
            if record is None:
                found[tp] = b
            elif reading is None or tp.topic in reading:
                end = record.ends.get(tp.partition, 0)
                found[tp] = replace(b, stable=min(b.readable, end))
            elif tp.topic not in self._ignored:
                self._ignored.add(tp.topic)
                log.warning(
                    "topic %s was retired at %s (%s): %s has it again, but this output "
                    "never reads it again (its partitions' state is the retired topic's)",
                    tp.topic,
                    offsets_mod.describe(record.end_offsets()),
                    record.retired_at,
                    self.backend.description,
                )
        return found

    def _track_stable(self, listed: Mapping[TopicPartition, Bounds]) -> None:
        """Since when each partition's last stable offset stays put with records beyond it."""
        now_ms = round(self.wall_clock() * 1000)
        before, self._stable_since = self._stable_since, {}
        for tp, b in listed.items():
            if b.stable is None or b.stable >= b.latest:
                continue
            stable, since = before.get(tp, (b.stable, now_ms))
            self._stable_since[tp] = (b.stable, since if stable == b.stable else now_ms)

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (PySpark's names)
        bounds = self._listing(fresh=True, begin=dict(self.starting))
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
        begin = offsets_mod.from_json(start)
        known = offsets_mod.identities_from_json(start)
        bounds = self._listing(fresh=True, begin=begin)
        self._check_identities(bounds, known)
        begin = self._without_departed(bounds, begin)
        # A retired topic that just left is read no more: it is no new partition either.
        bounds = self._cached = {
            tp: b for tp, b in bounds.items() if tp in begin or tp.topic not in self._retired
        }
        ranges = self._ranges(bounds, begin)
        if self._delayed(ranges):
            return start
        end = dict(begin)
        for tp, (_, last) in share(ranges, limit).items():
            end[tp] = last
        for tp in bounds:  # new partitions enter from offset 0, read or not
            end.setdefault(tp, 0)
        if self.before_planning is not None:
            self.before_planning()
        return offsets_mod.to_source_json(end, known | _identities(bounds))

    def _check_identities(self, bounds: Mapping[TopicPartition, Bounds], known: Identities) -> None:
        """Data loss if a topic the offsets were read from is another topic now (re-created)."""
        where = self.backend.description
        for topic, identity in sorted(_identities(bounds).items()):
            was = known.get(topic)
            if was and was != identity and isinstance(self.backend, ArchiveBackend):
                raise DataLossError(
                    f"data loss in {where}: its topic {topic} is not the one the checkpoint's "
                    f"offsets were read from (its identity was {was}, is {identity}): the "
                    "archive was swapped, or the topic deleted and archived again; give "
                    "--archive the archive the job read, or start a new run with a new "
                    "--output and --checkpoint",
                    source=where,
                    topic=topic,
                    identity=identity,
                    previous_identity=was,
                )
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
        """``begin`` without the topics that left: no longer matched, or retired and read.

        A retired topic leaves once read to its recorded end, whether the
        backend still has it or not. Any other topic the backend no longer
        has (its absence confirmed, :meth:`Backend.bounds`) is data loss: the
        job cannot tell what was produced to it after it last listed it.
        """
        listed = {tp.topic for tp in bounds}
        kept = dict(begin)
        for topic in sorted({tp.topic for tp in begin}):
            parts = {tp: first for tp, first in begin.items() if tp.topic == topic}
            record = self._retired.get(topic)
            if record is not None:
                unread = record.unread(parts)
                if unread and topic not in listed:
                    raise self._retired_unread(record, unread)
                if unread:
                    continue  # read on, up to its recorded end
                log.warning(
                    "topic %s was retired (%s) and is read to its end (%s): it is no longer read",
                    topic,
                    record.retired_at,
                    offsets_mod.describe(parts),
                )
            elif topic in listed:
                continue
            elif not self.backend.matches(topic):
                log.warning(
                    "topic %s no longer matches the source's topics: it is no longer "
                    "read (its offsets were %s)",
                    topic,
                    offsets_mod.describe(parts),
                )
            else:
                raise self._deleted(topic, parts)
            for tp in parts:
                del kept[tp]
        return kept

    def _retired_unread(self, record: RetiredTopic, unread: Offsets) -> DataLossError:
        """A retired topic gone before the job read it to its recorded end."""
        where = self.backend.description
        ends = record.end_offsets()
        missing = "; ".join(
            f"partition {tp.partition} offsets {first} to {ends[tp] - 1}"
            for tp, first in sorted(unread.items())
        )
        tp, first = min(unread.items())
        return DataLossError(
            f"data loss in {where}: topic {record.topic} was retired at "
            f"{offsets_mod.describe(ends)} but is gone before the job read it to that end: "
            f"{missing} were not read",
            source=where,
            topic=record.topic,
            partition=tp.partition,
            first_missing=first,
            last_missing=ends[tp] - 1,
        )

    def _deleted(self, topic: str, parts: Offsets) -> DataLossError:
        """A topic the backend no longer has (not retired): what the job knows it missed."""
        where = self.backend.description
        retire = (
            f"if it was retired on purpose, `tablecast-ops retire-topic --topic {topic}` "
            "records that, and the next start carries on without it"
        )
        seen = {tp: self._last_listed[tp] for tp in parts if tp in self._last_listed}
        unread = {tp: (parts[tp], b.latest) for tp, b in seen.items() if b.latest > parts[tp]}
        if unread:
            tp, (first, end) = min(unread.items())
            missing = "; ".join(
                f"partition {p.partition} offsets {a} to {b - 1}"
                for p, (a, b) in sorted(unread.items())
            )
            return DataLossError(
                f"data loss in {where}: topic {topic} is gone with records not read yet: {missing}",
                source=where,
                topic=topic,
                partition=tp.partition,
                first_missing=first,
                last_missing=end - 1,
            )
        tp = min(parts)
        read = offsets_mod.describe(parts)
        if seen:
            what = (
                f"the job read it to {read}, its end when last listed; records produced to it "
                "after that are lost with it"
            )
        else:
            what = (
                f"the job read it up to {read} before it stopped; whether records were "
                "produced to it after them cannot be told"
            )
        return DataLossError(
            f"data loss in {where}: topic {topic} is gone: {what}; {retire}",
            source=where,
            topic=topic,
            partition=tp.partition,
            offset=parts[tp],
        )

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
        """Each partition's unread range, checked for data loss; new partitions from offset 0.

        A partition found after the start (in no offsets yet) is read from
        offset 0: one whose earliest offset is past 0 lost its first records
        before the job found it (Spark's "Added partition ... starts from N
        instead of 0"), unless the archive serves them (the tiered backend's
        bounds start where the archive's do).
        """
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
        for tp, b in bounds.items():
            found_late = tp not in begin
            first = begin.get(tp, 0)
            if first < b.earliest or first > b.latest:
                raise b.data_loss(where, tp, first, found_late=found_late)
            readable = b.readable
            last = readable if self.target is None else min(readable, self.target.get(tp, first))
            if last > first:
                ranges[tp] = (first, last)
        return ranges

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        bounds = self._listing()
        report = SourceReport(
            readable={tp: b.readable for tp, b in bounds.items()},
            high_watermarks={tp: b.latest for tp, b in bounds.items()},
            stable_since={
                tp: since for tp, (_, since) in self._stable_since.items() if tp in bounds
            },
        )
        return report.to_json(_identities(bounds))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = offsets_mod.from_json(start)
        finish = offsets_mod.from_json(end)
        parts: list[InputPartition] = []
        for group in task_groups(begin, finish, self.group_offsets):
            members: list[RangePartition] = []
            for tp in group:
                if self._cached is None:  # a batch redone after a restart: list once
                    self._listing()
                first = begin.get(tp, 0)
                reader = self.backend.reader(tp, first, finish[tp])
                members.append(RangePartition(tp, first, finish[tp], reader))
            if self.group_offsets > 0:
                parts.append(GroupPartition(tuple(members)))
            else:
                parts.extend(members)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, GroupPartition):
            for member in partition.ranges:
                yield from self._read_range(member)
        else:
            assert isinstance(partition, RangePartition)
            yield from self._read_range(partition)

    def _read_range(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
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
    """The partitions in ``start`` that a micro-batch reads, in the order of its Spark partitions.

    Those with offsets from ``start`` to ``end``. The engine's task knows its
    partition by this order before the first record arrives. The partitions
    new in the batch (:func:`new_in_order`) come after these.
    """
    return [tp for tp in sorted(end) if end[tp] > start.get(tp, end[tp])]


def new_in_order(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[TopicPartition]:
    """The partitions new in a micro-batch (not in ``start``) that it reads, from offset 0.

    Their Spark partitions follow those of :func:`read_in_order`, so that
    the engine's order (which knows no start for them, and has no state to
    load for them) stays the same for every other partition.
    """
    return [tp for tp in sorted(end) if tp not in start and end[tp] > 0]


def task_groups(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], bound: int
) -> list[tuple[TopicPartition, ...]]:
    """The topic-partitions of a micro-batch as its Spark partitions read them: one task each.

    ``bound`` 0: one topic-partition a task, in the order of :func:`read_in_order`
    then :func:`new_in_order`. Otherwise, the topic-partitions in name order,
    cut into runs whose ranges hold fewer than ``bound`` offsets together: a
    range of ``bound`` offsets or more is a task alone, so that a busy
    partition keeps its own task and the batch its parallelism. A function
    of the batch's offsets alone, so the source (the driver) and every task
    (:mod:`app.engine.task`) find the same groups, and a redone batch too.
    """
    if bound <= 0:
        return [(tp,) for tp in [*read_in_order(start, end), *new_in_order(start, end)]]
    groups: list[tuple[TopicPartition, ...]] = []
    run: list[TopicPartition] = []
    held = 0
    for tp in sorted(end):
        size = end[tp] - start.get(tp, 0)
        if size <= 0:
            continue
        if run and (size >= bound or held + size >= bound):
            groups.append(tuple(run))
            run, held = [], 0
        run.append(tp)
        held += size
        if size >= bound:
            groups.append(tuple(run))
            run, held = [], 0
    if run:
        groups.append(tuple(run))
    return groups


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
    read where it is processed, :mod:`app.sources.ranges`), ``retiredTopics``
    (where the output records its retired topics, :mod:`app.sources.retired`),
    ``groupOffsets`` (:func:`task_groups`' bound: small topic-partitions share
    a Spark partition; 0, the default: one each). A subclass checks something
    before each trigger's end goes back to Spark (:meth:`before_planning`:
    the job's fence, :class:`app.spark.planning.FencedSource`).
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
            retired_uri=options.get(RETIRED_OPTION, ""),
            group_offsets=int(options.get(GROUP_OFFSETS_OPTION, "0")),
            before_planning=self.before_planning(),
        )

    def before_planning(self) -> Callable[[], None] | None:
        """What the reader calls before each trigger's end goes back to Spark (None: nothing)."""
        return None
