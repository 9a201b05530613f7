"""A partition's records, cut where output files begin and end.

Output files are named by what they hold, never by who wrote them: a
topic-partition's range of offsets (the live job's micro-batch range, or a
range a replay or a correction recomputes) and a block of
:data:`OFFSETS_PER_FILE` offsets within it, one file per day of the rows'
``ts`` (``<day>/part-<topic>-<partition>-<start>-<end>-<block>.parquet``;
``date=<day>/`` in an output made before its layout was recorded:
:class:`app.engine.writer.DayLayout`).
So every message's rows land in the same block whatever code computed them,
and a range recomputed by a corrected version replaces its files block for
block (a changed file under a new name, ``...-<block>~<rewrite>.parquet``:
:mod:`app.sink.rewrite`).

A live task that runs several small topic-partitions
(:func:`app.sources.stream.task_groups`) writes their rows to one file per
day, named after the group: the first partition's block and the last
partition, ``part-<topic>-<partition>-<start>-<end>-000+<topic>-<partition>.parquet``
(:func:`group_block`). Each range of a group is one block, and the
partitions between the two that the batch published (its ledger entry's
ranges) are the blocks the file holds (:func:`group_members`): what replay
and correct rewrite a group file by, as they rewrite a compaction's merged
file.

:func:`plan_segments` cuts the records of a partition at every range and
block boundary; records outside every range (read to rebuild the state a
range starts from) form segments that write nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.contract.offsets import TopicPartition

# Offsets per output file of a range (before the split by day).
OFFSETS_PER_FILE = 500_000


def range_stem(tp: TopicPartition, start: int, end: int) -> str:
    """The common part of the names of a range's files."""
    return f"{tp.topic}-{tp.partition}-{start:020d}-{end:020d}"


_GROUP_MARK = "+"  # not in a Kafka topic's name ([a-zA-Z0-9._-])


def group_block(first: str, last: TopicPartition) -> str:
    """The block of a group's files: its first partition's block, then its last partition."""
    return f"{first}{_GROUP_MARK}{last.topic}-{last.partition}"


def group_members(
    block: str, ranges: Mapping[TopicPartition, tuple[int, int]]
) -> frozenset[str] | None:
    """The blocks a group's file of ``block`` holds, given its batch's ``ranges``; None: not a
    group's block, or not of that batch."""
    if _GROUP_MARK not in block:
        return None
    first_block, last = block.split(_GROUP_MARK, 1)
    last_topic, last_partition = last.rsplit("-", 1)
    first_topic, first_partition, start, end, _ = first_block.rsplit("-", 4)
    first = TopicPartition(first_topic, int(first_partition))
    if ranges.get(first) != (int(start), int(end)):
        return None
    high = TopicPartition(last_topic, int(last_partition))
    return frozenset(
        f"{range_stem(tp, a, b)}-000" for tp, (a, b) in ranges.items() if first <= tp <= high
    )


@dataclass(frozen=True, slots=True)
class Segment:
    """Records ``[lo, hi)`` (indices) of one file's block, or of no file (``name`` None)."""

    lo: int
    hi: int
    name: str | None  # the file name's stem with its block; None: rebuild state only


def plan_segments(
    offsets: np.ndarray, ranges: Sequence[tuple[int, int]], tp: TopicPartition
) -> list[Segment]:
    """Cut sorted ``offsets`` at every boundary of ``ranges`` and of their blocks."""
    segments: list[Segment] = []
    position = 0
    total = len(offsets)
    for start, end in sorted(ranges):
        first = int(np.searchsorted(offsets, start, side="left"))
        if first > position:
            segments.append(Segment(position, first, None))  # before the range: state only
        stem = range_stem(tp, start, end)
        block = 0
        while start + block * OFFSETS_PER_FILE < end:
            block_end = min(end, start + (block + 1) * OFFSETS_PER_FILE)
            last = int(np.searchsorted(offsets, block_end, side="left"))
            if last > first:
                segments.append(Segment(first, last, f"{stem}-{block:03d}"))
            first = last
            block += 1
        position = max(position, first)
    if position < total:
        segments.append(Segment(position, total, None))
    return segments
