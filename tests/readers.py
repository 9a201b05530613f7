"""The output as two independent readers see it: pyarrow's hive dataset and DuckDB.

Every path that writes output files (run, redo, repair, replay, correct)
must leave a dataset both open, with the same rows: one physical schema.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from app.engine.output import OUTPUT_COLUMNS, OUTPUT_SCHEMA, QUARANTINE_SCHEMA

_KEY = ", ".join(f'"{c}"' for c in OUTPUT_COLUMNS)


def read_everywhere(output: Path) -> pa.Table:
    """The dataset's rows; fails unless pyarrow (hive) and DuckDB read the same rows,
    and unless every file holds exactly its schema's columns."""
    dataset = ds.dataset(str(output), format="parquet", partitioning="hive")
    table = dataset.to_table()
    assert table.schema.remove(table.schema.get_field_index("date")) == OUTPUT_SCHEMA
    quarantine = output / "_quarantine"
    if quarantine.exists():
        held = ds.dataset(str(quarantine), format="parquet", partitioning="hive").to_table()
        assert held.schema.remove(held.schema.get_field_index("date")) == QUARANTINE_SCHEMA
    if not dataset.files:
        return table
    con = duckdb.connect()
    try:
        glob = str(output / "*" / "*.parquet")
        con.execute(
            f"CREATE VIEW duck AS SELECT * FROM read_parquet('{glob}', hive_partitioning=true)"
        )
        con.register("arrow_rows", table.select(list(OUTPUT_COLUMNS)))
        found = con.execute(
            f"SELECT (SELECT count(*) FROM duck), (SELECT count(*) FROM "
            f"(SELECT {_KEY} FROM duck EXCEPT ALL SELECT {_KEY} FROM arrow_rows)), "
            f"(SELECT count(*) FROM (SELECT {_KEY} FROM arrow_rows EXCEPT ALL "
            f"SELECT {_KEY} FROM duck))"
        ).fetchone()
    finally:
        con.close()
    assert found == (len(table), 0, 0), f"DuckDB and pyarrow disagree: {found}, {len(table)}"
    return table
