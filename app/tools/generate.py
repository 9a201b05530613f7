"""Sample captures: realistic sessions in the contract's envelope, with faults.

``tablecast generate`` writes them as a raw archive; the operator's produce
tool publishes the same messages to Kafka. Every fault kind of CONTRACT.md
section 2 (and a hole in the archive) can be injected, and the generator
says where each one landed, so tests can assert the exact error.

Rows follow the spec's table schema (CONTRACT.md section 1a). A declared
schema's rows carry the edge values producers send (:class:`TypedRows`):
times with offsets and as epoch milliseconds, decimals as strings and as
numbers, large and negative integers, unicode, nullable fields absent or
null, deletes by key object (and by bare value for a one-column key).
"""

from __future__ import annotations

import base64
import random
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
import pyarrow as pa

from app.contract.offsets import TopicPartition, is_topic_name
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.errors import ConfigurationError, Rule
from app.sources import archive, records
from app.storage import Location, resolve
from app.tools.typed_rows import TypedRows

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MAX_TOPICS = 10_000  # more than a cluster holds: a typo, not a capture
STATUSES = ("ok", "warn", "alarm", "offline", None)


class Fault(StrEnum):
    FIRST_NOT_SNAPSHOT = "first-not-snapshot"
    SEQ_GAP = "seq-gap"
    SEQ_REPEAT = "seq-repeat"
    SEQ_REORDER = "seq-reorder"
    DELETE_UNKNOWN = "delete-unknown"
    AFTER_END = "after-end"
    PARTITION_SWITCH = "partition-switch"
    BAD_JSON = "bad-json"
    MISSING_FIELD = "missing-field"
    WRONG_TYPE = "wrong-type"
    SESSION_MISMATCH = "session-mismatch"
    ARCHIVE_HOLE = "archive-hole"


FAULT_RULES = {
    Fault.FIRST_NOT_SNAPSHOT: Rule.FIRST_MESSAGE,
    Fault.SEQ_GAP: Rule.SEQUENCE,
    Fault.SEQ_REPEAT: Rule.SEQUENCE,
    Fault.SEQ_REORDER: Rule.SEQUENCE,
    Fault.DELETE_UNKNOWN: Rule.DELETE_UNKNOWN_ROW,
    Fault.AFTER_END: Rule.AFTER_END,
    Fault.PARTITION_SWITCH: Rule.ONE_PARTITION,
    Fault.BAD_JSON: Rule.ENVELOPE,
    Fault.MISSING_FIELD: Rule.ENVELOPE,
    Fault.WRONG_TYPE: Rule.ENVELOPE,
    Fault.SESSION_MISMATCH: Rule.ENVELOPE,
}


@dataclass(frozen=True)
class CaptureSpec:
    topics: int = 2
    partitions: int = 2
    sessions: int = 8
    rows_min: int = 5
    rows_max: int = 20
    updates: int = 40
    resync_every: int = 0  # a resync snapshot every N messages (0: none)
    concurrent: int = 4  # sessions active at once in a partition (1: one after another)
    records_per_file: int = 500
    prefix: str = "sensor-"
    seed: int = 7
    start_ms: int = START_MS
    faults: tuple[Fault, ...] = ()
    schema: TableSchema = DEFAULT_SCHEMA

    def __post_init__(self) -> None:
        # A topic names a folder of the archive: "../x" wrote beside it, not in it.
        last = f"{self.prefix}{self.topics - 1}"
        if not is_topic_name(last):
            raise ConfigurationError(
                f"--prefix {self.prefix!r}: topic {last!r} is not a Kafka topic name (ASCII "
                "letters, digits, '.', '_' and '-', at most 249)"
            )
        if self.topics > MAX_TOPICS:
            raise ConfigurationError(f"--topic-count {self.topics}: at most {MAX_TOPICS:,}")


@dataclass(frozen=True)
class InjectedFault:
    fault: Fault
    topic: str
    partition: int
    offset: int  # the record that violates (for a hole: the first missing offset)
    session: str


@dataclass(frozen=True)
class Message:
    """One producer message: its key and the value exactly as sent."""

    session: str
    value: bytes
    ts: int
    fault: Fault | None = None


@dataclass
class Capture:
    """What was generated: messages per topic-partition, in offset order."""

    partitions: dict[TopicPartition, list[Message]] = field(default_factory=dict)
    faults: list[InjectedFault] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(len(m) for m in self.partitions.values())


