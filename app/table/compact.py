"""``tablecast compact``: the small files of closed days rewritten into large ones.

A batch a minute over 32 partitions publishes tens of thousands of files a
day; once a day is closed (no batch writes rows of it any more), its files
are merged. A compaction is a rewrite of :mod:`app.sink.rewrite` (kind
``compaction``), so a crash anywhere leaves what a crashed correction
leaves, and is finished the same way:

0. Take the output's rewriter claim (:mod:`app.sink.rewriter`), held to the
   end: beside another rewriter, planning or carrying out, it refuses in one
   line (the live job's compaction skips the period). A holder taken over
   stops before step 4 or 5 (:meth:`~app.sink.rewriter.RewriterClaim.check`).
1. Catch the table up with the ledger (:func:`app.table.commit.catch_up`),
   finish a compaction a crash interrupted (its rewrite record), drop the
   history of one that crashed before its rewrite was recorded (its pending
   list's records), and move records an older tablecast wrote flat.
2. Plan: per closed day (before ``--before``), the table's data files smaller
   than the target, packed in name order into groups of up to the target
   size; a group of one file is left alone.
3. Write each group's rows, ordered by topic, partition and offset, as one
   file staged under ``_tablecast/compact/`` (hidden from every reader).
4. Record each group beside the ledger, in its day's folder
   (``_tablecast/ledger/compactions/days/<day>/<digest>.json``: the day, the
   inputs it retires and the file that will hold their rows; what replay and
   correct read), their names first in a pending list
   (``compactions/pending/<key>.json``); then the rewrite: staged files,
   their visible names ``<day directory>/part-compact-<digest>.parquet``
   (the digest of the inputs' names: a rerun writes the same name) and the
   inputs to retire.
5. Carry out the rewrite: publish the merged files, commit one snapshot of
   the table in which every group's inputs leave and its output enters
   (``overwrite`` tagged ``tablecast.kind=compaction``: pyiceberg 0.12 cannot
   write Iceberg's ``replace``, docs/design.md), retire the inputs once the
   rewrite's grace has run out (a query planned on the snapshot before reads
   them meanwhile), remove the rewrite record. ``tablecast compact`` waits
   for the grace; the live job's compaction does not: the first batch after
   the grace retires the inputs (:func:`app.sink.rewrite.finish_abandoned`).
6. Remove the pending list (the records are the rewrite's now) and the
   staging.

Between publishing and retiring (inside step 5) a plain reader listing the
day sees the inputs and the merged file (Iceberg readers never do); a crash
there leaves that until the live job's next batch or the next compaction
finishes the rewrite. Replay and correct find the blocks a merged file
holds in the records (:func:`merged_blocks`) and rewrite the merged file
with the blocks' recomputed rows in place of the old (:func:`remerge`).

What a compaction or a recompute reads of the history is bounded by what it
touches, not by the days the job has run: a merge stays on its day (merged
files of merged files too), so a recompute reads the records of the days
its blocks were published on and it stages (:func:`records` with
``days``); a compaction reads only the records its pending lists name, of
compactions not known to have been carried out. Records an older
tablecast wrote flat (``compactions/<digest>.json``) are read as well, and
moved into their day's folder by the next compaction (copied, then deleted:
a crash between leaves a copy the next compaction replaces).
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from app.contract.schema import DEFAULT_SCHEMA
from app.engine.output import output_schema
from app.engine.writer import write_data_file
from app.errors import ConfigurationError
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink import rewriter as rewriter_mod
from app.sink import schemas
from app.storage import Location
from app.table import commit as table_commit
from app.table.catalog import config_for, open_table, threads_released
from app.table.damage import read_published

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile

log = logging.getLogger(__name__)

STAGING_DIR = posixpath.join(ledger_mod.CONTROL_DIR, "compact")
RECORDS_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "compactions")
DAYS_DIR = posixpath.join(RECORDS_DIR, "days")  # <day>/<digest>.json
PENDING_DIR = posixpath.join(RECORDS_DIR, "pending")  # <key>.json: a compaction's records
KIND = "compaction"  # the rewrite's kind, and the snapshot's tablecast.kind
DEFAULT_TARGET_BYTES = 128 * 1024 * 1024
_EPOCH = date(1970, 1, 1)
_UNITS = {
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
}


def parse_size(text: str, *, option: str = "--target-size") -> int:
    """``128MiB``, ``1GiB``, ``500000000`` -> bytes."""
    lowered = text.strip().lower()
    number = lowered.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = lowered[len(number) :].strip() or "b"
    if not number.isdigit() or unit not in _UNITS or int(number) <= 0:
        raise ConfigurationError(f"{option} {text!r} is not a size like 128MiB or 1GiB")
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
        # Beside its inputs: the day's directory in the output's layout.
        return posixpath.join(
            posixpath.dirname(self.inputs[0]), f"part-compact-{self.digest}.parquet"
        )


@dataclass(frozen=True)
class CompactionRecord:
    day: str
    inputs: tuple[str, ...]
    output: str
    rows: int
    written_at: str

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "day": self.day,
                "inputs": list(self.inputs),
                "output": self.output,
                "rows": self.rows,
                "written_at": self.written_at,
            },
            option=orjson.OPT_INDENT_2,
        )

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


def records(location: Location, days: Iterable[date] | None = None) -> list[CompactionRecord]:
    """The history of ``days`` (None: of every day), with what an older tablecast wrote
    flat and no compaction has moved since."""
    wanted = None if days is None else {d.isoformat() for d in days}
    # Flat ones first: one that a compaction moves meanwhile is found in its day's folder.
    found = [r for _, _, r in _flat(location) if wanted is None or r.day in wanted]
    folders = wanted
    if folders is None:
        listed = location.list_dir(location.child(DAYS_DIR))
        folders = {i.base_name for i in listed if i.type == pafs.FileType.Directory}
    for folder in sorted(folders):
        for path in _json_files(location, location.child(DAYS_DIR, folder)):
            data = _read_if_there(location, path)
            if data is not None:
                found.append(CompactionRecord.from_json(data))
    return found


def _json_files(location: Location, directory: str) -> list[str]:
    """The ``.json`` files in ``directory`` (not a write's hidden temporary), by name."""
    return sorted(
        posixpath.join(directory, i.base_name)
        for i in location.list_dir(directory)
        if i.base_name.endswith(".json") and not i.base_name.startswith(".")
    )


def _read_if_there(location: Location, path: str) -> bytes | None:
    """None: deleted since it was listed (moved, or forgotten, by a compaction meanwhile)."""
    try:
        return location.read_bytes(path)
    except FileNotFoundError:
        return None


def _flat(location: Location) -> list[tuple[str, bytes, CompactionRecord]]:
    """The records an older tablecast wrote flat in ``compactions/``: path, bytes, record."""
    found = []
    for path in _json_files(location, location.child(RECORDS_DIR)):
        data = _read_if_there(location, path)
        if data is not None:
            found.append((path, data, CompactionRecord.from_json(data)))
    return found


def merged_blocks(
    location: Location,
    grouped: Mapping[str, frozenset[str]] | None = None,
    days: Iterable[date] | None = None,
) -> dict[str, frozenset[str]]:
    """The blocks (:func:`app.sink.rewrite.block_of`) each merged file holds, by the merged
    file's own block (``compact-<digest>``), through merges of merged files; ``grouped``:
    the blocks of the live job's group files (:func:`app.recompute.plan.group_blocks`), which
    hold several blocks as merged files do. ``days``: of the merged files of these days
    only (a merge stays on its day, so do merges of merged files); None: of every day."""
    direct: dict[str, set[str]] = {block: set(held) for block, held in (grouped or {}).items()}
    for record in records(location, days):
        held = direct.setdefault(rewrite_mod.block_of(record.output), set())
        held.update(rewrite_mod.block_of(relative) for relative in record.inputs)

    def expand(block: str, seen: frozenset[str]) -> set[str]:
        found: set[str] = set()
        for held in direct.get(block, ()):
            if held in direct and held not in seen:
                found |= expand(held, seen | {held})
            elif held not in direct:
                found.add(held)
        return found

    return {block: frozenset(expand(block, frozenset({block}))) for block in direct}


def write_merged(location: Location, path: str, tables: list[pa.Table], schema: pa.Schema) -> int:
    """One merged file in the output's ``schema``: the rows in topic, partition and offset
    order (a message's rows in their order), written as every output file is; its row
    count. The same rows give the same bytes, so a recompute that changes no row keeps a
    merged file."""
    merged = pa.concat_tables([_conformed(t, schema) for t in tables])
    merged = merged.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    write_data_file(location, path, merged, schema)
    return len(merged)


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: a column it lacks (added to the schema since) is null."""
    columns = {
        f.name: table.column(f.name)
        if f.name in table.column_names
        else pa.nulls(len(table), f.type)
        for f in schema
    }
    return pa.table(columns).cast(schema)


def remerge(
    location: Location,
    merged: str,
    staged: str,
    *,
    replaced: Callable[[pa.Table], pa.ChunkedArray] | None,
    added: list[pa.Table],
    schema: pa.Schema | None = None,
) -> int:
    """Stage ``merged`` (relative) again at ``staged`` (relative): its rows but those
    ``replaced`` selects of them, and the ``added`` rows; with ``replaced`` None every row
    is replaced (the merged file is not read: a damaged one is mended so). Its row count.
    ``schema``: the file's (a group's quarantine file); by default the output's."""
    # Merged files hold the output's schema now: rows computed with an older one read
    # the columns added since as null.
    schema = schema or output_schema(schemas.current(location) or DEFAULT_SCHEMA)
    tables = list(added)
    if replaced is not None:
        old = read_published(location, merged, schema=schema)
        tables.insert(0, old.filter(pc.invert(replaced(old))))
    return write_merged(location, location.child(staged), tables or [schema.empty_table()], schema)


