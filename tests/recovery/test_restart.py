"""Restart planning: the offset from which every session can be rebuilt."""

from __future__ import annotations

import pytest

from app.recovery.restart import CannotRebuildError, Header, restart_point


def h(offset: int, session: str, seq: int, kind: str) -> Header:
    return Header(offset, session, seq, kind, 1000 + offset)


def test_open_sessions_move_the_restart_back_to_their_latest_snapshot() -> None:
    history = [
        h(0, "a", 0, "snapshot"), h(1, "a", 1, "update"),
        h(2, "b", 0, "snapshot"), h(3, "a", 2, "snapshot"),  # a resyncs at 3
        h(4, "b", 1, "update"), h(5, "a", 3, "update"),
    ]  # fmt: skip
    point = restart_point(history, 6)
    # At 6, a (open) needs its snapshot at 3 and b (open) its snapshot at 2. At 2, a's
    # first message is its resync snapshot at 3 and b starts there: settled.
    assert point.offset == 2
    assert point.adopt == {"a": 3}
    assert point.rebuilt == frozenset({"a", "b"})


def test_the_search_repeats_until_it_settles() -> None:
    history = [
        h(0, "c", 0, "snapshot"),
        h(1, "b", 0, "snapshot"), h(2, "c", 1, "update"),
        h(3, "a", 0, "snapshot"), h(4, "b", 1, "update"), h(5, "c", 2, "end"),
        h(6, "a", 1, "update"),
    ]  # fmt: skip
    point = restart_point(history, 7)
    # a (open) needs 3; at 3, b has an update at 4 and needs 1; at 1, c has an update
    # at 2 and needs 0.
    assert point.offset == 0
    assert point.iterations >= 3
    assert point.adopt == {}


def test_ended_sessions_need_nothing() -> None:
    history = [h(0, "a", 0, "snapshot"), h(1, "a", 1, "end"), h(2, "b", 0, "snapshot")]
    assert restart_point(history, 3).offset == 2
    assert restart_point([h(0, "a", 0, "snapshot"), h(1, "a", 1, "end")], 2).offset == 2


def test_a_session_without_a_snapshot_in_reach_cannot_be_rebuilt() -> None:
    with pytest.raises(CannotRebuildError, match="'x' has no snapshot"):
        restart_point([h(5, "x", 7, "update"), h(6, "x", 8, "update")], 7)
