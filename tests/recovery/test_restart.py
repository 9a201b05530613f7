"""Restart planning: the offset from which every session can be rebuilt."""

from __future__ import annotations

import orjson
import pytest

from app.contract.envelope import MessageType, Position, Record
from app.recovery.restart import CannotRebuildError, Header, headers, restart_point


def h(offset: int, session: str, seq: int, kind: str) -> Header:
    return Header(offset, session, seq, MessageType(kind), 1000 + offset)


def test_open_sessions_move_the_restart_back_to_their_latest_snapshot() -> None:
    history = [
        h(0, "a", 0, "snapshot"),
        h(1, "a", 1, "update"),
        h(2, "b", 0, "snapshot"),
        h(3, "a", 2, "snapshot"),  # a resyncs at 3
        h(4, "b", 1, "update"),
        h(5, "a", 3, "update"),
    ]
    point = restart_point(history, 6)
    # At 6, a (open) needs its snapshot at 3 and b (open) its snapshot at 2. At 2, a's
    # first message is its resync snapshot at 3 and b starts there: settled.
    assert point.offset == 2
    assert point.adopt == {"a": 3}
    assert point.rebuilt == frozenset({"a", "b"})


def test_the_search_repeats_until_it_settles() -> None:
    history = [
        h(0, "c", 0, "snapshot"),
        h(1, "b", 0, "snapshot"),
        h(2, "c", 1, "update"),
        h(3, "a", 0, "snapshot"),
        h(4, "b", 1, "update"),
        h(5, "c", 2, "end"),
        h(6, "a", 1, "update"),
    ]
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


def _record(offset: int, value: bytes | None, key: bytes | None = b"a") -> Record:
    return Record(Position("sensor-1", 0, offset), key, value, 5000 + offset)


def test_headers_carry_the_contracts_message_types_and_none_for_what_is_not_an_envelope() -> None:
    def envelope(seq: int, kind: object) -> bytes:
        return orjson.dumps({"session": "a", "seq": seq, "type": kind, "ts": 7, "rows": []})

    found = headers(
        [
            _record(3, envelope(1, "update")),
            _record(0, envelope(0, "snapshot")),
            _record(4, envelope(2, "end")),
            _record(5, b"{not json"),
            _record(6, envelope(3, "resync")),
            _record(7, envelope(4, 1)),
            _record(8, None, key=None),
        ]
    )
    assert found == [
        Header(0, "a", 0, MessageType.SNAPSHOT, 7),
        Header(3, "a", 1, MessageType.UPDATE, 7),
        Header(4, "a", 2, MessageType.END, 7),
        Header(5, "a", -1, None, 5005),
        Header(6, "a", -1, None, 5006),
        Header(7, "a", -1, None, 5007),
        Header(8, "", -1, None, 5008),
    ]


def test_restart_points_from_parsed_headers_see_snapshots_and_ends() -> None:
    """From record values to a restart point: the types parsed are the ones compared."""

    def value(session: str, seq: int, kind: str) -> bytes:
        return orjson.dumps({"session": session, "seq": seq, "type": kind, "ts": 1, "rows": []})

    records = [
        Record(Position("sensor-1", 0, offset), session.encode(), value(session, seq, kind), 1)
        for offset, session, seq, kind in [
            (0, "a", 0, "snapshot"),
            (1, "b", 0, "snapshot"),
            (2, "a", 1, "update"),
            (3, "b", 1, "end"),
            (4, "a", 2, "snapshot"),
            (5, "c", 0, "snapshot"),
        ]
    ]
    records.append(Record(Position("sensor-1", 0, 6), b"c", b"garbage", 1))
    point = restart_point(headers(records), 7)
    # b ended at 3; a resynced at 4; c's garbage at 6 needs c's snapshot at 5. At 4, a starts
    # again with its snapshot (adopted) and c starts after: settled.
    assert point.offset == 4
    assert point.adopt == {"a": 4}
    assert point.rebuilt == frozenset({"a", "c"})
