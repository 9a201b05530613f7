"""Commits to the output's Iceberg table: one snapshot per ledger entry, one per rewrite.

The ledger (:mod:`app.sink.ledger`) stays the output's own record; the
table follows it. Every snapshot tablecast commits carries, in its summary,
the ledger entry it stands for and that entry's end offsets
(:data:`ENTRY_KEY`, :data:`END_KEY`): the table's position, as Flink's
Iceberg sink keeps ``flink.max-committed-checkpoint-id``.

:func:`catch_up` (the sink calls it once the ledger holds a batch) reads
that position from the newest snapshot that has one and commits every later
ledger entry, in order, one append snapshot each, registering the entry's
published files where they are (no second copy). A crash before, during or
after a commit is harmless: the catalog's pointer swap is atomic, a batch
whose entry a snapshot already holds is never committed again, and the next
call commits what is missing.

:func:`commit_rewrite` is the one snapshot of a replay, a correction or a
repair: the files it rewrote or removed leave the table and their new
versions enter it, in one overwrite snapshot, so an Iceberg reader sees the
old rows or the new, never both, never neither.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets
from app.engine.writer import QUARANTINE_DIR
from app.errors import OutputStateError
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry
from app.sink.rewrite import Rewrite
from app.sink.visible import visible_files
from app.storage import Location, refusal
from app.table.catalog import (
    TABLE_DIR,
    TableConfig,
    catalog,
    config_for,
    open_table,
    table_exists,
    threads_released,
)
from app.table.damage import UNREADABLE, damaged_file
from app.table.history import ENTRY_KEY, TableHistory, expire, holding

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from app.sink.fencing import Fence

log = logging.getLogger(__name__)

END_KEY = "tablecast.end"  # that entry's end offsets, {"topic:partition": next}
START_KEY = "tablecast.start"
KIND_KEY = "tablecast.kind"  # batch, repair, adopt, replay, correction, compaction
NOTE_KEY = "tablecast.note"
# Another writer (compaction, a second job attempt) committed first: reload, check the
# position it left, and redo. Each lost race is another writer's progress.
COMMIT_ATTEMPTS = 20


@dataclass(frozen=True)
class Position:
    """The ledger entry the table holds, from the newest snapshot that says."""

    entry: int
    end: Offsets
    snapshot_id: int


def position(table: Table) -> Position | None:
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is not None and ENTRY_KEY in summary.additional_properties:
            props = summary.additional_properties
            end = offsets_mod.from_json(orjson.loads(props[END_KEY]))
            return Position(int(props[ENTRY_KEY]), end, snapshot.snapshot_id)
    return None


def data_path(location: Location, relative: str) -> str:
    """A file's path as the table records it: the output's URI and the file's name."""
    return f"{location.uri.rstrip('/')}/{relative}"


def _is_data(relative: str) -> bool:
    return not relative.startswith(f"{QUARANTINE_DIR}/")


def _entry_properties(entry: LedgerEntry, kind: str) -> dict[str, str]:
    props = {
        ENTRY_KEY: str(entry.number),
        END_KEY: orjson.dumps(offsets_mod.to_archive_json(entry.end)).decode(),
        KIND_KEY: kind,
    }
    if entry.start:
        props[START_KEY] = orjson.dumps(offsets_mod.to_archive_json(entry.start)).decode()
    if entry.batch_id is not None:
        props["tablecast.batch-id"] = str(entry.batch_id)
    return props


def _committing(location: Location) -> Iterable[tuple[int, Table]]:
    """The table, reloaded for each attempt while another writer keeps winning the race."""
    config = config_for(location)
    if config is None:
        return
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(random.uniform(0.02, 0.1 * attempt))
        yield attempt, open_table(location, config)


def catch_up(
    location: Location,
    *,
    below: int | None = None,
    history: TableHistory | None = None,
    committed: Callable[[Table], None] | None = None,
) -> int:
    """Commit every ledger entry the table does not hold yet (numbered below ``below``,
    when given); returns how many snapshots. ``history``: each batch's commit also expires
    the snapshots it makes older than that (the live job's); ``committed``: told of the
    table as it is after (the live job's record of its metadata files)."""
    with location.refusing(location.child(TABLE_DIR)):  # a full disk: one line, exit 74
        return _catching_up(location, below, history, committed)


