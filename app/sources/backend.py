"""What a source of Kafka records is to the streaming reader (no Spark here).

:mod:`app.sources.stream` implements Kafka's streaming semantics once over
any :class:`Backend`: the raw archive (:mod:`app.sources.archive`) or Kafka.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from app.offsets import TopicPartition


@dataclass(frozen=True, slots=True)
class Bounds:
    """The offsets a backend holds of one partition: ``[earliest, latest)``."""

    earliest: int
    latest: int


class RangeReader(Protocol):
    """What a Spark task needs to read one partition's range (pickled to executors)."""

    def read(self) -> Iterator[pa.RecordBatch]:
        """The records of the range, in offset order, with the Kafka source's columns."""
        ...


class Backend(Protocol):
    """A store of Kafka records: the archive, Kafka itself, or both."""

    @property
    def description(self) -> str:
        """What the errors call it: "the archive", "Kafka at host:9092"."""
        ...

    def bounds(self) -> dict[TopicPartition, Bounds]:
        """Every partition of the topics matching the pattern, as it is now."""
        ...

    def reader(self, tp: TopicPartition, start: int, end: int) -> RangeReader:
        """How a task reads offsets ``[start, end)`` of ``tp`` (planned on the driver)."""
        ...
