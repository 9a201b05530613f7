"""``tablecast inspect``: the state a checkpoint holds, session by session.

The break-point view of the pipeline: what the job remembers of each
session after a given micro-batch (its table, or a user's processor's state
decoded with its state type; last seq, topic-partition and last offset,
whether it is closed or quarantined, the messages its integrity class
dropped and the seqs that never arrived), read from the
partitions' state files beside the checkpoint
(:mod:`app.engine.store`): exactly the version (offset and digest) that the
output's ledger entry of that batch records, the one the next batch loads,
never merely the newest file (a losing resync pass or a zombie task may
have saved another version of the same offset). A recorded version that is
missing or damaged is a :class:`~app.errors.StateError`. The job need not
be running, and reading never changes the checkpoint or the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from app.contract import loader
from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, TopicPartition
from app.contract.processor import Processor
from app.contract.schema import ColumnType, TableSchema
from app.engine.state import SessionState, StateVersion
from app.engine.store import StateStore, state_root
from app.errors import ConfigurationError, StateError
from app.sink import ledger as ledger_mod
from app.sink import processors
from app.sink.checkpoint import CheckpointLog
from app.sink.ledger import Ledger, LedgerEntry
from app.storage import resolve

__all__ = [
    "SessionView",
    "StateSnapshot",
    "format_session",
    "format_summary",
    "read_state",
]


@dataclass(frozen=True, slots=True)
class SessionView:
    """One session's stored state, and the topic-partition whose state holds it."""

    tp: TopicPartition
    state: SessionState[Any]

    @property
    def status(self) -> str:
        if self.state.quarantine is not None or self.state.owner is not None:
            return "quarantined"
        return "closed" if self.state.closed else "open"

    def rows(self, table: bool) -> str:
        """The rows of a built-in processor's table; "-" for a user's processor's state."""
        if not table:
            return "-"
        return "0" if self.state.user is None else str(len(self.state.user))


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """The state after batch ``batch_id`` of a checkpoint."""

    schema: TableSchema  # the table schema of the sessions' rows (the processor's output)
    processor: Processor[Any]  # the processor whose states they are (the batch's)
    checkpoint: str
    batch_id: int
    end: Offsets  # the batch's end offsets: the state holds every record before them
    sessions: tuple[SessionView, ...]  # ordered by session id; all or the first `limit`
    total: int
    closed: int
    quarantined: int

    repeats: int = 0  # over every session: messages its integrity class dropped
    gaps: int = 0  # over every session: seqs that never arrived

    @property
    def open(self) -> int:
        return self.total - self.closed - self.quarantined

    @property
    def table(self) -> bool:
        """Whether the states are the built-in processor's tables."""
        return self.processor.name == loader.BUILT_IN


def read_state(
    spark: Any,
    checkpoint: str,
    output: str,
    *,
    at_batch: int | None = None,
    session: str | None = None,
    limit: int | None = None,
) -> StateSnapshot:
    """Read the checkpoint's state after ``at_batch`` (default: the last committed batch),
    as ``output``'s ledger records it.

    ``session`` keeps that session only; ``limit`` bounds how many sessions
    are listed (the counts always cover all of them).
    """
    log = CheckpointLog(spark, checkpoint)
    batch_id = _batch_check(log, at_batch)
    end = log.offsets(batch_id) or {}
    store = StateStore(state_root(log.uri))
    entry = _entry(log, output, batch_id)
    recorded = entry.states
    # The state holds the states of the processor the batch ran with (the ledger names it).
    processor = processors.of_entry(resolve(output), entry)
    views: list[SessionView] = []
    head = Ledger(resolve(output)).head()
    loaded_next = head.states if head is not None and head.states is not None else {}
    for tp in sorted(recorded if recorded is not None else end):
        version = (
            recorded[tp] if recorded is not None else _newest_at(store, log, batch_id, tp, end[tp])
        )
        if version is None:
            continue  # no record of the partition was processed by then
        try:
            state = store.load(tp, version, processor)
        except StateError:
            if loaded_next.get(tp) == version or version in store.versions(tp):
                raise  # the version the next batch loads, or a damaged one
            raise ConfigurationError(
                f"--at-batch {batch_id}: checkpoint {log.uri} keeps the state of the last "
                f"few batches only; {tp.key()} version {version.describe()} is gone"
            ) from None
        views.extend(SessionView(tp, s) for s in state.sessions.values())
    views.sort(key=lambda v: (v.state.session, v.tp))
    if session is not None:
        views = [v for v in views if v.state.session == session]
        if not views:
            raise ConfigurationError(
                f"checkpoint {log.uri} holds no session {session!r} after batch {batch_id} "
                f"(ends at {offsets_mod.describe(end)}); it has not started yet, or it "
                "expired after its idle timeout"
            )
    shown = views if limit is None else views[:limit]
    return StateSnapshot(
        processor.output,
        processor,
        log.uri,
        batch_id,
        end,
        tuple(shown),
        len(views),
        sum(v.status == "closed" for v in views),
        sum(v.status == "quarantined" for v in views),
        sum(v.state.repeats for v in views),
        sum(v.state.gaps for v in views),
    )


def _entry(log: CheckpointLog, output: str, batch_id: int) -> LedgerEntry:
    """The ledger entry of ``batch_id`` of this checkpoint: the state versions it records
    (None: an entry older than recorded versions) and its table schema."""
    query = log.query_id()
    found = [
        e
        for e in Ledger(resolve(output)).entries()
        if e.kind is ledger_mod.BATCH and e.checkpoint_id == query and e.batch_id == batch_id
    ]
    if not found:
        raise ConfigurationError(
            f"output {output} has no ledger entry of batch {batch_id} of checkpoint {log.uri} "
            f"(query {query}): give the output this checkpoint writes (--output)"
        )
    return found[-1]


