"""Recompute the expected output from the archive and compare it with a dataset.

The expectation comes from the same partition engine the job runs
(:func:`app.engine.in_process.run_partitions`), fed each topic-partition's whole
history at once, without Spark. The comparison is DuckDB's multiset
difference over the contract's columns, so duplicates count as well as
missing rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from app import defaults
from app.contract.offsets import Offsets, TopicPartition
from app.contract.processor import Processor
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.contract.table_processor import TableProcessor
from app.engine.in_process import run_partitions
from app.engine.machine import IntegrityMode, RecordColumns, Rules
from app.engine.output import QuarantinedRecord, output_schema
from app.errors import ConfigurationError, Violation
from app.sink import ledger as ledger_mod
from app.sink import schemas
from app.sink.ledger import BATCH, Ledger, LedgerEntry, LiveRules
from app.sink.visible import visible_files
from app.sources import archive
from app.storage import Location, refusal, resolve
from app.table import damage

SLICE = 8192


@dataclass(frozen=True)
class Expected:
    rows: pa.Table
    quarantined: list[QuarantinedRecord]
    violations: list[Violation]
    messages: int
    sessions: int
    schema: TableSchema = DEFAULT_SCHEMA  # the last table schema: the rows' columns
    repeats: int = 0  # integrity classes ordered, once: messages dropped for their seq
    gaps: int = 0  # seqs skipped (ordered) or missing at sessions' ends and timeouts (once)


def expected_output(
    archive_uri: str,
    topic_pattern: str,
    mode: IntegrityMode = IntegrityMode.STRICT,
    adopt: Mapping[str, int] | None = None,
    below: Offsets | None = None,
    timeout_ms: int = defaults.SESSION_TIMEOUT_MS,
    schema: TableSchema = DEFAULT_SCHEMA,
    changes: Mapping[TopicPartition, Sequence[tuple[int, TableSchema]]] | None = None,
    processor: Processor[Any] | None = None,
    adopted: Sequence[AdoptedSnapshot] = (),
) -> Expected:
    """What the job outputs for every record of the archive (or only below ``below``),
    with the built-in processor over the table schema ``schema``, and where ``changes``
    says, from an offset on, another (:class:`RecordedSchemas`: where the live job
    restarted with one), but for the snapshots a repair kept (``adopted``), each in the
    schema it was published with; or with ``processor`` (a user's) over all of it."""
    location = archive.require_root(archive_uri)
    index = archive.scan(location, topic_pattern)
    if not index.files:
        raise ConfigurationError(
            f"archive {archive_uri} holds no topic matching {topic_pattern!r}: nothing to verify"
        )

    def read(tp: TopicPartition) -> Iterator[RecordColumns]:
        files = index.files[tp]
        for batch in archive.read_range(location, files, files[0].start, files[-1].end):
            for lo in range(0, batch.num_rows, SLICE):
                yield RecordColumns.from_arrow(batch.slice(lo, SLICE))

    built: dict[TableSchema, TableProcessor] = {}

    def table_processor(of: TableSchema) -> TableProcessor:
        return built.setdefault(of, TableProcessor(of))

    found = {tp: list(points) for tp, points in (changes or {}).items()}
    for kept in adopted:
        for tp, published in kept.schemas.items():
            if _session_at(location, index.files.get(tp, []), kept.offset) == kept.session:
                found[tp] = _kept(found.get(tp, []), schema, kept.offset, published)
    switches = {
        tp: [(offset, table_processor(changed)) for offset, changed in points]
        for tp, points in found.items()
    }
    outcome = run_partitions(
        sorted(index.files),
        read,
        processor or table_processor(schema),
        Rules(mode, timeout_ms, dict(adopt or {})),
        {} if processor is not None else switches,
    )
    rows = outcome.rows()
    if below is not None:
        rows = rows.filter(_below(rows, below))
    sessions = {s for state in outcome.states.values() for s in state.sessions}
    sessions |= {d.session for r in outcome.results.values() for d in r.dropped}
    return Expected(
        rows,
        outcome.quarantined,
        outcome.violations,
        outcome.messages,
        len(sessions),
        outcome.schema,
        outcome.repeats,
        outcome.gaps,
    )


def recorded_rules(output_uri: str, given: IntegrityMode | None) -> LiveRules:
    """The rules the live job ran with, as the newest batch of its ledger records them
    (strict and the default timeout where it records none); ``given`` only confirms them:
    another mode would make a right output look wrong, so it is refused in one line."""
    location = resolve(output_uri)
    entries = Ledger(location).entries() if location.exists(location.path) else []
    recorded = next(
        (e.rules for e in reversed(entries) if e.kind is BATCH and e.rules is not None), None
    )
    if recorded is None:
        return LiveRules(given or IntegrityMode.STRICT, defaults.SESSION_TIMEOUT_MS)
    if given is not None and given is not recorded.mode:
        raise ConfigurationError(
            f"--integrity {given.value} differs from the live job's integrity "
            f"{recorded.mode.value}, which the ledger of {output_uri} records: leave "
            "--integrity out to verify with the live job's"
        )
    return recorded


def _below(rows: pa.Table, end: Offsets) -> pa.ChunkedArray:
    keep = pc.equal(pa.repeat(pa.scalar(True), len(rows)), False)
    for tp, offset in end.items():
        here = pc.and_(pc.equal(rows["topic"], tp.topic), pc.equal(rows["partition"], tp.partition))
        keep = pc.or_(keep, pc.and_(here, pc.less(rows["offset"], offset)))
    return keep


@dataclass(frozen=True)
class Comparison:
    expected_rows: int
    actual_rows: int
    missing: int  # expected, not in the output
    unexpected: int  # in the output, not expected
    duplicates: int  # rows present more often than once
    sample_missing: list[tuple[object, ...]]
    sample_unexpected: list[tuple[object, ...]]
    columns: tuple[str, ...] = ()  # the samples' columns

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.unexpected == 0 and self.duplicates == 0

    def report(self) -> str:
        lines = [
            f"expected rows:   {self.expected_rows:>12,}",
            f"output rows:     {self.actual_rows:>12,}",
            f"missing rows:    {self.missing:>12,}",
            f"unexpected rows: {self.unexpected:>12,}",
            f"duplicate rows:  {self.duplicates:>12,}",
        ]
        for label, sample in (
            ("missing", self.sample_missing),
            ("unexpected", self.sample_unexpected),
        ):
            for row in sample:
                lines.append(f"  {label}: {describe_row(self.columns, row)}")
        lines.append("OK: the output is exactly the expected output" if self.ok else "DIFFERENT")
        return "\n".join(lines)


# Where a row came from: every other column is a declared one, shown as name=value.
_PROVENANCE = ("topic", "partition", "offset", "session", "seq", "type", "ts", "deleted")


def describe_row(columns: Sequence[str], row: tuple[object, ...]) -> str:
    """An output row as a person reads it: where it came from, then its declared columns."""
    values = dict(zip(columns, row, strict=True))
    ts = values.get("ts")
    when = ts.isoformat().replace("+00:00", "Z") if isinstance(ts, datetime) else ts
    declared = " ".join(
        f"{c}={'null' if values[c] is None else values[c]}" for c in columns if c not in _PROVENANCE
    )
    return (
        f"{values['topic']}:{values['partition']} offset {values['offset']} "
        f"session {values['session']} seq {values['seq']} {values['type']} at {when}: "
        f"{declared}" + (" (deleted)" if values.get("deleted") else "")
    )


@dataclass(frozen=True)
class AdoptedSnapshot:
    """A session a repair adopted: the resync snapshot it began again with, at ``offset``,
    kept the rows a batch before the repair published, computed with that batch's table
    schema (``schemas``: per partition, the schema of the batch that published ``offset``
    there; the session's partition is the one whose record at ``offset`` is its)."""

    session: str
    offset: int
    schemas: Mapping[TopicPartition, TableSchema]


@dataclass(frozen=True)
class RecordedSchemas:
    """The table schemas the output's ledger records its ranges with (each entry's
    ``schema``): what :func:`expected_output` needs to compute it again."""

    first: TableSchema  # the first batch's
    # Per partition, each offset from which its batches ran with another schema.
    changes: dict[TopicPartition, list[tuple[int, TableSchema]]]
    # The snapshots the output's repairs kept, each with the schemas it may have been
    # published with: a run after the repair, whatever its schema, adds no row for them.
    adopted: list[AdoptedSnapshot]


def recorded_schemas(uri: str) -> RecordedSchemas:
    """The output's :class:`RecordedSchemas`, in one pass over its ledger."""
    location = resolve(uri)
    entries = Ledger(location).entries() if location.exists(location.path) else []
    loaded: dict[str | None, TableSchema] = {}  # one read per schema, not per entry

    def of_entry(entry: LedgerEntry) -> TableSchema:
        if entry.schema not in loaded:
            loaded[entry.schema] = schemas.of_entry(location, entry)
        return loaded[entry.schema]

    first: TableSchema | None = None
    held: dict[TopicPartition, str] = {}
    changes: dict[TopicPartition, list[tuple[int, TableSchema]]] = {}
    spans: dict[TopicPartition, list[tuple[int, int, LedgerEntry]]] = {}
    adopted: list[AdoptedSnapshot] = []
    previous: LedgerEntry | None = None
    for entry in entries:
        if entry.kind is BATCH:
            schema = of_entry(entry)
            first = first or schema
            for tp, (start, end) in sorted(entry.ranges(previous).items()):
                if held.get(tp, first.digest) != schema.digest:
                    changes.setdefault(tp, []).append((start, schema))
                held[tp] = schema.digest
                spans.setdefault(tp, []).append((start, end, entry))
        elif entry.kind is ledger_mod.REPAIR:
            for session, offset in sorted(entry.adopt.items()):
                published = {
                    tp: next(b for a, z, b in reversed(found) if a <= offset < z)
                    for tp, found in spans.items()
                    if any(a <= offset < z for a, z, _ in found)
                }
                kept = {tp: of_entry(b) for tp, b in published.items()}
                adopted.append(AdoptedSnapshot(session, offset, kept))
        previous = entry
    return RecordedSchemas(first or output_table_schema(uri), changes, adopted)


def _session_at(location: Location, files: Sequence[archive.ArchiveFile], offset: int) -> str:
    """The session of the record at ``offset`` ("" where the archive holds none)."""
    covering = [f for f in files if f.start <= offset < f.end]
    for batch in archive.read_range(location, covering, offset, offset + 1):
        for key in batch.column("key").to_pylist():
            return bytes(key).decode("utf-8", "replace")
    return ""


def _kept(
    points: list[tuple[int, TableSchema]], first: TableSchema, at: int, published: TableSchema
) -> list[tuple[int, TableSchema]]:
    """``points`` (where a partition goes on with another schema) with the message at ``at``
    read in the schema its kept rows were ``published`` with, and the next in the one the
    points say."""
    current = first
    for offset, schema in points:
        if offset <= at:
            current = schema
    if current == published:
        return points
    after = [(o, s) for o, s in points if o > at]
    resume = [] if after and after[0][0] == at + 1 else [(at + 1, current)]
    return [*[(o, s) for o, s in points if o < at], (at, published), *resume, *after]


def output_table_schema(uri: str) -> TableSchema:
    """The table schema the output's ledger names last (the default without a ledger)."""
    location = resolve(uri)
    found = schemas.current(location) if location.exists(location.path) else None
    return found or DEFAULT_SCHEMA


def read_output(
    uri: str,
    *,
    required: bool = False,
    schema: TableSchema | None = None,
    archive: str | None = None,
) -> pa.Table:
    """The output dataset as any pyarrow reader sees it (hidden names skipped), given the
    output's schema (``schema``, else the one its ledger names last): files written before
    a column was added read it as null.

    ``required``: a missing or empty output is an error (``verify``), not an
    empty table. A file that cannot be read is a
    :class:`~app.errors.DamagedOutputError` naming it and the replay that mends
    it (``archive``: the replay's, where known).
    """
    location = resolve(uri)
    wanted = output_schema(schema or output_table_schema(uri))
    if not location.exists(location.path):
        if required:
            raise ConfigurationError(f"output {uri} does not exist")
        return wanted.empty_table()
    try:
        with location.refusing(location.path, "read"):
            dataset = ds.dataset(
                location.path,
                filesystem=location.fs,
                format="parquet",
                partitioning="hive",
                schema=wanted,
            )
            if not dataset.files:
                if required:
                    raise ConfigurationError(
                        f"output {uri} holds no Parquet file: nothing to verify"
                    )
                return wanted.empty_table()
            table = dataset.to_table(columns=wanted.names)
    except damage.UNREADABLE as exc:
        if isinstance(exc, OSError) and refusal(exc) is not None:
            raise
        _name_the_damaged(location, archive, wanted)
        raise
    return table.cast(wanted)


def _name_the_damaged(location: Location, archive: str | None, wanted: pa.Schema) -> None:
    """Read the dataset's files one by one: the first that cannot be read is named."""
    for relative in visible_files(location):
        if not relative.startswith("_quarantine/"):
            damage.read_published(location, relative, schema=wanted, archive=archive)


def compare(expected: pa.Table, actual: pa.Table, sample: int = 5) -> Comparison:
    """The multiset difference over the expectation's columns."""
    con = duckdb.connect()
    con.register("expected_rows", expected)
    con.register("actual_rows", actual.select(expected.column_names))
    cols = ", ".join(f'"{c}"' for c in expected.column_names)

    def count(sql: str) -> int:
        found = con.execute(sql).fetchone()
        return int(found[0]) if found and found[0] is not None else 0

    missing_sql = f"SELECT {cols} FROM expected_rows EXCEPT ALL SELECT {cols} FROM actual_rows"
    unexpected_sql = f"SELECT {cols} FROM actual_rows EXCEPT ALL SELECT {cols} FROM expected_rows"
    duplicates = count(
        f"SELECT sum(n - 1) FROM (SELECT count(*) AS n FROM actual_rows GROUP BY {cols}) "
        "WHERE n > 1"
    )
    return Comparison(
        expected_rows=len(expected),
        actual_rows=len(actual),
        missing=count(f"SELECT count(*) FROM ({missing_sql})"),
        unexpected=count(f"SELECT count(*) FROM ({unexpected_sql})"),
        duplicates=duplicates,
        sample_missing=[tuple(r) for r in con.execute(f"{missing_sql} LIMIT {sample}").fetchall()],
        sample_unexpected=[
            tuple(r) for r in con.execute(f"{unexpected_sql} LIMIT {sample}").fetchall()
        ],
        columns=tuple(expected.column_names),
    )