class CompactionSteps(rewrite_mod.RewriteSteps):
    """Hooks between the steps (tests inject crashes here; they do nothing by default).
    ``recorded`` and ``published`` are the rewrite's (inside step 5)."""

    def staged(self) -> None:
        """After step 3."""

    def planned(self) -> None:
        """After step 4's history records, before the rewrite's record."""

    def moved(self) -> None:
        """Inside step 1: after a flat record is copied into its day's folder, before the
        flat one is deleted."""


def compact(
    location: Location,
    *,
    before: date | None = None,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    steps: CompactionSteps | None = None,
    retirement: rewrite_mod.Retirement | None = None,
    claimant: rewriter_mod.Claimant | None = None,
) -> CompactionReport:
    """Steps 1 to 6 for every closed day before ``before`` (default: today, UTC), holding
    the output's rewriter claim throughout (:mod:`app.sink.rewriter`; ``claimant``: who
    takes it, by default `tablecast compact`, which watches a holder's lease)."""
    config = config_for(location)
    if config is None:
        raise ConfigurationError(
            f"output {location.uri} has no Iceberg catalog: run `tablecast table --output "
            f"{location.uri} --glue-database DATABASE` once"
        )
    steps = steps or CompactionSteps()
    cutoff = before or datetime.now(UTC).date()
    claimant = claimant or rewriter_mod.Claimant("compact")
    with rewriter_mod.held(location, claimant) as claim, threads_released():
        # Step 1
        table_commit.catch_up(location)
        finish_interrupted(location, claim, retirement, steps)
        table = open_table(location, config)
        # Step 2
        files = {
            _relative(location, f.file_path): f
            for f in table_commit.data_files(table)
            if _day(f) < cutoff and f.file_size_in_bytes < target_bytes
        }
        groups = plan(files, target_bytes)
        if not groups:
            return CompactionReport(0, 0, 0, 0, 0, 0)
        key = _key(groups)
        # Step 3
        rows: dict[str, int] = {}
        for group in groups:
            rows[group.digest] = _write(location, group, _staged(key, group))
        steps.staged()
        # Step 4
        claim.check("recording its merges")
        stamp = datetime.now(UTC).isoformat()
        pending = location.child(PENDING_DIR, f"{key}.json")
        location.write_bytes_atomic(pending, orjson.dumps([_record_path(g) for g in groups]))
        for group in groups:
            record = CompactionRecord(
                group.day.isoformat(), group.inputs, group.output, rows[group.digest], stamp
            )
            location.write_bytes_atomic(location.child(_record_path(group)), record.to_json())
        steps.planned()
        rewrite = rewrite_mod.Rewrite(
            key=key,
            publish=tuple((_staged(key, g), g.output) for g in groups),
            retire=tuple(r for g in groups for r in g.inputs),
            kind=KIND,
            note=f"{sum(len(g.inputs) for g in groups)} files into {len(groups)}",
        )
        # Step 5
        claim.check("recording its rewrite")
        rewrite_mod.carry_out(
            location,
            rewrite,
            steps,
            snapshot=table_commit.snapshot_rewrite,
            retirement=retirement,
        )
        # Step 6, still under the claim: the next rewriter's staging is its own (a compaction
        # that paused past its lease here, and was taken over, leaves it to the one that took
        # over, whose staging it would be dropping)
        claim.check("dropping its staging")
        location.delete_file(pending)
        location.delete_dir(location.child(STAGING_DIR))
    after = sum(location.fs.get_file_info(location.child(g.output)).size for g in groups)
    report = CompactionReport(
        groups=len(groups),
        inputs=sum(len(g.inputs) for g in groups),
        outputs=len(groups),
        rows=sum(rows.values()),
        bytes_before=sum(g.bytes for g in groups),
        bytes_after=after,
    )
    log.info("compacted %d files into %d (%d rows)", report.inputs, report.outputs, report.rows)
    return report


