"""Kafka's streaming semantics, once, over any backend that holds Kafka's records.

One Python Data Source (``spark.readStream.format("tablecast")``) reads
every source of the job: the raw archive, Kafka, or both, Kafka first and
the archive for the offsets Kafka no longer holds (a :class:`Backend` each).
Whatever the backend, its offsets are ``{"topic:partition": next_offset}``
in the checkpoint, and it behaves as Spark's Kafka source does with
``startingOffsets=earliest`` and ``failOnDataLoss=true``:

- topics matching the pattern (the whole name) are listed at every trigger,
  so topics and partitions that appear while it runs are read, from their
  earliest offset: a new partition first enters the offsets at its earliest
  offset, with nothing read, so that every range a micro-batch reads starts
  at an offset the checkpoint holds, and a redone batch reads the same;
- a partition whose earliest available offset is past the next offset to
  read, or that is gone, fails the query with :class:`DataLossError`;
- ``maxOffsetsPerTrigger`` bounds a micro-batch, shared between partitions
  in proportion to their backlog;
- ``Trigger.AvailableNow`` reads up to the offsets available when it starts;
- a micro-batch has one Spark partition per topic-partition, read in
  offset order (offsets the backend skips, such as transaction markers or
  compacted records, are simply absent), with the Kafka source's columns and
  the tier that served each record (``served_by``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import orjson
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
from app.contract.offsets import Offsets, TopicPartition
from app.errors import DataLossError
from app.sources.backend import Backend, Bounds, RangeReader
from app.sources.records import SPARK_DDL

FORMAT = "tablecast"


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One topic-partition's offsets ``[start, end)`` of a micro-batch."""

    tp: TopicPartition
    start: int
    end: int
    reader: RangeReader


class OffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader over a :class:`Backend` (runs in Spark's driver-side Python)."""

    def __init__(self, backend: Backend, *, max_offsets: int, starting: Offsets) -> None:
        self.backend = backend
        self.max_offsets = max_offsets
        self.starting = starting
        self.target: Offsets | None = None  # the end of an available-now run

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (PySpark's names)
        start = {tp: b.earliest for tp, b in self.backend.bounds().items()}
        start.update(self.starting)
        return offsets_mod.to_archive_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.max_offsets) if self.max_offsets > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = {tp: b.latest for tp, b in self.backend.bounds().items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        bounds = self.backend.bounds()
        begin = offsets_mod.from_json(start)
        end = dict(begin)
        for tp, (_, last) in share(self._ranges(bounds, begin), limit).items():
            end[tp] = last
        for tp, b in bounds.items():  # new partitions enter at their earliest offset
            end.setdefault(tp, b.earliest)
        return offsets_mod.to_archive_json(end)

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
                    source=where, topic=tp.topic, partition=tp.partition, offset=begin[tp],
                )  # fmt: skip
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for tp, first in begin.items():
            b = bounds[tp]
            if first < b.earliest or first > b.latest:
                raise b.data_loss(where, tp, first)
            last = b.latest if self.target is None else min(b.latest, self.target.get(tp, first))
            if last > first:
                ranges[tp] = (first, last)
        return ranges

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802
        return offsets_mod.to_archive_json(
            {tp: b.latest for tp, b in self.backend.bounds().items()}
        )

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin = offsets_mod.from_json(start)
        finish = offsets_mod.from_json(end)
        parts: list[InputPartition] = []
        for tp in sorted(finish):
            first = begin.get(tp, finish[tp])  # a partition new in this batch reads nothing yet
            if finish[tp] > first:
                reader = self.backend.reader(tp, first, finish[tp])
                parts.append(RangePartition(tp, first, finish[tp], reader))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from partition.reader.read()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: offsets live in Spark's checkpoint, never in the backend."""


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
    (see :func:`app.sources.backends.from_options`), ``topicPattern``,
    ``maxOffsetsPerTrigger``, ``startingOffsets`` (``{"topic:partition": n}``).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SPARK_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from app.sources.backends import from_options

        return OffsetStreamReader(
            from_options(self.options),
            max_offsets=int(self.options.get("maxOffsetsPerTrigger", "0")),
            starting=offsets_mod.from_json(self.options.get("startingOffsets", "{}")),
        )


def starting_offsets_option(offsets: Offsets) -> str:
    return orjson.dumps(offsets_mod.to_archive_json(offsets)).decode()
