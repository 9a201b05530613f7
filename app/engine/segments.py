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

:func:`plan_segments` cuts the records of a partition at every range and
block boundary; records outside every range (read to rebuild the state a
range starts from) form segments that write nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.contract.offsets import TopicPartition

# Offsets per output file of a range (before the split by day).
OFFSETS_PER_FILE = 500_000


def range_stem(tp: TopicPartition, start: int, end: int) -> str:
    """The common part of the names of a range's files."""
    return f"{tp.topic}-{tp.partition}-{start:020d}-{end:020d}"


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
