"""Recompute the expected output from the archive and compare it with a dataset.

The expectation comes from the same :class:`app.session.SessionMachine` the
job runs, fed each session's whole history at once, without Spark. The
comparison is DuckDB's multiset difference over the contract's columns, so
duplicates count as well as missing rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from app.contract import Record
from app.errors import Violation
from app.processor import OutputRow, TableProcessor
from app.session import IntegrityMode, QuarantinedRecord, SessionMachine
from app.sink.writer import OUTPUT_SCHEMA
from app.sources import archive
from app.storage import resolve

COLUMNS = OUTPUT_SCHEMA.names


@dataclass(frozen=True)
class Expected:
    rows: pa.Table
    quarantined: list[QuarantinedRecord]
    violations: list[Violation]
    messages: int
    sessions: int


@dataclass(frozen=True)
class Comparison:
    expected_rows: int
    actual_rows: int
    missing: int  # expected, not in the output
    unexpected: int  # in the output, not expected
    duplicates: int  # rows present more often than once
    sample_missing: list[tuple[object, ...]]
    sample_unexpected: list[tuple[object, ...]]

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
                lines.append(f"  {label}: {row}")
        lines.append("OK: the output is exactly the expected output" if self.ok else "DIFFERENT")
        return "\n".join(lines)


def read_archive(uri: str, topic_pattern: str) -> dict[bytes | None, list[Record]]:
    """Every record of the archive, grouped by key (session)."""
    location = resolve(uri)
    index = archive.scan(location, topic_pattern)
    groups: dict[bytes | None, list[Record]] = defaultdict(list)
    for _, files in sorted(index.files.items()):
        for record in archive.iter_records(location, files, files[0].start, files[-1].end):
            groups[record.key].append(record)
    return groups


def expected_output(
    groups: dict[bytes | None, list[Record]],
    mode: IntegrityMode = IntegrityMode.STRICT,
    adopt: dict[str, int] | None = None,
    keep: Callable[[OutputRow], bool] | None = None,
) -> Expected:
    machine = SessionMachine(TableProcessor(), mode, adopt)
    rows: list[OutputRow] = []
    quarantined: list[QuarantinedRecord] = []
    violations: list[Violation] = []
    messages = 0
    for key in sorted(groups, key=lambda k: b"" if k is None else k):
        result = machine.apply(key, None, groups[key])
        rows.extend(r for r in result.rows if keep is None or keep(r))
        quarantined.extend(result.quarantined)
        violations.extend(result.violations)
        messages += result.messages
    return Expected(rows_table(rows), quarantined, violations, messages, len(groups))


def rows_table(rows: Iterable[OutputRow]) -> pa.Table:
    columns: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) or [() for _ in COLUMNS]
    arrays = {name: list(values) for name, values in zip(COLUMNS, columns, strict=True)}
    table = pa.table(
        {
            **{k: v for k, v in arrays.items() if k != "ts"},
            "ts": pa.array(arrays["ts"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        }
    )
    return table.select(COLUMNS).cast(OUTPUT_SCHEMA)


def read_output(uri: str) -> pa.Table:
    """The output dataset as any pyarrow reader sees it (hidden names skipped)."""
    location = resolve(uri)
    if not location.exists(location.path):
        return OUTPUT_SCHEMA.empty_table()
    dataset = ds.dataset(
        location.path, filesystem=location.fs, format="parquet", partitioning="hive"
    )
    if not dataset.files:
        return OUTPUT_SCHEMA.empty_table()
    table = dataset.to_table(columns=COLUMNS)
    return table.cast(OUTPUT_SCHEMA)


def compare(expected: pa.Table, actual: pa.Table, sample: int = 5) -> Comparison:
    con = duckdb.connect()
    con.register("expected_rows", expected)
    con.register("actual_rows", actual)
    cols = ", ".join(f'"{c}"' for c in COLUMNS)

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
    )
