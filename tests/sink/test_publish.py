"""Publishing a table computed on the driver: staged, then moved; the same name replaces."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from app.engine.output import OUTPUT_SCHEMA
from app.sink.publish import publish_rows
from app.tools import verify

DAY1 = int(datetime(2026, 3, 1, 10, tzinfo=UTC).timestamp() * 1000)
DAY2 = int(datetime(2026, 3, 2, 10, tzinfo=UTC).timestamp() * 1000)


def _table(values: list[float], stamps: list[int]) -> pa.Table:
    n = len(values)
    return pa.table({
        "topic": ["sensor-1"] * n, "partition": [0] * n, "offset": list(range(n)),
        "session": ["s1"] * n, "seq": list(range(n)), "type": ["update"] * n, "ts": stamps,
        "row_id": [f"r{i}" for i in range(n)], "value": values, "status": [None] * n,
        "deleted": [False] * n,
    }, schema=OUTPUT_SCHEMA)  # fmt: skip


def _files(output: Path) -> list[str]:
    return sorted(p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file())


def test_publish_moves_each_days_file_into_place_and_leaves_no_staging(tmp_path: Path) -> None:
    output = tmp_path / "out"
    table = _table([1.0, 2.0, 3.0], [DAY1, DAY2, DAY1])
    assert publish_rows(str(output), table, "replay-a") == 2
    assert _files(output) == [
        "date=2026-03-01/part-replay-a.parquet", "date=2026-03-02/part-replay-a.parquet"
    ]  # fmt: skip
    read = verify.read_output(str(output)).sort_by("offset")
    assert read.equals(table)


def test_publishing_the_same_name_again_replaces_never_adds(tmp_path: Path) -> None:
    output = tmp_path / "out"
    publish_rows(str(output), _table([1.0, 2.0], [DAY1, DAY1]), "replay-a")
    publish_rows(str(output), _table([5.0, 6.0], [DAY1, DAY1]), "replay-a")
    publish_rows(str(output), _table([9.0], [DAY2]), "replay-b")
    assert _files(output) == [
        "date=2026-03-01/part-replay-a.parquet", "date=2026-03-02/part-replay-b.parquet"
    ]  # fmt: skip
    read = verify.read_output(str(output)).sort_by([("ts", "ascending"), ("offset", "ascending")])
    assert read["value"].to_pylist() == [5.0, 6.0, 9.0]