def finish_interrupted(
    location: Location,
    claim: rewriter_mod.RewriterClaim,
    retirement: rewrite_mod.Retirement | None = None,
    steps: CompactionSteps | None = None,
) -> int:
    """Before a compaction: finish every rewrite whose owner died, a compaction's or a
    recompute's (:func:`app.sink.rewrite.finish_open`: refuses, in one line, to start beside
    one whose owner is still at work, such as the live job's scheduled compaction beside
    ``tablecast compact``, and waits out what is left of a grace unless ``retirement``
    says not to wait); forget the history of compactions a crash interrupted before
    their rewrite record; move the records an older tablecast wrote flat into their
    days' folders. Returns how many compactions were finished.

    ``claim``: this compaction's rewriter claim (:func:`app.sink.rewriter.held`), checked before
    each of those changes. A compaction that paused past its lease after its claim, and
    was taken over, would otherwise drop the staged merges and the history of the one that
    took over, which could then not publish them (its rewrite record left for an operator
    to remove)."""
    claim.check("finishing what earlier rewriters left")
    finished = rewrite_mod.finish_open(
        location, snapshot=table_commit.snapshot_rewrite, retirement=retirement
    )
    claim.check("dropping what interrupted compactions left")
    if not rewrite_mod.open_rewrites(location):
        _forget_never_carried_out(location)
        _move_flat(location, steps or CompactionSteps())
        location.delete_dir(location.child(STAGING_DIR))
    return sum(1 for rewrite in finished if rewrite.kind == KIND)


