"""The output's files, written whole in one physical schema; a task's rows staged as hidden files.

Runs inside each partition task (:mod:`app.engine.task`); every other path
that writes output files (repair, replay, correct) writes them through
:func:`write_data_file` too. File names derive
from the topic-partition and the offset range the task processed, and the
rows arrive in offset order, so a micro-batch that is redone after a crash
stages the same files under the same names; the sink's commit protocol
(:mod:`app.sink.commit`) publishes them.

Every file holds one UTC day of its rows, in the output's layout of days
(:class:`DayLayout`, recorded in ``_tablecast/layout.json`` when the output
is made): ``<day>/`` directories and a ``date`` (date32) column in every
file, so that every reader types the day alike; outputs made before the
record exist keep ``date=<day>/`` directories, their day typed by each
reader (docs/design.md, "The day of a row").
"""

from __future__ import annotations

import enum
import posixpath
import re
from datetime import date, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.engine.output import QUARANTINE_SCHEMA
from app.engine.reports import StagedFile
from app.errors import OutputStateError
from app.storage import Location

QUARANTINE_DIR = "_quarantine"
LAYOUT_FILE = "_tablecast/layout.json"  # below the sink's control directory (CONTROL_DIR)
DATE_COLUMN = "date"
_MS_PER_DAY = 86_400_000
_EPOCH = date(1970, 1, 1)


# The physical form of every output and quarantine file, whichever path writes it.
COMPRESSION = "snappy"
ROW_GROUP_SIZE = 256 * 1024
# Columns with a value for each message (its offset and time), written plain: a dictionary
# of them is as large as the values, and each value cost a hash (the Parquet file of a
# heavy partition 163 to 139 ms, and 2% smaller; a wide one's 9 ms less). Every other
# column keeps its dictionary: sessions, types and most declared columns repeat.
PLAIN_COLUMNS = frozenset({"offset", "ts"})


class DayLayout(enum.Enum):
    """Where an output puts a day's files, and how readers learn the day."""

    # ``<day>/``, each file with a ``date`` date32 column: pyarrow's hive dataset, DuckDB,
    # Spark (recursiveFileLookup) and the Iceberg table's readers all read a date. Every
    # output made with a layout record.
    DATE_COLUMN = "date-column"
    # ``date=<day>/``, the day in the directory only: pyarrow's hive partitioning infers a
    # string, DuckDB a DATE. Outputs made before the record; their files stay where they
    # are, since a mix of both in one output is a dataset neither reader opens.
    HIVE_KEY = "hive-key"

    def directory(self, day: date) -> str:
        return day.isoformat() if self is DayLayout.DATE_COLUMN else f"date={day.isoformat()}"


_DAY_DIRECTORY = re.compile(r"(?:^|/)(?:date=)?(\d{4}-\d{2}-\d{2})/[^/]+$")


def layout_of(location: Location) -> DayLayout:
    """The output's layout of days: its record's, else (an output made before) ``date=``."""
    path = location.child(LAYOUT_FILE)
    if not location.exists(path):
        return DayLayout.HIVE_KEY
    held = location.read_bytes(path).decode(errors="replace").strip().strip('"')
    try:
        return DayLayout(held)
    except ValueError:
        known = ", ".join(repr(k.value) for k in DayLayout)
        raise OutputStateError(
            f"{location.shown(path)} names the layout {held[:40]!r}, not one of {known}",
            output=location.uri,
            path=path,
        ) from None


def record_layout(location: Location, layout: DayLayout) -> None:
    """Record an output's layout, when it is made (never changed after)."""
    location.write_bytes_atomic(location.child(LAYOUT_FILE), f'"{layout.value}"\n'.encode())


def file_day(relative: str) -> date | None:
    """The day of a file's directory (``<day>/`` or ``date=<day>/``), or None."""
    found = _DAY_DIRECTORY.search(relative)
    if found is None:
        return None
    try:
        return date.fromisoformat(found.group(1))
    except ValueError:
        return None


def _date_column(path: str) -> date | None:
    """The day a file at ``path`` holds in its ``date`` column: a ``<day>/`` directory's."""
    directory = posixpath.basename(posixpath.dirname(path))
    return file_day(path) if not directory.startswith("date=") else None


def write_data_file(location: Location, path: str, table: pa.Table, schema: pa.Schema) -> int:
    """Write one output (or quarantine) file whole, in ``schema``; its size.

    ``schema`` is the output's (:func:`app.engine.output.output_schema` of the
    table schema the rows were computed with) or the quarantine's, or a
    published file's own. A file in a ``<day>/`` directory
    (:attr:`DayLayout.DATE_COLUMN`) gets the ``date`` column last, the
    directory's day in every row, when ``schema`` lacks it; one in
    ``date=<day>/`` never holds it (readers add it from the directory). Run,
    redo, repair, replay, correct and compaction all write through here, so a
    hive reader merging the dataset meets the same physical form in every file
    of a table schema.
    """
    rows = table.select(schema.names).cast(schema)
    day = _date_column(path)
    if day is not None and DATE_COLUMN not in schema.names:
        field = pa.field(DATE_COLUMN, pa.date32(), nullable=False)
        rows = rows.append_column(field, pa.repeat(pa.scalar(day, pa.date32()), len(rows)))
    location.write_whole(
        path,
        lambda out: pq.write_table(
            rows,
            out,
            compression=COMPRESSION,
            row_group_size=ROW_GROUP_SIZE,
            use_dictionary=[name for name in rows.column_names if name not in PLAIN_COLUMNS],
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
    layout: DayLayout | None = None,
) -> list[StagedFile]:
    """Write ``table`` under ``staging_dir`` as ``<subdir>/<day directory>/part-<name>.parquet``
    (:meth:`DayLayout.directory` of the output's ``layout``; None: its record, read here).

    One file per day of ``time_column`` (UTC), rows kept in their order.
    """
    if not len(table):
        return []
    if layout is None:
        layout = layout_of(location)
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
        directory = layout.directory(_EPOCH + timedelta(days=number))
        relative = posixpath.join(subdir, directory, f"part-{name}.parquet")
        size = write_data_file(location, location.child(staging_dir, relative), day, schema)
        staged.append(StagedFile(relative, len(day), size, quarantine))
    return staged
