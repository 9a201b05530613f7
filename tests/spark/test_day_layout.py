"""The day of a row as every reader types it: a new output's ``<day>/`` files with a ``date``
column read as a date by pyarrow's hive dataset, DuckDB, Spark, pyiceberg and DuckDB's iceberg
extension; an output made before keeps ``date=<day>/`` across a restart, its table evolving;
and the table's schema requires exactly the columns that are never null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DateType

from app.engine.output import METADATA_NAMES
from app.engine.writer import LAYOUT_FILE, DayLayout, layout_of, record_layout
from app.sink.visible import visible_files
from app.storage import resolve
from app.table.catalog import threads_released
from app.tools import generate as gen
from app.tools import verify
from tests.spark.helpers import (
    KEYED_BY_SITE_AND_ID,
    PATTERN,
    copy_files,
    declared_schema,
    run_job,
    write_capture,
)
from tests.table.helpers import duckdb_table_rows, load_table

pytestmark = pytest.mark.spark

BEFORE = (
    KEYED_BY_SITE_AND_ID
    + """\
alarm   = "bool"
reading = { type = "float64", nullable = true }
"""
)
AFTER = BEFORE + 'extra   = { type = "int64", nullable = true }\n'


def _run_in_halves(spark: Any, root: Path, output: Path, *, made_before: bool) -> None:
    """The first half of a capture with BEFORE, the rest with AFTER (a column added).
    ``made_before``: the first half writes as a job did before outputs recorded their
    layout (``date=<day>/``, no record left)."""
    before, before_path = declared_schema(BEFORE, "before.toml", root)
    after, after_path = declared_schema(AFTER, "after.toml", root)
    full, archive, checkpoint = root / "full", root / "archive", root / "ckpt"
    if not full.exists():
        spec = gen.CaptureSpec(
            topics=1,
            partitions=2,
            sessions=6,
            rows_min=3,
            rows_max=8,
            updates=30,
            resync_every=9,
            records_per_file=25,
            schema=after,
            start_ms=gen.START_MS - 3_000,  # 3 s before 2026-01-01: rows on two days
        )
        write_capture(full, spec)
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) < 50)
    location = resolve(str(output))
    if made_before:
        location.fs.create_dir(location.path, recursive=True)
        record_layout(location, DayLayout.HIVE_KEY)
    run_job(spark, archive, output, checkpoint, schema=before, schema_document=before_path)
    if made_before:
        (output / LAYOUT_FILE).unlink()
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) >= 50)
    run_job(spark, archive, output, checkpoint, schema=after, schema_document=after_path)
    assert verify.compare(
        verify.expected_output(
            str(full), PATTERN, schema=before, changes=verify.recorded_schemas(str(output)).changes
        ).rows,
        verify.read_output(str(output)),
    ).ok


def _duckdb_day_types(output: Path) -> set[str]:
    con = duckdb.connect()
    try:
        glob = str(output / "*" / "*.parquet")  # the day directories, either layout
        found = con.execute(
            f"SELECT DISTINCT typeof(date) FROM read_parquet('{glob}', hive_partitioning=true, "
            "union_by_name=true)"
        ).fetchall()
    finally:
        con.close()
    return {row[0] for row in found}


def test_a_new_output_gives_every_reader_the_day_as_a_date(spark: Any, tmp_path: Path) -> None:
    output = tmp_path / "out"
    _run_in_halves(spark, tmp_path, output, made_before=False)
    location = resolve(str(output))
    assert layout_of(location) is DayLayout.DATE_COLUMN
    published = [f for f in visible_files(location) if not f.startswith("_quarantine/")]
    assert {f.split("/")[0] for f in published} == {"2025-12-31", "2026-01-01"}

    # pyarrow's hive dataset, as CONTRACT.md section 3 reads it: the files' date32 column,
    # the UTC day of each row's ts.
    rows = ds.dataset(str(output), format="parquet", partitioning="hive").to_table()
    assert rows.schema.field("date").type == pa.date32()
    days = pc.cast(pc.cast(rows["ts"], pa.timestamp("us")), pa.date32())
    assert pc.all(pc.equal(rows["date"], days)).as_py()
    assert len(pc.unique(rows["date"])) == 2
    # DuckDB, hive partitioning on or off.
    assert _duckdb_day_types(output) == {"DATE"}
    # Spark reads files below directories that are not key=value only when told to.
    frame = spark.read.option("recursiveFileLookup", "true").parquet(str(output))
    assert frame.schema["date"].dataType.typeName() == "date"
    assert frame.count() == len(rows)
    # The table's readers: a required date column, the table still partitioned by day(ts).
    table = load_table(output)
    field = table.schema().find_field("date")
    assert isinstance(field.field_type, DateType) and field.required
    (partition,) = table.spec().fields
    assert isinstance(partition.transform, DayTransform)
    with threads_released():
        scanned = table.scan().to_arrow()
    assert scanned.schema.field("date").type == pa.date32()
    assert sorted(scanned["date"].to_pylist()) == sorted(rows["date"].to_pylist())
    ducked = duckdb_table_rows(output)
    assert ducked.schema.field("date").type == pa.date32()
    assert sorted(ducked["date"].to_pylist()) == sorted(rows["date"].to_pylist())


def test_required_exactly_where_never_null(spark: Any, tmp_path: Path) -> None:
    """Metadata, key and ``date`` columns are required in the files and the table; a
    non-nullable declared column that is no key (``alarm``) is optional in both, because a
    deleted row holds null there (CONTRACT.md section 3)."""
    output = tmp_path / "out"
    _run_in_halves(spark, tmp_path, output, made_before=False)
    never_null = {*METADATA_NAMES, "site", "id", "date"}
    location = resolve(str(output))
    for relative in visible_files(location):
        if relative.startswith("_quarantine/"):
            continue
        schema = pq.read_schema(str(output / relative))
        assert {f.name for f in schema if not f.nullable} == never_null, relative
    table = load_table(output)
    assert {f.name for f in table.schema().fields if f.required} == never_null
    rows = ds.dataset(str(output), format="parquet", partitioning="hive").to_table()
    deleted = rows.filter(rows["deleted"])
    assert len(deleted) and deleted["alarm"].null_count == len(deleted)
    assert rows.filter(pc.invert(rows["deleted"]))["alarm"].null_count == 0


def test_an_output_made_before_keeps_its_layout_and_its_table_evolves(
    spark: Any, tmp_path: Path
) -> None:
    """A restart of an output written in ``date=<day>/`` carries on there: a dataset of both
    layouts is one neither pyarrow's hive dataset nor DuckDB's hive reader opens."""
    output = tmp_path / "out"
    _run_in_halves(spark, tmp_path, output, made_before=True)
    location = resolve(str(output))
    assert layout_of(location) is DayLayout.HIVE_KEY  # recorded at the restart
    published = [f for f in visible_files(location) if not f.startswith("_quarantine/")]
    assert published and all(f.startswith("date=") for f in published)
    for relative in published:
        assert "date" not in pq.read_schema(str(output / relative)).names
    # Every reader reads it as before: pyarrow's hive dataset types the day from the
    # directory (a string), DuckDB as a date.
    rows = ds.dataset(str(output), format="parquet", partitioning="hive").to_table()
    assert rows.schema.field("date").type == pa.string()
    assert _duckdb_day_types(output) == {"DATE"}
    # The table evolved (the added column) and is still partitioned by day(ts), no date.
    table = load_table(output)
    names = {f.name for f in table.schema().fields}
    assert "extra" in names and "date" not in names
    (partition,) = table.spec().fields
    assert isinstance(partition.transform, DayTransform)
    with threads_released():
        assert table.scan().to_arrow().num_rows == len(rows)
    assert duckdb_table_rows(output).num_rows == len(rows)