def _never_carried_out(location: Location, record: CompactionRecord) -> bool:
    """Written by a compaction that crashed before its rewrite record: nothing was merged,
    its output never appeared while every input is still there."""
    if location.exists(location.child(record.output)):
        return False
    return all(location.exists(location.child(r)) for r in record.inputs)


def _forget_never_carried_out(location: Location) -> None:
    """Of the records the pending lists name (compactions not known to be carried out,
    every other rewrite being finished), delete those of a compaction that never was."""
    for pending in _json_files(location, location.child(PENDING_DIR)):
        for relative in orjson.loads(location.read_bytes(pending)):
            path = location.child(relative)
            data = _read_if_there(location, path)  # none: the crash came before it
            if data is not None and _never_carried_out(location, CompactionRecord.from_json(data)):
                location.delete_file(path)
        location.delete_file(pending)


def _move_flat(location: Location, steps: CompactionSteps) -> None:
    """Each record an older tablecast wrote flat, into its day's folder: copied, then
    deleted (a crash between leaves the same record twice, which reads as once, until the
    next compaction moves it again); one that was never carried out is deleted, as the
    older tablecast's next compaction would have."""
    for path, data, record in _flat(location):
        if not _never_carried_out(location, record):
            moved = location.child(DAYS_DIR, record.day, posixpath.basename(path))
            location.write_bytes_atomic(moved, data)
            steps.moved()
        location.delete_file(path)


def _key(groups: list[Group]) -> str:
    """The rewrite's key: the same groups (a rerun) give the same key."""
    return "compact-" + hashlib.sha256("".join(g.digest for g in groups).encode()).hexdigest()[:20]


def _record_path(group: Group) -> str:
    """Relative: in its day's folder."""
    return posixpath.join(DAYS_DIR, group.day.isoformat(), f"{group.digest}.json")


def _staged(key: str, group: Group) -> str:
    return posixpath.join(STAGING_DIR, key, group.output)


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


def _write(location: Location, group: Group, staged_relative: str) -> int:
    # The output's schema now: files written before a column was added read it as null.
    schema = output_schema(schemas.current(location) or DEFAULT_SCHEMA)
    tables = [read_published(location, r, schema=schema) for r in group.inputs]
    return write_merged(location, location.child(staged_relative), tables, schema)
