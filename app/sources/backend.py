"""What a source of Kafka records is to the streaming reader (no Spark here).

:mod:`app.sources.stream` implements Kafka's streaming semantics once over
any :class:`Backend`: the raw archive (:mod:`app.sources.archive`), Kafka
(:mod:`app.sources.kafka`), or both (:mod:`app.sources.tiered`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from app.contract.offsets import TopicPartition
from app.errors import DataLossError


@dataclass(frozen=True, slots=True)
class Bounds:
    """The offsets a backend holds of one partition: ``[earliest, latest)``.

    ``stable``: Kafka's last stable offset under ``read_committed``, where a
    micro-batch stops (offsets from it on may still be aborted); None where
    every offset up to ``latest`` is readable. ``identity``: the topic's
    identity (Kafka's topic ID, or the one the archive keeps beside the
    topic's files), "" when the backend cannot tell: a topic deleted and
    created again under the same name has a new one.
    """

    earliest: int
    latest: int
    stable: int | None = field(default=None, kw_only=True)
    identity: str = field(default="", kw_only=True)

    @property
    def readable(self) -> int:
        """Where a micro-batch may read up to now: ``latest``, or the last stable offset."""
        return self.latest if self.stable is None else min(self.latest, self.stable)

    def data_loss(
        self, where: str, tp: TopicPartition, first: int, *, found_late: bool = False
    ) -> DataLossError:
        """The data loss error when the next offset to read, ``first``, is not in these bounds.

        ``where`` is the backend's description; ``found_late``: the partition
        was found after the job started, so it is read from offset 0.
        """
        held = (
            f"holds offsets {self.earliest} to {self.latest - 1}"
            if self.latest > self.earliest
            else f"holds none of it (its next offset is {self.latest})"
        )
        missing = (first, self.earliest - 1) if first < self.earliest else None
        return self._loss_error(
            where,
            tp,
            first,
            held=f"{where} {held}",
            missing=missing,
            gone="gone",
            found_late=found_late,
        )

    def _loss_error(
        self,
        where: str,
        tp: TopicPartition,
        first: int,
        *,
        held: str,
        missing: tuple[int, int] | None,
        gone: str,
        found_late: bool = False,
    ) -> DataLossError:
        """The data loss error of these bounds with its facts: ``held`` says what the source
        holds; ``missing``, the first and last offsets lost (inclusive), which "are ``gone``"."""
        must = (
            f"{tp}, found after the job started, must be read from offset {first}"
            if found_late
            else f"{tp} must continue at offset {first}"
        )
        text = f"data loss in {where}: {must} but {held}"
        facts: dict[str, str | int] = {
            "source": where,
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": first,
            "earliest": self.earliest,
            "latest": self.latest,
        }
        if missing is None:
            return DataLossError(text, **facts)
        lo, last = missing
        return DataLossError(
            f"{text}: offsets {lo} to {last} are {gone}",
            **facts,
            first_missing=lo,
            last_missing=last,
        )


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

    def bounds(self, expected: Collection[TopicPartition] = ()) -> dict[TopicPartition, Bounds]:
        """Every partition of the topics matching the pattern, as it is now.

        ``expected``: the partitions the checkpoint reads. A backend whose
        answers may lack a partition for a moment (Kafka's brokers around a
        restart) asks again before it leaves one of them out: one it leaves
        out is gone. The readers that :meth:`reader` makes next use this
        listing: one listing per trigger.
        """
        ...

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one the source reads (the pattern matches its whole name)."""
        ...

    def offsets_at(self, timestamp_ms: int) -> dict[TopicPartition, int]:
        """Each partition's first offset whose record is at or after ``timestamp_ms``.

        A partition with no record that late answers its latest offset.
        """
        ...

    def reader(self, tp: TopicPartition, start: int, end: int) -> RangeReader:
        """How a task reads offsets ``[start, end)`` of ``tp`` (planned on the driver)."""
        ...
