"""Staging a partition's rows: one file per UTC day, rows in their order, names from the range."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from app.engine.output import OUTPUT_SCHEMA, QUARANTINE_SCHEMA, QuarantinedRecord, quarantine_table
from app.engine.reports import StagedFile
from app.engine.writer import (
    QUARANTINE_DIR,
    DayLayout,
    record_layout,
    stage_table,
    write_data_file,
)
from app.storage import Location, resolve
from tests.hdfs_semantics import RecordingHandler

STAGING = "_tablecast/staging/k1"
NAME = "sensor-1-0-00000000000000000100-00000000000000000200-000"


def _ms(text: str) -> int:
    """Milliseconds since the epoch of a UTC time (exact, before 1970 too)."""
    since = datetime.fromisoformat(text).replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return since // timedelta(milliseconds=1)


def _rows(stamps: list[str]) -> pa.Table:
    """One output row per timestamp, at offsets 100, 101, ... (the order they arrive in)."""
    n = len(stamps)
    columns: dict[str, list[Any]] = {
        "topic": ["sensor-1"] * n,
        "partition": [0] * n,
        "offset": list(range(100, 100 + n)),
        "session": ["s1"] * n,
        "seq": list(range(n)),
        "type": ["update"] * n,
        "ts": [_ms(s) * 1000 for s in stamps],  # microseconds
        "row_id": [f"r{i}" for i in range(n)],
        "value": [float(i) for i in range(n)],
        "status": ["ok"] * n,
        "deleted": [False] * n,
    }
    return pa.table(columns, schema=OUTPUT_SCHEMA)


def _read(path: Path) -> pa.Table:
    """The file alone (pq.read_table would add the date=... folder as a column)."""
    return pq.ParquetFile(path).read()


def test_one_file_per_utc_day_rows_in_their_order(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    stamps = [
        "2026-03-01T23:59:59.999",  # offset 100
        "2026-03-02T00:00:00.000",  # 101: the next day starts at midnight UTC
        "2026-03-01T12:00:00.000",  # 102: late, back on the first day
        "2026-03-04T08:00:00.000",  # 103: a day without rows in between
        "2026-03-02T06:30:00.000",  # 104
    ]
    staged = stage_table(location, STAGING, "", _rows(stamps), "ts", NAME)

    day1 = f"date=2026-03-01/part-{NAME}.parquet"
    day2 = f"date=2026-03-02/part-{NAME}.parquet"
    day4 = f"date=2026-03-04/part-{NAME}.parquet"
    assert [(s.path, s.rows, s.quarantine) for s in staged] == [
        (day1, 2, False),
        (day2, 2, False),
        (day4, 1, False),
    ]
    base = tmp_path / "out" / STAGING
    for item in staged:
        assert item.bytes == (base / item.path).stat().st_size > 0
    offsets = {p: _read(base / p)["offset"].to_pylist() for p in (day1, day2, day4)}
    assert offsets == {day1: [100, 102], day2: [101, 104], day4: [103]}
    # Nothing outside the staging directory: readers see nothing yet.
    written = sorted(p.relative_to(base).as_posix() for p in (tmp_path / "out").rglob("*.parquet"))
    assert written == [day1, day2, day4]


def test_the_files_keep_the_output_schema_and_are_snappy(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    table = _rows(["2026-03-01T10:00:00", "2026-03-01T11:00:00"])
    (item,) = stage_table(location, STAGING, "", table, "ts", NAME)
    path = tmp_path / "out" / STAGING / item.path
    assert pq.read_schema(path).equals(OUTPUT_SCHEMA)
    group = pq.ParquetFile(path).metadata.row_group(0)
    chunks = [group.column(i) for i in range(group.num_columns)]
    assert {chunk.compression for chunk in chunks} == {"SNAPPY"}
    # A message's offset and time are written plain, every other column with a dictionary
    # (Parquet keeps booleans plain).
    dictionary = {chunk.path_in_schema for chunk in chunks if chunk.has_dictionary_page}
    booleans = {f.name for f in OUTPUT_SCHEMA if pa.types.is_boolean(f.type)}
    assert dictionary == set(OUTPUT_SCHEMA.names) - {"offset", "ts"} - booleans
    # Another process and another library than the writer: DuckDB's own reader.
    script = (
        "import duckdb, json, sys\n"
        "con = duckdb.connect()\n"
        "rel = con.sql(f\"SELECT * FROM read_parquet('{sys.argv[1]}', hive_partitioning=false)\")\n"
        "rows = [[str(v) for v in r] for r in rel.order('\"offset\"').fetchall()]\n"
        "print(json.dumps({'columns': rel.columns, 'types': [str(t) for t in rel.types], "
        "'rows': rows}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    seen = json.loads(done.stdout)
    assert seen["columns"] == list(OUTPUT_SCHEMA.names)
    assert seen["types"] == [
        "VARCHAR",
        "INTEGER",
        "BIGINT",
        "VARCHAR",
        "BIGINT",
        "VARCHAR",
        "TIMESTAMP WITH TIME ZONE",
        "VARCHAR",
        "DOUBLE",
        "VARCHAR",
        "BOOLEAN",
    ]
    assert [r[2] for r in seen["rows"]] == ["100", "101"]
    assert [r[7] for r in seen["rows"]] == table["row_id"].to_pylist()
    assert [float(r[8]) for r in seen["rows"]] == table["value"].to_pylist()


def test_a_redo_writes_the_same_names_and_bytes(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    table = _rows(["2026-03-01T10:00:00", "2026-03-02T11:00:00"])

    def digests(staged: list[StagedFile]) -> dict[str, str]:
        base = tmp_path / "out" / STAGING
        return {s.path: hashlib.sha256((base / s.path).read_bytes()).hexdigest() for s in staged}

    first = digests(stage_table(location, STAGING, "", table, "ts", NAME))
    again = digests(stage_table(location, STAGING, "", table, "ts", NAME))
    assert first == again and len(first) == 2


def test_quarantine_files_go_under_their_own_directory(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    records = [
        QuarantinedRecord("sensor-1", 0, offset, "s1", seq, kind, ts, _ms(stamp), "rule 1", b"x")
        for offset, seq, kind, ts, stamp in [
            (7, 3, "update", _ms("2026-03-01T09:59:59"), "2026-03-01T10:00:00"),
            (8, None, None, None, "2026-03-03T10:00:00"),  # a value that could not be read
        ]
    ]
    table = quarantine_table(records)
    staged = stage_table(location, STAGING, QUARANTINE_DIR, table, "timestamp", NAME)
    assert [(s.path, s.rows, s.quarantine) for s in staged] == [
        (f"_quarantine/date=2026-03-01/part-{NAME}.parquet", 1, True),
        (f"_quarantine/date=2026-03-03/part-{NAME}.parquet", 1, True),
    ]
    first = tmp_path / "out" / STAGING / staged[0].path
    assert pq.read_schema(first).equals(QUARANTINE_SCHEMA)
    # Named as the output's where they mean the same: `ts` is the message's own time.
    assert QUARANTINE_SCHEMA.field("ts").type == OUTPUT_SCHEMA.field("ts").type
    times = [pq.read_table(tmp_path / "out" / STAGING / s.path, columns=["ts"]) for s in staged]
    assert [t["ts"][0].as_py() for t in times] == [
        datetime(2026, 3, 1, 9, 59, 59, tzinfo=UTC),
        None,
    ]


def test_no_rows_no_file(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    assert stage_table(location, STAGING, "", OUTPUT_SCHEMA.empty_table(), "ts", NAME) == []
    assert not (tmp_path / "out").exists()


# Days on both sides of the epoch, a millisecond apart at it, given out of order.
STAMPS = [
    "1969-12-31T23:59:59.999",
    "1970-01-01T00:00:00.000",
    "2026-03-02T06:30:00",
    "1969-12-30T00:00:00.000",
]


@pytest.mark.parametrize(
    ("layout", "directory"),
    [(None, "date={}"), (DayLayout.DATE_COLUMN, "{}")],
    ids=["no layout recorded", "date column"],
)
def test_a_timestamp_before_the_epoch_is_in_its_own_day(
    tmp_path: Path, layout: DayLayout | None, directory: str
) -> None:
    location = resolve(str(tmp_path / "out"))
    if layout is not None:
        record_layout(location, layout)
    staged = stage_table(location, STAGING, "", _rows(STAMPS), "ts", NAME)
    assert [(s.path, s.rows) for s in staged] == [
        (f"{directory.format(day)}/part-{NAME}.parquet", 1)
        for day in ("1969-12-30", "1969-12-31", "1970-01-01", "2026-03-02")
    ]


@pytest.mark.parametrize("hdfs", [False, True], ids=["local", "hdfs-rename"])
def test_staged_files_appear_whole_under_their_names_and_a_redo_keeps_them_in_place(
    tmp_path: Path, hdfs: bool
) -> None:
    handler = RecordingHandler(hdfs_rename=hdfs)
    root = str(tmp_path / "out")
    location = Location(
        root, pafs.PyFileSystem(handler), root, is_local=not hdfs, atomic_rename=hdfs
    )
    table = _rows(["2026-03-01T10:00:00", "2026-03-02T11:00:00"])
    first = stage_table(location, STAGING, "", table, "ts", NAME)
    # Written under a hidden temporary name, then renamed: never seen half written.
    assert handler.written_in_place() == []
    handler.log.clear()
    again = stage_table(location, STAGING, "", table, "ts", NAME)  # a retried task
    assert again == first
    # The names never vanish: no visible file was deleted to make room.
    deleted = [p for op, p in handler.log if op == "delete"]
    assert [p for p in deleted if not os.path.basename(p).startswith(".")] == []
    for item in first:
        assert pq.read_table(tmp_path / "out" / STAGING / item.path, partitioning=None).equals(
            table.filter(
                pc.equal(
                    pc.strftime(table["ts"], "%Y-%m-%d"),
                    item.path.split("/")[0].removeprefix("date="),
                )
            )
        )


def test_an_hdfs_replace_of_a_visible_file_never_removes_its_name(tmp_path: Path) -> None:
    handler = RecordingHandler(hdfs_rename=True)
    root = str(tmp_path / "out")
    location = Location(root, pafs.PyFileSystem(handler), root, is_local=False, atomic_rename=True)
    target = location.child("_tablecast", "ledger", "00000000000000000001.json")
    location.write_bytes_atomic(target, b"entry")
    handler.log.clear()
    location.write_bytes_atomic(target, b"entry")  # redone: the same bytes
    assert [op for op, p in handler.log if p == target or p.endswith(f"-> {target}")] == []
    assert location.read_bytes(target) == b"entry"


def test_the_date_column_layout_holds_the_day_in_directory_and_column(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    record_layout(location, DayLayout.DATE_COLUMN)
    # Its directories: test_a_timestamp_before_the_epoch_is_in_its_own_day[date column].
    staged = stage_table(location, STAGING, "", _rows(STAMPS), "ts", NAME)
    assert len(staged) == 4
    base = tmp_path / "out" / STAGING
    for item in staged:
        written = _read(base / item.path)
        assert written.schema.equals(OUTPUT_SCHEMA.append(pa.field("date", pa.date32(), False)))
        day = date.fromisoformat(item.path.split("/")[0])
        assert written["date"].to_pylist() == [day]
        assert pc.strftime(written["ts"], "%Y-%m-%d").to_pylist() == [day.isoformat()]
    # The quarantine is laid out alike.
    record = QuarantinedRecord("sensor-1", 0, 7, "s1", 3, "update", 0, 1000, "bad", b"{}")
    (held,) = stage_table(
        location, STAGING, QUARANTINE_DIR, quarantine_table([record]), "timestamp", NAME
    )
    assert held.path == f"_quarantine/1970-01-01/part-{NAME}.parquet"
    assert _read(base / held.path)["date"].to_pylist() == [date(1970, 1, 1)]


def _dataset_day_types(root: Path) -> tuple[str, str]:
    """How pyarrow's hive dataset and DuckDB's hive reader type ``date`` (or their error)."""
    try:
        found = ds.dataset(str(root), format="parquet", partitioning="hive").schema
        arrow = str(found.field("date").type)
    except pa.ArrowTypeError as exc:
        arrow = f"error: {exc}"
    con = duckdb.connect()
    try:
        glob = str(root / "*" / "*.parquet")
        duck = str(
            con.execute(
                f"SELECT typeof(date) FROM read_parquet('{glob}', hive_partitioning=true, "
                "union_by_name=true) LIMIT 1"
            ).fetchone()
        )
    except duckdb.BinderException as exc:
        duck = f"error: {exc}"
    finally:
        con.close()
    return arrow, duck


def test_readers_refuse_a_day_in_both_places(tmp_path: Path) -> None:
    """Why an output made in ``date=<day>/`` keeps that layout (docs/design.md, "The day of a
    row"): the readers open a dataset of one layout, not the alternatives."""
    table = _rows(["2026-03-01T10:00:00"])
    location = resolve(str(tmp_path))

    def write(root: str, relative: str, with_date: bool) -> None:
        schema = OUTPUT_SCHEMA
        rows = table
        if with_date:
            schema = schema.append(pa.field("date", pa.date32(), False))
            rows = rows.append_column("date", pa.array([date(2026, 3, 1)], pa.date32()))
        write_data_file(location, location.child(root, relative), rows, schema)

    write("hive", "date=2026-03-01/part-a.parquet", False)
    write("column", "2026-03-01/part-a.parquet", False)  # the directory adds the column
    write("both", "date=2026-03-01/part-a.parquet", True)
    write("mixed", "date=2026-03-01/part-a.parquet", False)
    write("mixed", "2026-03-02/part-a.parquet", False)
    assert _dataset_day_types(tmp_path / "hive") == ("string", "('DATE',)")
    assert _dataset_day_types(tmp_path / "column") == ("date32[day]", "('DATE',)")
    arrow, _ = _dataset_day_types(tmp_path / "both")
    assert arrow.startswith("error: Unable to merge: Field date has incompatible types")
    arrow, duck = _dataset_day_types(tmp_path / "mixed")
    assert arrow.startswith("error: Unable to merge: Field date has incompatible types")
    assert duck.startswith("error: Binder Error: Hive partition mismatch")
