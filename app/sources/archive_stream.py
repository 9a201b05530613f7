"""The raw archive as a Spark stream with Kafka's semantics.

A Python Data Source (``spark.readStream.format("tablecast_archive")``) whose
offsets are ``{"topic:partition": next_offset}``, recorded in the checkpoint
as Kafka's are. It starts at the earliest offset of every partition, picks up
topics and partitions that appear while it runs, fails on a hole like
``failOnDataLoss``, bounds a micro-batch with ``maxOffsetsPerTrigger`` and
gives one Spark partition per topic-partition, read in offset order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import orjson
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from app import offsets as offsets_mod
from app.errors import DataLossError
from app.offsets import Offsets, TopicPartition
from app.sources import archive
from app.storage import resolve

FORMAT = "tablecast_archive"


@dataclass(frozen=True)
class ArchivePartition(InputPartition):
    """One topic-partition's offsets ``[start, end)`` and the files holding them."""

    uri: str
    topic: str
    partition: int
    start: int
    end: int
    files: tuple[archive.ArchiveFile, ...]


class ArchiveDataSource(DataSource):
    """Options: ``path``, ``topicPattern``, ``maxOffsetsPerTrigger``, ``startingOffsets``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return archive.SPARK_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ArchiveStreamReader(
            uri=self.options["path"],
            topic_pattern=self.options["topicPattern"],
            max_offsets=int(self.options.get("maxOffsetsPerTrigger", "0")),
            starting=offsets_mod.from_json(self.options.get("startingOffsets", "{}")),
        )


class ArchiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, *, uri: str, topic_pattern: str, max_offsets: int, starting: Offsets
    ) -> None:
        self.uri = uri
        self.topic_pattern = topic_pattern
        self.max_offsets = max_offsets
        self.starting = starting
        self.target: Offsets | None = None  # the end of an available-now run

    def _index(self) -> archive.ArchiveIndex:
        return archive.scan(resolve(self.uri), self.topic_pattern)

    def initialOffset(self) -> dict[str, int]:
        index = self._index()
        start = {tp: index.earliest(tp) for tp in index.files}
        start.update(self.starting)
        return offsets_mod.to_archive_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        index = self._index()
        self.target = {tp: index.latest(tp) for tp in index.files}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        index = self._index()
        begin = offsets_mod.from_json(start)
        backlog: dict[TopicPartition, tuple[int, int]] = {}
        for tp in begin:
            if tp not in index.files:
                raise DataLossError(
                    f"data loss in the archive: {tp} is gone but offsets from {begin[tp]} "
                    "were not read yet"
                )
        for tp in index.files:
            first = begin.get(tp, index.earliest(tp))
            last = index.latest(tp)
            if first < index.earliest(tp) or first > last:
                raise DataLossError(
                    f"data loss in the archive: {tp} must continue at offset {first} but "
                    f"the archive holds offsets {index.earliest(tp)} to {last - 1}"
                )
            if self.target is not None:
                last = min(last, self.target.get(tp, first))
            if last > first:
                backlog[tp] = (first, last)
        end = dict(begin)
        for tp, (_, last) in _limit(backlog, limit).items():
            end[tp] = last
        for tp in index.files:  # new partitions start at their earliest offset
            end.setdefault(tp, index.earliest(tp))
        return offsets_mod.to_archive_json(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        index = self._index()
        return offsets_mod.to_archive_json({tp: index.latest(tp) for tp in index.files})

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        index = self._index()
        begin = offsets_mod.from_json(start)
        finish = offsets_mod.from_json(end)
        parts: list[InputPartition] = []
        for tp in sorted(finish):
            first = begin.get(tp, index.earliest(tp) if tp in index.files else finish[tp])
            last = finish[tp]
            if last <= first:
                continue
            files = tuple(index.covering(tp, first, last))
            parts.append(ArchivePartition(self.uri, tp.topic, tp.partition, first, last, files))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ArchivePartition)
        location = resolve(partition.uri)
        yield from archive.read_range(
            location, list(partition.files), partition.start, partition.end
        )

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the archive is read-only to the job."""


def _limit(
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
        share = max(1, math.floor(limit.max_rows * (last - first) / total))
        limited[tp] = (first, min(last, first + share))
    return limited


def starting_offsets_option(offsets: Offsets) -> str:
    return orjson.dumps(offsets_mod.to_archive_json(offsets)).decode()
