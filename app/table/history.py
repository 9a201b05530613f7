"""What the output's Iceberg table keeps of its past, and the files it no longer needs.

A batch a minute is 1,440 snapshots a day. Kept forever, every commit
rewrites a metadata file that lists them all, and every manifest list and
manifest stays. So the table keeps a bounded history:

- **Snapshots** (:class:`TableHistory`, ``tablecast run --table-history``,
  5 days by default, Iceberg's own default age): the newest sixty, then the
  newest of each minute of the last hour and of each hour (UTC) back to the
  history's start; the others are expired, in the same commit as the batch
  that makes them old (:meth:`TableHistory.expiring`; one metadata file per
  batch, as before). At a minute's trigger that is every batch of the last
  hour and one an hour before; at any trigger, at most 120 snapshots and 24
  a day of history. The current snapshot always stays, and so does the
  newest one naming the ledger entry the table holds (the position of
  :mod:`app.table.commit`). Time travel to a minute of the last hour, or to
  an hour of the last days, is what readers ask of it; a snapshot per batch
  for days would cost a metadata file of megabytes, rewritten every batch.
- **Snapshots a rewrite leaves unreadable** (:func:`holding`): a rewrite's
  snapshot (replay, correct, repair, compaction) expires, in the same
  commit, every snapshot that still holds a file it replaces, since those
  files are deleted after the retire grace (:mod:`app.sink.rewrite`). A
  snapshot that is offered can always be read.
- **Earlier metadata files**: the last ten, Iceberg's own
  ``write.metadata.previous-versions-max`` with
  ``write.metadata.delete-after-commit.enabled`` (:data:`app.table.catalog`
  sets them on the table); **manifests** merged once a hundred accumulate
  (``commit.manifest-merge.enabled``), so a manifest list does not grow with
  the batches.
- **Files no snapshot references** (:class:`MetadataFiles`): manifest lists
  and manifests of expired snapshots, and files a crash or an older table
  left, are deleted by the live job once the metadata grace
  (:func:`metadata_grace`) has passed since it found them unreferenced, so
  a query that loaded the table just before its snapshot expired still
  plans on it. A query reads a snapshot's manifest list and manifests once,
  as it plans, right after loading the table's metadata; then it opens only
  data files, for as long as it runs, and no expiry deletes those (a
  rewrite retires them after the retire grace, the length of a query). So
  the metadata's grace is the length of a plan, 30 seconds, or the retire
  grace if that is shorter: at a minute's trigger a file waits one batch,
  at the bench's 2.4 batches a second some 70 batches' files wait instead
  of the retire grace's 300. (Iceberg's own ``expire_snapshots`` deletes
  them at once.) The job sees snapshots expire as it commits; what it
  never saw referenced (an earlier run's leftovers) it finds by listing the
  folder at its start and every hour, taking only files older than the
  current snapshot (by more than a clock's skew): a commit still under way
  writes newer ones. The table's data files are the output's own: a
  rewrite retires them (:mod:`app.sink.rewrite`), never this.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app import defaults
from app.sink import rewrite as rewrite_mod
from app.storage import Location

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)

ENTRY_KEY = "tablecast.ledger-entry"  # the ledger entry number a snapshot stands for (commit.py)
NEWEST = 60  # the newest snapshots, each kept (an hour of batches at a minute's trigger)
# Then, back to the history: the newest snapshot of each minute of the last hour, and of
# each hour before it (UTC). However fast the trigger, at most 60 + 60 + 24 a day.
TIERS = ((3600.0, 60.0), (float("inf"), 3600.0))  # (within this age, one per this long)
SWEEP_EVERY_S = 3600.0  # the folder is listed whole at the job's start and this often
# How long a query may take between loading the table's metadata and reading the manifest
# list and manifests of the snapshot it plans on (Iceberg's Spark catalog, too, caches a
# loaded table 30 seconds: cache.expiration-interval-ms): the grace of the metadata files
# no snapshot references.
PLANNING_GRACE_S = 30.0
METADATA_DIR = "metadata"


@dataclass(frozen=True)
class TableHistory:
    """How far back the table's snapshots reach (``--table-history``), and how thinly."""

    keep_s: float = defaults.TABLE_HISTORY_S
    newest: int = NEWEST
    tiers: tuple[tuple[float, float], ...] = TIERS

    def expiring(self, metadata: TableMetadata, now_ms: int | None = None) -> list[int]:
        """The snapshots to expire now: older than the history, or neither among the
        newest nor the newest of their minute (last hour) or hour (before); never the
        current one, the newest holding the table's position, or a branch's or tag's."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        order = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
        oldest_ms = now_ms - self.keep_s * 1000
        newest = [
            s for s in order[max(0, len(order) - self.newest) :] if s.timestamp_ms >= oldest_ms
        ]
        kept = _protected(metadata) | {s.snapshot_id for s in newest}
        taken: set[tuple[int, int]] = set()  # (tier, bucket) whose newest is kept
        for snapshot in reversed(order):  # newest first: each bucket keeps its newest
            if snapshot.timestamp_ms < oldest_ms:
                continue
            age_ms = now_ms - snapshot.timestamp_ms
            for tier, (within_s, one_per_s) in enumerate(self.tiers):
                if age_ms <= within_s * 1000:
                    bucket = (tier, int(snapshot.timestamp_ms // (one_per_s * 1000)))
                    if bucket not in taken:
                        taken.add(bucket)
                        kept.add(snapshot.snapshot_id)
                    break
        return [s.snapshot_id for s in order if s.snapshot_id not in kept]


def metadata_grace(retire_grace_s: float) -> float:
    """How long a metadata file no snapshot references stays: a query's planning, not its
    run (its data files stay through ``retire_grace_s``), and never longer than that."""
    return min(PLANNING_GRACE_S, retire_grace_s)


def _protected(metadata: TableMetadata) -> set[int]:
    """The current snapshot, its ancestors down to the newest one that names a ledger entry
    (the table's position), and every branch's and tag's."""
    kept = {ref.snapshot_id for ref in metadata.refs.values()}
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    snapshot = by_id.get(metadata.current_snapshot_id or -1)
    while snapshot is not None:
        kept.add(snapshot.snapshot_id)
        summary = snapshot.summary
        if summary is not None and ENTRY_KEY in summary.additional_properties:
            break
        snapshot = by_id.get(snapshot.parent_snapshot_id or -1)
    return kept


def holding(metadata: TableMetadata, io: FileIO, paths: Iterable[str]) -> list[int]:
    """The snapshots that hold any of the data files ``paths`` (which the current snapshot
    holds): every one from the oldest of their appends on, by sequence number."""
    wanted = set(paths)
    current = metadata.current_snapshot()
    if current is None or not wanted:
        return []
    first: int | None = None
    for manifest in current.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.data_file.file_path in wanted and entry.sequence_number is not None:
                first = (
                    entry.sequence_number if first is None else min(first, entry.sequence_number)
                )
    if first is None:
        return []
    return [s.snapshot_id for s in metadata.snapshots if (s.sequence_number or 0) >= first]


def expire(transaction: Transaction, snapshot_ids: Iterable[int]) -> int:
    """Expire ``snapshot_ids`` in ``transaction`` (its commit is the one that expires them);
    those gone already, the current one and branch or tag heads are left. How many."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    metadata = transaction.table_metadata
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    present = {s.snapshot_id for s in metadata.snapshots}
    ids = sorted(set(snapshot_ids) & present - protected)
    if ids:
        ExpireSnapshots(transaction).by_ids(ids).commit()
    return len(ids)


def _relative(location: Location, path: str) -> str | None:
    """A path the table records, as a path of the output's storage; None if elsewhere."""
    for prefix in (location.uri.rstrip("/") + "/", location.path.rstrip("/") + "/"):
        if path.startswith(prefix):
            return location.child(path[len(prefix) :])
    if path.startswith("file://"):
        return _relative(location, path.removeprefix("file://"))
    return None


@dataclass
class MetadataFiles:
    """The live job's record of the table's metadata files: which it has seen referenced,
    which no snapshot references any more and since when; it deletes those whose grace has
    run out (kept in memory: what a restart forgets, the next listing of the folder finds)."""

    grace_s: float
    clock: Callable[[], float] = time.time
    _lists: dict[str, frozenset[str]] = field(default_factory=dict)  # list -> its manifests
    _known: set[str] = field(default_factory=set)  # every file seen referenced
    _found: dict[str, float] = field(default_factory=dict)  # unreferenced -> since when
    _swept_at: float | None = None

    def note(self, location: Location, table: Table) -> None:
        """What ``table`` (just committed) references; what it no longer does is due after
        the grace. Reads each new snapshot's manifest list once."""
        metadata = table.metadata
        referenced = self._referenced(table)
        now = self.clock()
        # Earlier metadata files pyiceberg deletes itself as they leave the log.
        snapshots = {p for p in referenced if p.endswith(".avro")}
        for path in self._known - snapshots:
            self._found.setdefault(path, now)
        self._known = snapshots
        self._lists = {
            s.manifest_list: self._lists[s.manifest_list]
            for s in metadata.snapshots
            if s.manifest_list in self._lists
        }
        if self._swept_at is None or now - self._swept_at >= SWEEP_EVERY_S:
            self._sweep(location, table, referenced, now)
            self._swept_at = now

    def due(self) -> list[str]:
        """Files unreferenced for the grace, oldest first."""
        limit = self.clock() - self.grace_s
        return [p for p, t in sorted(self._found.items(), key=lambda i: i[1]) if t <= limit]

    def delete(
        self,
        location: Location,
        table: Table,
        before: Callable[[], None],
        deleted: Callable[[int], None] | None = None,
    ) -> int:
        """Delete the due files still unreferenced by ``table``; ``before()`` first (the
        fence), ``deleted(n)`` after each. How many."""
        due = self.due()
        if not due:
            return 0
        referenced = self._referenced(table)
        before()
        count = 0
        for path in due:
            self._found.pop(path, None)
            if path in referenced:  # referenced again: never deleted
                continue
            shown = _relative(location, path)
            if shown is None:
                continue
            location.delete_file(shown)
            count += 1
            if deleted is not None:
                deleted(count)
        log.debug(
            "table of %s: %d metadata files no snapshot references deleted", location.uri, count
        )
        return count

    @property
    def waiting(self) -> int:
        return len(self._found)

    def _referenced(self, table: Table) -> set[str]:
        metadata = table.metadata
        found = {table.metadata_location, *(m.metadata_file for m in metadata.metadata_log)}
        for snapshot in metadata.snapshots:
            manifests = self._lists.get(snapshot.manifest_list)
            if manifests is None:
                manifests = frozenset(m.manifest_path for m in snapshot.manifests(table.io))
                self._lists[snapshot.manifest_list] = manifests
            found.add(snapshot.manifest_list)
            found |= manifests
        return found

    def _sweep(self, location: Location, table: Table, referenced: set[str], now: float) -> None:
        """The folder listed whole: files no snapshot references that this process never saw
        referenced (an earlier run's, a crashed commit's). Only those older than the current
        snapshot by more than a clock's skew: a commit still under way started after it, so
        its files are newer, and one that started before it can no longer succeed."""
        folder = _relative(location, posixpath.join(_table_root(location), METADATA_DIR))
        current = table.metadata.current_snapshot()
        if folder is None or current is None:
            return
        before = current.timestamp_ms / 1000 - rewrite_mod.MAX_CLOCK_SKEW_S
        for info in location.list_dir(folder):
            name = info.base_name
            if not (name.endswith(".avro") or name.endswith(".metadata.json")):
                continue
            recorded = _uri(location, info.path)
            if recorded in referenced or recorded in self._found or info.mtime is None:
                continue
            if info.mtime.timestamp() < before:
                self._found[recorded] = now


def _table_root(location: Location) -> str:
    from app.table.catalog import table_location

    return table_location(location)


def _uri(location: Location, path: str) -> str:
    """A storage path as the table would record it."""
    return location.uri.rstrip("/") + "/" + path[len(location.path.rstrip("/")) + 1 :]
