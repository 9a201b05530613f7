"""Task-side half of the sink: write a partition's rows as hidden, staged files.

Runs inside each partition task (:mod:`app.engine.task`). File names derive
from the topic-partition and the offset range the task processed, and the
rows arrive in offset order, so a micro-batch that is redone after a crash
stages the same files under the same names; the commit protocol
(:mod:`app.sink.commit`) publishes them.
"""

from __future__ import annotations

import posixpath
from datetime import date, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.engine.reports import StagedFile
from app.sink.ledger import CONTROL_DIR
from app.storage import Location

QUARANTINE_DIR = "_quarantine"
_MS_PER_DAY = 86_400_000
_EPOCH = date(1970, 1, 1)


def stage_table(
    location: Location,
    staging_dir: str,
    subdir: str,
    table: pa.Table,
    time_column: str,
    name: str,
    compression: str = "snappy",
) -> list[StagedFile]:
    """Write ``table`` under ``staging_dir`` as ``<subdir>/date=<day>/part-<name>.parquet``.

    One file per day of ``time_column`` (UTC), rows kept in their order.
    """
    if not len(table):
        return []
    # Whole UTC days since the epoch: integer arithmetic, not a date string per row.
    # Floor division: a time before 1970 belongs to the day before, not to day 0.
    ms = table.column(time_column).cast(pa.int64()).to_numpy()
    days = pa.array(np.floor_divide(ms, _MS_PER_DAY))
    found = sorted(pc.unique(days).to_pylist())
    staged: list[StagedFile] = []
    for number in found:
        day = table if len(found) == 1 else table.filter(pc.equal(days, number))
        date = (_EPOCH + timedelta(days=number)).isoformat()
        relative = posixpath.join(subdir, f"date={date}", f"part-{name}.parquet")
        path = location.child(staging_dir, relative)
        location.fs.create_dir(posixpath.dirname(path), recursive=True)
        pq.write_table(day, path, filesystem=location.fs, compression=compression,
                       row_group_size=256 * 1024)  # fmt: skip
        size = location.fs.get_file_info(path).size
        staged.append(StagedFile(relative, len(day), size, subdir == QUARANTINE_DIR))
    return staged


def visible_files(location: Location) -> list[str]:
    """Every data file a reader sees, dataset and quarantine (paths relative)."""
    out: list[str] = []
    for info in location.list_tree(location.path):
        relative = posixpath.relpath(info.path, location.path)
        parts = relative.split("/")
        if not relative.endswith(".parquet") or any(p.startswith(".") for p in parts):
            continue
        if parts[0] == CONTROL_DIR or any(p.startswith("_") for p in parts if p != QUARANTINE_DIR):
            continue
        out.append(relative)
    return sorted(out)