def _catching_up(
    location: Location,
    below: int | None,
    history: TableHistory | None,
    committed: Callable[[Table], None] | None,
) -> int:
    from pyiceberg.exceptions import CommitFailedException

    for attempt, table in _committing(location):
        try:
            with threads_released():
                count = _catch_up(location, table, below, history)
                if committed is not None:
                    committed(table)
                return count
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            log.info("table commit lost a race (attempt %d); reloading", attempt)
    return 0


def _catch_up(
    location: Location, table: Table, below: int | None, history: TableHistory | None
) -> int:
    ledger = Ledger(location)
    listed = ledger.numbers()
    numbers = [n for n in listed if below is None or n < below]
    held = position(table)
    folded = ledger.fold_head()
    behind = held is not None and folded is not None and held.entry <= folded.through
    if (
        held is not None
        and not behind
        and (held.entry not in listed or ledger.read(held.entry).end != held.end)
    ):
        raise OutputStateError(
            f"the Iceberg table of {location.uri} holds ledger entry {held.entry} ending at "
            f"{offsets_mod.describe(held.end)}, which the output's ledger does not",
            output=location.uri,
            entry=held.entry,
        )
    todo = [n for n in numbers if held is None or n > held.entry]
    # Claims hold no offsets: the table takes the data entries (batches, repairs).
    entries = [e for e in (ledger.read(n) for n in todo) if e.kind is not ledger_mod.WRITER]
    if not entries:
        return 0
    if (held is None and folded is not None) or behind:
        # The entries the table lacks are folded (app.sink.fold): register what is visible,
        # in one snapshot at the ledger's head.
        _adopt(location, table, entries[-1])
        return 1
    if held is None and not all(
        location.exists(location.child(f)) for e in entries for f in e.files if _is_data(f)
    ):
        # A table made for an output whose history was rewritten since: register what is
        # visible, in one snapshot at the ledger's head.
        _adopt(location, table, entries[-1])
        return 1
    for entry in entries:
        number = entry.number
        if entry.kind is ledger_mod.BATCH:
            paths = [data_path(location, f) for f in entry.files if _is_data(f)]
            with table.transaction() as transaction:
                transaction.add_files(
                    paths,
                    snapshot_properties=_entry_properties(entry, "batch"),
                    check_duplicate_files=False,
                )
                if history is not None:  # in the batch's own commit: no commit more
                    expire(transaction, history.expiring(transaction.table_metadata))
        else:
            # A repair commits its own snapshot before its entry; one made while the
            # output had no table is reconciled with what is visible.
            _reconcile(location, table, _entry_properties(entry, str(entry.kind)))
        log.info("table %s: ledger entry %d committed", table.name(), number)
    return len(entries)


def _visible_data(location: Location) -> set[str]:
    return {data_path(location, f) for f in visible_files(location) if _is_data(f)}


def _adopt(location: Location, table: Table, head: LedgerEntry) -> None:
    _reconcile(location, table, _entry_properties(head, "adopt"))


def _reconcile(location: Location, table: Table, props: dict[str, str]) -> None:
    """One overwrite making the table's files the visible ones (new, gone or rewritten)."""
    visible = _visible_data(location)
    current = {f.file_path: f for f in data_files(table)}
    changed = {
        p
        for p, f in current.items()
        if p in visible
        and location.fs.get_file_info(_fs_path(location, p)).size != f.file_size_in_bytes
    }
    gone = set(current) - visible
    new = visible - set(current)
    overwrite(
        location,
        table,
        remove=[current[p] for p in sorted(gone | changed)],
        add=sorted(new | changed),
        props=props,
    )


def _fs_path(location: Location, path: str) -> str:
    prefix = location.uri.rstrip("/") + "/"
    return location.child(path[len(prefix) :]) if path.startswith(prefix) else path


def data_files(table: Table) -> list[DataFile]:
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files()]


def overwrite(
    location: Location,
    table: Table,
    *,
    remove: Sequence[DataFile],
    add: Sequence[str],
    props: dict[str, str],
) -> None:
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    def registered(path: str) -> DataFile:
        try:
            return parquet_file_to_data_file(table.io, metadata, path)
        except UNREADABLE as exc:  # its footer: a visible file registered as it is
            if isinstance(exc, OSError) and refusal(exc) is not None:
                raise
            prefix = data_path(location, "")
            raise damaged_file(location, path.removeprefix(prefix), exc) from None

    with table.transaction() as transaction:
        metadata = transaction.table_metadata
        added = [registered(p) for p in add]
        # The snapshots that hold a file this one removes: its file goes (a rewrite retires
        # it after the grace, or it is gone already), so they are not offered any more.
        unreadable = holding(metadata, table.io, [f.file_path for f in remove])
        with transaction.update_snapshot(snapshot_properties=props).overwrite() as snapshot:
            for data_file in remove:
                snapshot.delete_data_file(data_file)
            for data_file in added:
                snapshot.append_data_file(data_file)
        expire(transaction, unreadable)


