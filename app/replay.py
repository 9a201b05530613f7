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

from app.contract import Record
from app.errors import ConfigurationError
from app.offsets import TopicPartition
from app.processor import OutputRow, TableProcessor
from app.restart import Header, headers
from app.session import IntegrityMode, SessionMachine
from app.sink.publish import publish_rows
from app.sources import archive
from app.storage import resolve
from app.verify import rows_table


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
    records: list[Record], since_ms: int, until_ms: int
) -> tuple[int, set[str], list[OutputRow]]:
    """One partition: where to start reading and the window's rows."""
    history = headers(records)
    in_window = {h.session for h in history if since_ms <= h.ts < until_ms and h.type != "invalid"}
    starts: dict[str, int] = {}
    for session in in_window:
        starts[session] = _start_of(session, history, since_ms, until_ms)
    if not starts:
        return (records[-1].position.offset + 1 if records else 0), set(), []
    start = min(starts.values())
    by_session: dict[bytes | None, list[Record]] = {}
    for record in records:
        key = record.key
        session = key.decode("utf-8", "replace") if key is not None else ""
        if session in starts and record.position.offset >= starts[session]:
            by_session.setdefault(key, []).append(record)
    seq_of = {h.offset: h.seq for h in history}
    # Sessions read from a resync snapshot before the window (its rows are not wanted).
    adopt = {session: offset for session, offset in starts.items() if seq_of[offset] > 0}
    machine = SessionMachine(TableProcessor(), IntegrityMode.STRICT, adopt=adopt)
    ts_of = {h.offset: h.ts for h in history}
    rows: list[OutputRow] = []
    for key in sorted(by_session, key=lambda k: k or b""):
        result = machine.apply(key, None, by_session[key])
        rows += [r for r in result.rows if since_ms <= ts_of[r.offset] < until_ms]
    return start, set(starts), rows


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
    location = resolve(archive_uri)
    index = archive.scan(location, topic_pattern)
    starts: dict[TopicPartition, int] = {}
    sessions: set[str] = set()
    rows: list[OutputRow] = []
    for tp, files in sorted(index.files.items()):
        records = list(archive.iter_records(location, files, files[0].start, files[-1].end))
        start, touched, found = window_rows(records, since_ms, until_ms)
        starts[tp] = start
        sessions |= touched
        rows += found
    name = f"replay-{since_ms}-{until_ms}"
    files_written = publish_rows(output_uri, rows_table(rows), name)
    return ReplayReport(starts, len(sessions), len(rows), files_written)