def generate(spec: CaptureSpec) -> Capture:
    """Build the capture in memory (deterministic for a given spec)."""
    rng = random.Random(spec.seed)
    clock = _Clock(spec.start_ms)
    streams: dict[TopicPartition, list[list[dict[str, Any]]]] = {}
    fault_for = {
        i: fault for i, fault in enumerate(f for f in spec.faults if f != Fault.ARCHIVE_HOLE)
    }
    for index in range(spec.sessions):
        topic = f"{spec.prefix}{index % spec.topics}"
        session = f"{topic}-session-{index:05d}"
        tp = TopicPartition(topic, zlib.crc32(session.encode()) % spec.partitions)
        if spec.schema == DEFAULT_SCHEMA:
            messages = _session_messages(rng, spec, session)
            unknown: Any = "no-such-row"
        else:
            typed = TypedRows(spec.schema, rng)
            messages = typed.session_messages(spec, session)
            unknown = typed.unknown_key()
        fault = fault_for.get(index)
        if fault is not None:
            messages = _inject(rng, fault, session, messages, unknown)
        streams.setdefault(tp, []).append(messages)

    capture = Capture()
    stray: list[tuple[TopicPartition, Message]] = []
    for tp in sorted(streams):
        merged = _interleave(rng, streams[tp], clock, spec.concurrent)
        kept: list[Message] = []
        for message in merged:
            if message.fault is Fault.PARTITION_SWITCH:
                other = TopicPartition(tp.topic, (tp.partition + 1) % max(spec.partitions, 2))
                stray.append((other, message))
            else:
                kept.append(message)
        capture.partitions[tp] = kept
    for tp, moved in stray:
        capture.partitions.setdefault(tp, []).append(moved)
    for tp, in_order in sorted(capture.partitions.items()):
        for offset, sent in enumerate(in_order):
            if sent.fault is not None:
                capture.faults.append(
                    InjectedFault(sent.fault, tp.topic, tp.partition, offset, sent.session)
                )
    return capture


def write_archive(
    capture: Capture,
    uri: str,
    spec: CaptureSpec,
    progress: Callable[[int, int], None] | None = None,
) -> Location:
    """Write the capture as a raw archive (CONTRACT.md section 4).

    Each topic new to the archive gets an identity of its own, as a topic created
    in Kafka gets an ID: a checkpoint that read it then refuses another archive's
    topic of the same name (a swapped archive) instead of reading strangers' sessions.
    """
    location = resolve(uri)
    for topic in sorted({tp.topic for tp in capture.partitions}):
        if not location.exists(location.child(topic, archive.IDENTITY_FILE)):
            archive.write_identity(location, topic, new_identity())
    total, done = capture.messages, 0
    holes = [f for f in spec.faults if f == Fault.ARCHIVE_HOLE]
    for tp, messages in sorted(capture.partitions.items()):
        files = list(_chunks(len(messages), spec.records_per_file))
        skip = None
        if holes and len(files) >= 3:
            holes.pop()
            skip = 1  # the second file goes missing
            capture.faults.append(
                InjectedFault(Fault.ARCHIVE_HOLE, tp.topic, tp.partition, files[1][0], "")
            )
        for number, (start, end) in enumerate(files):
            if number != skip:
                archive.write_file(location, tp, start, end, _table(tp, messages, start, end))
            done += end - start
            if progress is not None:
                progress(done, total)
    return location


