"""``tablecast compact``: the small files of closed days rewritten into large ones.

A batch a minute over 32 partitions publishes tens of thousands of files a
day; once a day is closed (no batch writes rows of it any more), its files
are merged:

1. Catch the table up with the ledger (:func:`app.table.commit.catch_up`) and
   finish a compaction a crash interrupted (step 6 of a recorded one).
2. Plan: per closed day (before ``--before``), the table's data files smaller
   than the target, packed in name order into groups of up to the target
   size; a group of one file is left alone.
3. Write each group's rows, ordered by topic, partition and offset, as one
   file staged under ``_tablecast/compact/``, then moved to
   ``date=<day>/part-compact-<digest>.parquet`` (the digest of its inputs'
   names: a rerun writes the same name).
4. Record the compaction beside the ledger
   (``_tablecast/ledger/compactions/<digest>.json``: the day, the inputs it
   retires and the file that holds their rows), before anything is retired.
5. Commit one snapshot (``overwrite``, tagged ``tablecast.kind=compaction``:
   pyiceberg 0.12 cannot write Iceberg's ``replace``): every group's inputs
   leave the table and its output enters it, at once, for Iceberg readers.
6. Delete the inputs: plain Parquet readers see them retired.

Between steps 3 and 6 a plain reader listing the day sees the inputs and the
merged file (Iceberg readers never do). Replay and correct refuse offsets a
compaction merged (:func:`refuse_compacted`): their names are gone.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from app.engine.output import OUTPUT_SCHEMA
from app.errors import ConfigurationError
from app.sink import ledger as ledger_mod
from app.storage import Location
from app.table import commit as table_commit
from app.table.catalog import config_for, open_table, threads_released

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

STAGING_DIR = posixpath.join(ledger_mod.CONTROL_DIR, "compact")
RECORDS_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "compactions")
DEFAULT_TARGET_BYTES = 128 * 1024 * 1024
_EPOCH = date(1970, 1, 1)
_UNITS = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2,
          "gb": 1000**3}  # fmt: skip


def parse_size(text: str) -> int:
    """``128MiB``, ``1GiB``, ``500000000`` -> bytes."""
    lowered = text.strip().lower()
    number = lowered.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = lowered[len(number) :].strip() or "b"
    if not number.isdigit() or unit not in _UNITS or int(number) <= 0:
        raise ConfigurationError(f"--target-size {text!r} is not a size like 128MiB or 1GiB")
    return int(number) * _UNITS[unit]


@dataclass(frozen=True)
class Group:
    day: date
    inputs: tuple[str, ...]  # relative names, in order
    bytes: int

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.inputs).encode()).hexdigest()[:20]

    @property
    def output(self) -> str:
        return f"date={self.day.isoformat()}/part-compact-{self.digest}.parquet"


@dataclass(frozen=True)
class CompactionRecord:
    day: str
    inputs: tuple[str, ...]
    output: str
    rows: int
    written_at: str

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"day": self.day, "inputs": list(self.inputs), "output": self.output,
             "rows": self.rows, "written_at": self.written_at},
            option=orjson.OPT_INDENT_2,
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> CompactionRecord:
        doc = orjson.loads(data)
        return cls(doc["day"], tuple(doc["inputs"]), doc["output"], doc["rows"], doc["written_at"])


@dataclass(frozen=True)
class CompactionReport:
    groups: int
    inputs: int
    outputs: int
    rows: int
    bytes_before: int
    bytes_after: int


def records(location: Location) -> list[CompactionRecord]:
    directory = location.child(RECORDS_DIR)
    names = sorted(i.base_name for i in location.list_dir(directory)
                   if i.base_name.endswith(".json"))  # fmt: skip
    return [CompactionRecord.from_json(location.read_bytes(posixpath.join(directory, n)))
            for n in names]  # fmt: skip


def refuse_compacted(location: Location, blocks: set[str]) -> None:
    """A recompute of offsets whose files a compaction merged would write them twice."""
    for record in records(location):
        for relative in record.inputs:
            block = posixpath.basename(relative).removeprefix("part-").removesuffix(".parquet")
            if block in blocks:
                raise ConfigurationError(
                    f"{location.uri}/{relative} was compacted into {record.output} on "
                    f"{record.written_at}: recomputing a compacted day is not supported",
                    output=location.uri, file=relative,
                )  # fmt: skip


def compact(
    location: Location, *, before: date | None = None, target_bytes: int = DEFAULT_TARGET_BYTES
) -> CompactionReport:
    """Steps 1 to 6 for every closed day before ``before`` (default: today, UTC)."""
    config = config_for(location)
    if config is None:
        raise ConfigurationError(
            f"output {location.uri} has no Iceberg catalog: run `tablecast table --output "
            f"{location.uri} --glue-database DATABASE` once"
        )
    cutoff = before or datetime.now(UTC).date()
    with threads_released():
        # Step 1
        table_commit.catch_up(location)
        table = open_table(location, config)
        _finish_recorded(location, table)
        # Step 2
        files = {
            _relative(location, f.file_path): f
            for f in table_commit.data_files(table)
            if _day(f) < cutoff and f.file_size_in_bytes < target_bytes
        }
        groups = plan(files, target_bytes)
        if not groups:
            return CompactionReport(0, 0, 0, 0, 0, 0)
        # Step 3
        rows = 0
        for group in groups:
            rows += _write(location, group)
        # Step 4
        stamp = datetime.now(UTC).isoformat()
        for group in groups:
            record = CompactionRecord(group.day.isoformat(), group.inputs, group.output,
                                      _rows(location, group.output), stamp)  # fmt: skip
            location.write_bytes_atomic(location.child(RECORDS_DIR, f"{group.digest}.json"),
                                        record.to_json())  # fmt: skip
        # Step 5
        _replace(location, table, groups, files)
    # Step 6
    for group in groups:
        for relative in group.inputs:
            location.delete_file(location.child(relative))
    location.delete_dir(location.child(STAGING_DIR))
    after = sum(location.fs.get_file_info(location.child(g.output)).size for g in groups)
    report = CompactionReport(
        groups=len(groups), inputs=sum(len(g.inputs) for g in groups), outputs=len(groups),
        rows=rows, bytes_before=sum(g.bytes for g in groups), bytes_after=after,
    )  # fmt: skip
    log.info("compacted %d files into %d (%d rows)", report.inputs, report.outputs, rows)
    return report


def plan(files: dict[str, DataFile], target_bytes: int) -> list[Group]:
    by_day: dict[date, list[str]] = defaultdict(list)
    for relative, data_file in files.items():
        by_day[_day(data_file)].append(relative)
    groups: list[Group] = []
    for day in sorted(by_day):
        current: list[str] = []
        size = 0
        for relative in sorted(by_day[day]):
            grows = files[relative].file_size_in_bytes
            if current and size + grows > target_bytes:
                groups.append(Group(day, tuple(current), size))
                current, size = [], 0
            current.append(relative)
            size += grows
        groups.append(Group(day, tuple(current), size))
    return [g for g in groups if len(g.inputs) > 1]


def _day(data_file: DataFile) -> date:
    return _EPOCH + timedelta(days=int(data_file.partition[0]))


def _relative(location: Location, path: str) -> str:
    return path[len(location.uri.rstrip("/")) + 1 :]


def _rows(location: Location, relative: str) -> int:
    return int(pq.read_metadata(location.child(relative), filesystem=location.fs).num_rows)


def _write(location: Location, group: Group) -> int:
    tables = [pq.read_table(location.child(r), filesystem=location.fs, schema=OUTPUT_SCHEMA,
                            partitioning=None) for r in group.inputs]  # fmt: skip
    merged = pa.concat_tables(tables).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    staged = location.child(STAGING_DIR, group.output)
    location.fs.create_dir(posixpath.dirname(staged), recursive=True)
    pq.write_table(merged, staged, filesystem=location.fs, compression="snappy",
                   row_group_size=256 * 1024)  # fmt: skip
    location.move(staged, location.child(group.output))
    return len(merged)


def _replace(
    location: Location, table: Table, groups: list[Group], files: dict[str, DataFile]
) -> None:
    """One snapshot for every group. Iceberg's rewrites record ``replace``, which
    pyiceberg 0.12 cannot summarise: an ``overwrite`` tagged ``compaction``, equally atomic."""
    props = {table_commit.KIND_KEY: "compaction",
             table_commit.NOTE_KEY: f"{sum(len(g.inputs) for g in groups)} files into "
                                    f"{len(groups)}"}  # fmt: skip
    table_commit.overwrite(
        location, table,
        remove=[files[r] for g in groups for r in g.inputs],
        add=[table_commit.data_path(location, g.output) for g in groups],
        props=props,
    )  # fmt: skip


def _finish_recorded(location: Location, table: Table) -> None:
    """Step 6 of a compaction a crash interrupted: its output is in the table, its inputs
    still on disk. (Before step 5 the table still holds the inputs: planned again.)"""
    held = {f.file_path for f in table_commit.data_files(table)}
    for record in records(location):
        if table_commit.data_path(location, record.output) in held:
            for relative in record.inputs:
                location.delete_file(location.child(relative))
