"""Where a partition can be re-read from so that every session rebuilds.

Under the built-in table processor a session's messages depend on its
latest snapshot before them, so a partition can only be re-read from an
offset at which every session that goes on past it is either new or starts
again with a snapshot. A user's processor may carry anything across a
snapshot, so there a session rebuilds only from the start of its life: its
first message, or its first after an ``end``. Repair and replay both ask for
such offsets. Everything here is plain Python over a partition's message
headers, read from the archive or from Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from app.contract.envelope import MessageType, Record
from app.errors import ExitCode, TablecastError


@dataclass(frozen=True, slots=True)
class Header:
    """What restart planning needs of a message: no rows."""

    offset: int
    session: str
    seq: int
    # None: the value is not an envelope with a known type (it neither starts
    # nor ends a session, like an update).
    type: MessageType | None
    ts: int


def headers(records: Iterable[Record]) -> list[Header]:
    """Message headers in offset order; an unparseable value has type None and seq -1."""
    out: list[Header] = []
    for record in records:
        session = record.key.decode("utf-8", "replace") if record.key is not None else ""
        kind: MessageType | None
        try:
            doc = orjson.loads(record.value or b"")
            seq, kind, ts = int(doc["seq"]), MessageType(doc["type"]), int(doc["ts"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            seq, kind, ts = -1, None, record.timestamp_ms
        out.append(Header(record.position.offset, session, seq, kind, ts))
    out.sort(key=lambda h: h.offset)
    return out


@dataclass(frozen=True)
class RestartPoint:
    """A partition's restart offset and the sessions it touches."""

    offset: int
    adopt: dict[str, int]  # session -> the resync snapshot (seq > 0) it begins again with
    rebuilt: frozenset[str]  # sessions whose output from `offset` on is produced again
    iterations: int = field(default=1, compare=False)


class CannotRebuildError(TablecastError):
    exit_code = ExitCode.START_REFUSED

    def __init__(self, session: str, offset: int, what: str = "snapshot") -> None:
        super().__init__(
            f"session {session!r} has no {what} at or before offset {offset} in the source: "
            "it cannot be rebuilt (its start is beyond retention)",
            session=session,
            offset=offset,
        )
        self.session = session


def restart_point(history: list[Header], end: int, *, snapshots: bool = True) -> RestartPoint:
    """The largest offset <= ``end`` from which every session can be rebuilt.

    ``history`` is the partition's messages before ``end`` (the committed
    output's end); sessions not ended by then are assumed to go on. Start at
    ``end``; every session that needs state from before the candidate offset
    moves it back to that session's latest snapshot before it; repeat until
    it settles. ``snapshots``: whether a snapshot rebuilds a session's state (the built-in
    processor's); else only the start of its life does.
    """
    by_session: dict[str, list[Header]] = {}
    for header in history:
        if header.offset < end:
            by_session.setdefault(header.session, []).append(header)
    candidate, iterations = end, 0
    while True:
        iterations += 1
        lowest = candidate
        for session, messages in by_session.items():
            if snapshots:
                if not _needs_state_before(messages, candidate):
                    continue
                start = _latest_snapshot_before(messages, candidate)
                if start is None:
                    raise CannotRebuildError(session, candidate)
            else:
                if not _in_a_life(messages, candidate):
                    continue
                start = _life_start(messages, candidate)
                if start is None:
                    raise CannotRebuildError(session, candidate, "first message (seq 0)")
            lowest = min(lowest, start)
        if lowest == candidate:
            break
        candidate = lowest
    adopt: dict[str, int] = {}
    rebuilt: set[str] = set()
    for session, messages in by_session.items():
        after = [m for m in messages if m.offset >= candidate]
        before = [m for m in messages if m.offset < candidate]
        if after:
            rebuilt.add(session)
            if snapshots and before and after[0].type is MessageType.SNAPSHOT:
                adopt[session] = after[0].offset
    return RestartPoint(candidate, adopt, frozenset(rebuilt), iterations)


def _needs_state_before(messages: list[Header], offset: int) -> bool:
    """Whether the session's messages from ``offset`` on depend on earlier ones."""
    before = [m for m in messages if m.offset < offset]
    if not before:
        return False  # starts at or after the offset: rebuilt from its own start
    after = [m for m in messages if m.offset >= offset]
    if after:
        return after[0].type is not MessageType.SNAPSHOT
    # Open at the end: its next message needs its state.
    return before[-1].type is not MessageType.END


def _latest_snapshot_before(messages: list[Header], offset: int) -> int | None:
    snapshots = [m.offset for m in messages if m.offset < offset and m.type is MessageType.SNAPSHOT]
    return snapshots[-1] if snapshots else None


def _in_a_life(messages: list[Header], offset: int) -> bool:
    """Whether the session's state at ``offset`` holds messages before it (not ended)."""
    before = [m for m in messages if m.offset < offset]
    return bool(before) and before[-1].type is not MessageType.END


def _life_start(messages: list[Header], offset: int) -> int | None:
    """The first message of the session's life at ``offset``: its first, or its first after
    an ``end``; None where that is not its seq 0 (its start is gone from the source)."""
    before = [m for m in messages if m.offset < offset]
    ends = [i for i, m in enumerate(before) if m.type is MessageType.END]
    first = before[ends[-1] + 1] if ends else before[0]
    if not ends and first.seq != 0:
        return None
    return first.offset