def new_identity() -> str:
    """A topic identity as Kafka spells its topic IDs: 16 random bytes, base64 unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _table(tp: TopicPartition, messages: list[Message], start: int, end: int) -> pa.Table:
    chunk = messages[start:end]
    return pa.table(
        {
            "key": pa.array([m.session.encode() for m in chunk], pa.binary()),
            "value": pa.array([m.value for m in chunk], pa.binary()),
            "topic": pa.array([tp.topic] * len(chunk), pa.string()),
            "partition": pa.array([tp.partition] * len(chunk), pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "timestamp": pa.array([m.ts * 1000 for m in chunk], pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * len(chunk), pa.int32()),
            "headers": records.no_headers(len(chunk)),
        },
        schema=records.SCHEMA,
    )


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


class _Clock:
    def __init__(self, start_ms: int) -> None:
        self.now = start_ms

    def tick(self, rng: random.Random) -> int:
        self.now += rng.randint(1, 50)
        return self.now


def _session_messages(rng: random.Random, spec: CaptureSpec, session: str) -> list[dict[str, Any]]:
    """The envelopes of one session, ``ts`` left for the interleaving to set."""
    table: dict[str, tuple[float | None, str | None]] = {}
    next_id = 0

    def new_row() -> tuple[str, tuple[float | None, str | None]]:
        nonlocal next_id
        next_id += 1
        value = None if rng.random() < 0.05 else round(rng.uniform(-100, 100), 3)
        return f"r{next_id:05d}", (value, rng.choice(STATUSES))

    def snapshot(seq: int) -> dict[str, Any]:
        nonlocal table
        if table:  # a resync keeps most rows, changes some, drops a few
            table = {k: v for k, v in table.items() if rng.random() > 0.1}
        for _ in range(rng.randint(spec.rows_min, spec.rows_max) - len(table)):
            row_id, row = new_row()
            table[row_id] = row
        rows = [{"id": k, "value": v, "status": s} for k, (v, s) in table.items()]
        return {"session": session, "seq": seq, "type": "snapshot", "rows": rows}

    messages = [snapshot(0)]
    for _ in range(spec.updates):
        seq = len(messages)
        if spec.resync_every and seq % spec.resync_every == 0:
            messages.append(snapshot(seq))
            continue
        upserts: dict[str, tuple[float | None, str | None]] = {}
        for _ in range(rng.randint(1, 4)):
            if table and rng.random() < 0.8:
                row_id = rng.choice(list(table))
                upserts[row_id] = (round(rng.uniform(-100, 100), 3), rng.choice(STATUSES))
            else:
                row_id, row = new_row()
                upserts[row_id] = row
        deleted = []
        if len(table) > spec.rows_min and rng.random() < 0.1:
            deleted = [rng.choice([k for k in table if k not in upserts])]
        for row_id in deleted:
            del table[row_id]
        table.update(upserts)
        message: dict[str, Any] = {
            "session": session,
            "seq": seq,
            "type": "update",
            "rows": [{"id": k, "value": v, "status": s} for k, (v, s) in upserts.items()],
        }
        if deleted:
            message["deleted"] = deleted
        messages.append(message)
    messages.append({"session": session, "seq": len(messages), "type": "end"})
    return messages


def _inject(
    rng: random.Random,
    fault: Fault,
    session: str,
    messages: list[dict[str, Any]],
    unknown: Any = "no-such-row",
) -> list[dict[str, Any]]:
    """Break one session as ``fault`` says; mark the record that violates."""
    k = max(1, len(messages) // 2)
    broken = [dict(m) for m in messages]
    if fault is Fault.FIRST_NOT_SNAPSHOT:
        broken[0] = {"session": session, "seq": 0, "type": "update", "rows": broken[0]["rows"]}
        broken[0]["_fault"] = fault
    elif fault is Fault.SEQ_GAP:
        del broken[k]
        broken[k]["_fault"] = fault
    elif fault is Fault.SEQ_REPEAT:
        broken.insert(k + 1, dict(broken[k], _fault=fault))
    elif fault is Fault.SEQ_REORDER:
        broken[k], broken[k + 1] = broken[k + 1], broken[k]
        broken[k]["_fault"] = fault
    elif fault is Fault.DELETE_UNKNOWN:
        broken[k] = dict(broken[k], type="update", rows=[], deleted=[unknown], _fault=fault)
    elif fault is Fault.AFTER_END:
        broken.append(
            {"session": session, "seq": len(broken), "type": "update", "rows": [], "_fault": fault}
        )
    elif fault is Fault.PARTITION_SWITCH:
        broken[-1]["_fault"] = fault
    elif fault is Fault.BAD_JSON:
        broken[k]["_fault"] = fault
        broken[k]["_raw"] = b'{"session": "' + session.encode() + b'", "seq": '
    elif fault is Fault.MISSING_FIELD:
        broken[k] = {key: v for key, v in broken[k].items() if key != "seq"}
        broken[k]["_fault"] = fault
    elif fault is Fault.WRONG_TYPE:
        broken[k] = dict(broken[k], seq=str(broken[k]["seq"]), _fault=fault)
    elif fault is Fault.SESSION_MISMATCH:
        broken[k] = dict(broken[k], session=session + "-other", _fault=fault)
    return broken


def _interleave(
    rng: random.Random, sessions: list[list[dict[str, Any]]], clock: _Clock, concurrent: int
) -> list[Message]:
    """Merge sessions' messages as concurrent producers would, each in its order."""
    pending = [list(reversed(s)) for s in sessions]
    active = list(range(min(len(pending), max(concurrent, 1))))
    waiting = list(range(len(active), len(pending)))
    merged: list[Message] = []
    while active:
        slot = rng.randrange(len(active))
        stream = pending[active[slot]]
        doc = stream.pop()
        fault = doc.pop("_fault", None)
        raw = doc.pop("_raw", None)
        ts = clock.tick(rng)
        doc["ts"] = ts
        value = raw if raw is not None else orjson.dumps(doc)
        key = doc.get("session", "")
        session = key if fault is not Fault.SESSION_MISMATCH else key.removesuffix("-other")
        merged.append(Message(session, value, ts, None if fault is None else Fault(fault)))
        if not stream:
            active.pop(slot)
            if waiting:
                active.append(waiting.pop(0))
    return merged