def _newest_at(
    store: StateStore, log: CheckpointLog, batch_id: int, tp: TopicPartition, end: int
) -> StateVersion | None:
    """For entries written before versions were recorded: the newest version at ``end``."""
    versions = store.versions(tp)
    at_or_before = [v for v in versions if v.offset <= end]
    if not at_or_before and versions:
        raise ConfigurationError(
            f"--at-batch {batch_id}: checkpoint {log.uri} keeps the state of {tp} "
            f"from offset {versions[0].offset} on only (the last few versions)"
        )
    return at_or_before[-1] if at_or_before else None


def _batch_check(log: CheckpointLog, at_batch: int | None) -> int:
    """The batch to read, checked against what the checkpoint holds."""
    if not log.exists():
        raise ConfigurationError(f"checkpoint {log.uri} does not exist")
    last = log.last_committed()
    if last is None:
        raise ConfigurationError(f"checkpoint {log.uri} has no committed batch yet")
    if at_batch is None:
        return last
    if at_batch < 0 or at_batch > last:
        raise ConfigurationError(
            f"--at-batch {at_batch}: checkpoint {log.uri} has committed batches up to {last}"
        )
    return at_batch


def format_session(snapshot: StateSnapshot, view: SessionView) -> str:
    """A session's stored state and table, as ``inspect --session`` prints it."""
    s = view.state
    lines = [
        f"session {s.session} in checkpoint {snapshot.checkpoint} after batch "
        f"{snapshot.batch_id} (ends at {offsets_mod.describe(snapshot.end)})",
        f"  status          {view.status}",
        f"  topic           {view.tp.topic}",
        f"  partition       {view.tp.partition}",
        f"  last seq        {s.last_seq}",
        f"  last offset     {s.last_offset}",
        f"  last ts         {_ts(s.last_ts)}",
    ]
    if s.repeats or s.gaps:
        lines.append(f"  dropped         {s.repeats} (seq applied or passed already)")
        lines.append(f"  seqs missing    {s.gaps}")
    if s.ahead:
        lines.append(f"  applied ahead   {', '.join(map(str, sorted(s.ahead)[:20]))}")
    if s.owner is not None:
        lines.append(f"  belongs to      {s.owner} (rule 6): quarantined here")
    if s.quarantine is not None:
        lines.append(f"  quarantined     {s.quarantine}")
    what = "table" if snapshot.table else "state"
    if s.user is None:
        lines.append(f"  {what:<16}(none)" + (": the session ended" if s.closed else ""))
        return "\n".join(lines)
    if not snapshot.table:
        lines.append(
            f"  state           {snapshot.processor.name} version "
            f"{snapshot.processor.state_version}"
        )
        lines.extend("    " + line for line in _state_lines(s.user))
        return "\n".join(lines)
    lines.append(f"  table           {len(s.user)} rows")
    columns = snapshot.schema.columns
    cells = [tuple(c.output for c in columns)] + [
        tuple(_value(value) for value in row) for row in s.user.values()
    ]
    numeric = (ColumnType.INT64, ColumnType.FLOAT64, ColumnType.DECIMAL)
    right = {i for i, c in enumerate(columns) if c.type in numeric}
    lines.extend("    " + line for line in _columns(cells, right=right))
    return "\n".join(lines)


def format_summary(snapshot: StateSnapshot) -> str:
    """Every session (or the first ``limit``), as plain ``inspect`` prints it."""
    lines = [
        f"checkpoint {snapshot.checkpoint} after batch {snapshot.batch_id} "
        f"(ends at {offsets_mod.describe(snapshot.end)})",
        f"{snapshot.total:,} sessions in state: {snapshot.open:,} open, "
        f"{snapshot.closed:,} closed, {snapshot.quarantined:,} quarantined",
    ]
    if not snapshot.table:
        lines.append(
            f"processor {snapshot.processor.name} (state version "
            f"{snapshot.processor.state_version})"
        )
    if snapshot.repeats or snapshot.gaps:
        lines.append(
            f"integrity class: {snapshot.repeats:,} messages dropped, "
            f"{snapshot.gaps:,} seqs missing"
        )
    if not snapshot.sessions:
        return "\n".join(lines)
    counted = bool(snapshot.repeats or snapshot.gaps)  # the integrity class's columns
    cells = [
        ("session", "status", "topic", "partition", "last seq", "last offset", "rows")
        + (("dropped", "missing") if counted else ())
    ]
    for view in snapshot.sessions:
        s = view.state
        cells.append(
            (
                s.session,
                view.status,
                view.tp.topic,
                str(view.tp.partition),
                str(s.last_seq),
                str(s.last_offset),
                view.rows(snapshot.table),
            )
            + ((str(s.repeats), str(s.gaps)) if counted else ())
        )
    lines.extend(_columns(cells, right={3, 4, 5, 6, 7, 8}))
    if len(snapshot.sessions) < snapshot.total:
        lines.append(
            f"(the first {len(snapshot.sessions):,} of {snapshot.total:,} sessions; "
            "--limit N shows more, --session ID one in full)"
        )
    return "\n".join(lines)


def _state_lines(state: Any) -> list[str]:
    """A user's processor's state as indented JSON lines (its fields by name)."""
    import msgspec

    try:
        text = msgspec.json.format(msgspec.json.encode(state), indent=2)
    except (TypeError, msgspec.EncodeError):
        return [repr(state)]
    return text.decode().splitlines()


def _columns(cells: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in cells
    ]


def _value(value: object) -> str:
    """A stored value as the table shows it (times and dates as the output reads them)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value) if isinstance(value, Decimal | bool) else repr(value)


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