def snapshot_rewrite(location: Location, rewrite: Rewrite) -> None:
    """The overwrite snapshot of a rewrite of :mod:`app.sink.rewrite` (its step 2): its new
    names replace the names it retires (a :class:`~app.sink.rewrite.TableSnapshot`)."""
    commit_rewrite(
        location,
        written=[new for _, new in rewrite.publish],
        removed=list(rewrite.retire),
        kind=rewrite.kind,
        note=rewrite.note or rewrite.key,
    )


def commit_rewrite(
    location: Location,
    *,
    written: Sequence[str],
    removed: Sequence[str],
    kind: str,
    note: str,
    entry: LedgerEntry | None = None,
) -> bool:
    """One overwrite snapshot: ``written`` (relative) enter the table, replacing their old
    versions; ``removed`` leave it. ``entry``: the ledger entry a repair is about to append
    (its position goes into the summary). Returns False when the output keeps no table,
    or has not made it yet.
    """
    with location.refusing(location.child(TABLE_DIR)):  # a full disk: one line, exit 74
        return _commit_rewrite(location, written, removed, kind, note, entry)


def _commit_rewrite(
    location: Location,
    written: Sequence[str],
    removed: Sequence[str],
    kind: str,
    note: str,
    entry: LedgerEntry | None,
) -> bool:
    from pyiceberg.exceptions import CommitFailedException

    config = config_for(location)
    if config is None or not table_exists(location, config):
        # The job's next batch makes the table, of the files visible then (catch_up).
        return False
    paths = {data_path(location, f) for f in (*written, *removed) if _is_data(f)}
    add = sorted(data_path(location, f) for f in written if _is_data(f))
    if not paths and entry is None:
        return True  # nothing changed (a replay that recomputed the same bytes)
    # The ranges rewritten are the ledger's: the table must hold them first.
    catch_up(location, below=None if entry is None else entry.number)
    for attempt, table in _committing(location):
        props = {KIND_KEY: str(kind), NOTE_KEY: note}
        held = position(table)
        if entry is not None:
            if held is not None and held.entry == entry.number and held.end == entry.end:
                return True  # this repair's snapshot was committed before a crash
            props.update(_entry_properties(entry, str(kind)))
        elif held is not None:
            # The table still holds that entry, rewritten: every snapshot says its position,
            # so expiring the ones before it never loses it.
            props.update(
                {
                    ENTRY_KEY: str(held.entry),
                    END_KEY: orjson.dumps(offsets_mod.to_archive_json(held.end)).decode(),
                }
            )
        with threads_released():
            remove = [f for f in data_files(table) if f.file_path in paths]
        try:
            with threads_released():
                overwrite(location, table, remove=remove, add=add, props=props)
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS:
                raise
            continue
        log.info(
            "table %s: %s committed (%d files in, %d out)",
            table.name(),
            kind,
            len(add),
            len(remove),
        )
        return True
    return False


def rebuild(location: Location, fence: Fence) -> int:
    """The output's table made again (``tablecast table --rebuild``): dropped from its catalog
    (its data files and old metadata stay), created, and given the visible data files in
    one snapshot at the ledger's head, which holds its position; returns how many files.
    ``fence``: the output held, so that no batch is published between the listing of the
    visible files and its ledger entry (the table would hold it twice once its commit came).

    For a table that cannot be loaded (its metadata file lost) or no longer lists the
    output's files: the ledger and the files are the output's record, the table follows."""
    from pyiceberg.exceptions import NoSuchTableError

    config = config_for(location)
    if config is None:
        raise OutputStateError(
            f"output {location.uri} has no Iceberg catalog: run `tablecast table --output "
            f"{location.uri} --glue-database DATABASE` once",
            output=location.uri,
        )
    with location.refusing(location.child(TABLE_DIR)), threads_released():
        fence.check("making the table again")
        with contextlib.suppress(NoSuchTableError):
            catalog(config).drop_table(config.table)
        table = open_table(location, config)
        head = Ledger(location).head()
        if head is not None:
            _adopt(location, table, head)
        log.info("table %s of %s made again", config.table, location.uri)
        return len(_visible_data(location))


def describe(config: TableConfig) -> bytes:
    """What ``tablecast table`` prints."""
    return config.to_json()
