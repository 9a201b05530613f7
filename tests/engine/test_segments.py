"""Where a partition's records are cut: ranges, blocks of offsets, state-only stretches."""

from __future__ import annotations

import numpy as np
import pytest

from app.contract.offsets import TopicPartition
from app.engine import segments
from app.engine.segments import Segment, plan_segments, range_stem

TP = TopicPartition("sensor-1", 2)


def test_a_live_range_is_one_segment_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = np.arange(100, 125)
    assert plan_segments(offsets, [(100, 125)], TP) == [
        Segment(0, 25, f"{range_stem(TP, 100, 125)}-000")
    ]
    monkeypatch.setattr(segments, "OFFSETS_PER_FILE", 10)  # a small block for the test
    cut = plan_segments(offsets, [(100, 125)], TP)
    assert [(s.lo, s.hi, s.name[-3:] if s.name else None) for s in cut] == [
        (0, 10, "000"),
        (10, 20, "001"),
        (20, 25, "002"),
    ]


def test_records_outside_the_ranges_only_rebuild_state_and_skipped_offsets_are_no_matter() -> None:
    offsets = np.array([3, 4, 7, 8, 9, 12, 13, 20, 21])  # gaps: offsets Kafka skipped
    cut = plan_segments(offsets, [(8, 13), (20, 22)], TP)
    assert cut == [
        Segment(0, 3, None),  # 3, 4, 7: read to rebuild the state at offset 8
        Segment(3, 6, f"{range_stem(TP, 8, 13)}-000"),  # 8, 9, 12
        Segment(6, 7, None),  # 13
        Segment(7, 9, f"{range_stem(TP, 20, 22)}-000"),  # 20, 21
    ]
    assert range_stem(TP, 8, 13) == "sensor-1-2-00000000000000000008-00000000000000000013"


def test_a_groups_block_names_the_blocks_its_files_hold_given_its_batchs_ranges() -> None:
    a, b, c, d = (TopicPartition(t, p) for t, p in [("s-a", 0), ("s-a", 1), ("s-b", 0), ("s-c", 0)])
    published = {a: (10, 20), b: (0, 5), c: (7, 9), d: (3, 4)}
    block = segments.group_block(f"{range_stem(a, 10, 20)}-000", c)
    assert block == f"{range_stem(a, 10, 20)}-000+s-b-0"
    # The batch's partitions from the first to the last: d is another task's.
    assert segments.group_members(block, published) == frozenset(
        {
            f"{range_stem(a, 10, 20)}-000",
            f"{range_stem(b, 0, 5)}-000",
            f"{range_stem(c, 7, 9)}-000",
        }
    )
    # Another batch's ranges: its first partition's range differs.
    assert segments.group_members(block, {**published, a: (20, 30)}) is None
    assert segments.group_members(f"{range_stem(a, 10, 20)}-000", published) is None
