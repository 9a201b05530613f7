"""The output's files, written whole in one physical schema; a task's rows staged as hidden files.

Runs inside each partition task (:mod:`app.engine.task`); every other path
that writes output files (repair, replay, correct) writes them through
:func:`write_data_file` too. File names derive
from the topic-partition and the offset range the task processed, and the
rows arrive in offset order, so a micro-batch that is redone after a crash
stages the same files under the same names; the sink's commit protocol
(:mod:`app.sink.commit`) publishes them.
"""

from __future__ import annotations

import posixpath
from datetime import date, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.engine.output import QUARANTINE_SCHEMA
from app.engine.reports import StagedFile
from app.storage import Location

QUARANTINE_DIR = "_quarantine"
_MS_PER_DAY = 86_400_000
_EPOCH = date(1970, 1, 1)


# The physical form of every output and quarantine file, whichever path writes it.
COMPRESSION = "snappy"
ROW_GROUP_SIZE = 256 * 1024


def write_data_file(location: Location, path: str, table: pa.Table, schema: pa.Schema) -> int:
    """Write one output (or quarantine) file whole, in ``schema``; its size.

    ``schema`` is the output's (:func:`app.engine.output.output_schema` of the
    table schema the rows were computed with) or the quarantine's, never the
    ``date`` of the file's directory (readers add it). Run, redo, repair,
    replay and correct all write through here, so a hive reader merging the
    dataset meets the same physical form in every file of a table schema.
    """
    rows = table.select(schema.names).cast(schema)
    location.write_whole(
        path,
        lambda out: pq.write_table(
            rows,
            out,
            compression=COMPRESSION,
            row_group_size=ROW_GROUP_SIZE,
        ),
    )
    return int(location.fs.get_file_info(path).size)


def stage_table(
    location: Location,
    staging_dir: str,
    subdir: str,
    table: pa.Table,
    time_column: str,
    name: str,
) -> list[StagedFile]:
    """Write ``table`` under ``staging_dir`` as ``<subdir>/date=<day>/part-<name>.parquet``.

    One file per day of ``time_column`` (UTC), rows kept in their order.
    """
    if not len(table):
        return []
    quarantine = subdir == QUARANTINE_DIR
    schema = QUARANTINE_SCHEMA if quarantine else table.schema
    # Whole UTC days since the epoch: integer arithmetic, not a date string per row.
    # Floor division: a time before 1970 belongs to the day before, not to day 0.
    stamps = table.column(time_column)
    per_day = _MS_PER_DAY * (1000 if stamps.type.unit == "us" else 1)
    days = pa.array(np.floor_divide(stamps.cast(pa.int64()).to_numpy(), per_day))
    found = sorted(pc.unique(days).to_pylist())
    staged: list[StagedFile] = []
    for number in found:
        day = table if len(found) == 1 else table.filter(pc.equal(days, number))
        date = (_EPOCH + timedelta(days=number)).isoformat()
        relative = posixpath.join(subdir, f"date={date}", f"part-{name}.parquet")
        size = write_data_file(location, location.child(staging_dir, relative), day, schema)
        staged.append(StagedFile(relative, len(day), size, quarantine))
    return staged
