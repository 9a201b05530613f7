"""``tablecast replay``: backfill a window of event time from the raw archive.

For when Kafka's retention has passed: the lake keeps what the brokers
dropped. Every session with a message whose ``ts`` falls in
``[since, until)`` is rebuilt from its latest snapshot that the window does
not need to reproduce (or from its start), and exactly the rows the live job
wrote for the window's messages are written to the output dataset, through
the same stage-then-publish steps as the job's sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from app.contract import Position, Record
from app.engine.machine import IntegrityMode, PartitionMachine, RecordColumns, Rules
from app.engine.output import OUTPUT_SCHEMA
from app.engine.state import PartitionState
from app.errors import ConfigurationError, IntegrityViolationError
from app.offsets import TopicPartition
from app.processor import TableProcessor
from app.restart import Header, headers
from app.sink.publish import publish_rows
from app.sources import archive, records


@dataclass(frozen=True)
class ReplayReport:
    starts: dict[TopicPartition, int]  # where each partition was read from
    sessions: int
    rows: int
    files: int


def parse_time(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) in ms since the epoch."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"{text!r} is not an ISO 8601 time like 2026-01-01T00:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def window_rows(
    tp: TopicPartition, records: RecordColumns, since_ms: int, until_ms: int
) -> tuple[int, set[str], pa.Table]:
    """One partition: where to start reading, the window's sessions, and its rows.

    Every session with a message in the window is rebuilt from its latest
    snapshot whose own rows the window does not need (or from its start);
    only those sessions' records from there on are applied.
    """
    history = headers(
        Record(Position(tp.topic, tp.partition, offset), key, value, ts)
        for key, value, offset, ts in zip(*records, strict=True)
    )
    in_window = {h.session for h in history if since_ms <= h.ts < until_ms and h.type != "invalid"}
    starts = {session: _start_of(session, history, since_ms, until_ms) for session in in_window}
    if not starts:
        return (history[-1].offset + 1 if history else 0), set(), OUTPUT_SCHEMA.empty_table()
    wanted = [
        i for i, (key, offset) in enumerate(zip(records.keys, records.offsets, strict=True))
        if key is not None and offset >= starts.get(key.decode("utf-8", "replace"), offset + 1)
    ]  # fmt: skip
    subset = RecordColumns(
        [records.keys[i] for i in wanted],
        [records.values[i] for i in wanted],
        [records.offsets[i] for i in wanted],
        [records.timestamps_ms[i] for i in wanted],
    )
    seq_of = {h.offset: h.seq for h in history}
    # Sessions read from a resync snapshot before the window (its rows are not wanted).
    adopt = {session: offset for session, offset in starts.items() if seq_of[offset] > 0}
    machine = PartitionMachine(TableProcessor(), Rules(IntegrityMode.STRICT, adopt=adopt))
    result = machine.run(PartitionState.empty(tp, min(starts.values())), subset)
    if result.violations:
        raise IntegrityViolationError(result.violations[0])
    rows = result.rows.to_table()
    stamps_ms = pc.cast(rows["ts"], pa.int64())
    in_range = pc.and_(pc.greater_equal(stamps_ms, since_ms), pc.less(stamps_ms, until_ms))
    return min(starts.values()), set(starts), rows.filter(in_range)


def _start_of(session: str, history: list[Header], since_ms: int, until_ms: int) -> int:
    """The session's latest snapshot whose own output the window does not need."""
    messages = [h for h in history if h.session == session]
    first_in = next(h.offset for h in messages if since_ms <= h.ts < until_ms)
    start = messages[0].offset
    for h in messages:
        if h.offset > first_in:
            break
        # A resync snapshot before the window resets the table; a seq 0 one starts it.
        if h.type == "snapshot" and (h.offset < first_in or h.seq == 0):
            start = h.offset
    return start


def replay(
    archive_uri: str, output_uri: str, since_ms: int, until_ms: int, topic_pattern: str
) -> ReplayReport:
    if until_ms <= since_ms:
        raise ConfigurationError("--until must be after --since")
    location = archive.require_root(archive_uri)
    index = archive.scan(location, topic_pattern)
    starts: dict[TopicPartition, int] = {}
    sessions: set[str] = set()
    tables: list[pa.Table] = []
    for tp, files in sorted(index.files.items()):
        table = pa.Table.from_batches(
            list(archive.read_range(location, files, files[0].start, files[-1].end)),
            schema=records.SCHEMA,
        )
        start, touched, rows = window_rows(tp, RecordColumns.from_arrow(table), since_ms, until_ms)
        starts[tp] = start
        sessions |= touched
        tables.append(rows)
    rows = pa.concat_tables(tables) if tables else OUTPUT_SCHEMA.empty_table()
    name = f"replay-{since_ms}-{until_ms}"
    files_written = publish_rows(output_uri, rows, name)
    return ReplayReport(starts, len(sessions), len(rows), files_written)
