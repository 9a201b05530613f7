"""Which offset ranges to recompute, and where each partition must be read from.

The live job publishes a topic-partition's offsets as ranges, one per
micro-batch (:meth:`~app.sink.ledger.LedgerEntry.ranges`), and names every
file after its range and block (:mod:`app.engine.segments`). Recomputing a
range writes the same blocks, so its files replace the old ones block for block.

A range's rows depend on every record of its partition since the state was
last empty: the live job's first offset of the partition, or the restart
offset of the latest ``tablecast repair`` before it (after a repair the job
starts again from empty state at the repair's offsets, adopting the sessions
the repair names). That stretch is an *epoch*; a recompute reads each
partition from the start of the epoch of the first range it recomputes,
with empty state, and applies records up to the last such range.

A repair cuts the ranges of the epoch it ends at its restart offset: it
removed their rows from there on, which the next epoch published again,
except the rows of the resync snapshots it adopted (the next epoch, starting
from empty state, publishes nothing for those messages: it cannot compute
their deletions). So a range's own rows (:class:`RangeRows`) are those
before the cut and those of the snapshots the repair kept; a recompute of
the range reads on to the last kept snapshot, in the old epoch's state, and
stages exactly those rows, which are exactly what the repair left. The
next epoch's ranges never own the kept snapshots' rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app import defaults
from app.code_version import JobVersion
from app.contract.offsets import TopicPartition
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.durations import spark_interval
from app.engine.machine import IntegrityMode, Rules
from app.engine.segments import OFFSETS_PER_FILE, group_members, range_stem
from app.errors import ConfigurationError
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink import schemas as schemas_mod
from app.sink.ledger import LedgerEntry, LiveRules, ProcessorRecord
from app.sources.archive import ArchiveFile, ArchiveIndex
from app.storage import Location


@dataclass(frozen=True, slots=True)
class GivenRules:
    """The rules a recompute is given (``--integrity``, ``--session-timeout``): each
    confirms the live job's (another value is refused) or stands in where its ledger does
    not record them; None: the ledger's."""

    integrity: IntegrityMode | None = None
    session_timeout_ms: int | None = None


LEDGER_RULES = GivenRules()  # none given: the live job's, as its ledger records them


@dataclass(frozen=True, slots=True)
class PublishedRange:
    """Offsets ``[start, end)`` of a partition, published by one ledger entry."""

    tp: TopicPartition
    start: int
    end: int
    entry: LedgerEntry | None  # None: a range of no ledger (a replay into a new output)
    epoch: int  # ranges of one partition and epoch continue one state
    limit: int | None  # the next repair's restart offset: rows from there on are not ours
    # (session, offset) of the snapshots at or after ``limit`` whose rows that repair kept.
    kept: tuple[tuple[str, int], ...] = ()
    # (session, offset) of the snapshots the repair that began this epoch adopted: their
    # rows belong to the range before it.
    earlier: tuple[tuple[str, int], ...] = ()

    @property
    def rows(self) -> RangeRows:
        return RangeRows(self.start, self.end, self.limit, self.kept, self.earlier)


@dataclass(frozen=True, slots=True)
class RangeRows:
    """The rows a partition's published range ``[start, end)`` owns, among the rows of its
    offsets: all of them, but after a repair (module docstring)."""

    start: int
    end: int
    limit: int | None = None
    kept: tuple[tuple[str, int], ...] = ()
    earlier: tuple[tuple[str, int], ...] = ()

    @property
    def whole(self) -> bool:
        """Every row of its offsets is the range's own."""
        return (self.limit is None or self.limit >= self.end) and not self.earlier

    @property
    def read_end(self) -> int:
        """Where a recompute of the range stops reading: past the last kept snapshot."""
        if self.limit is None:
            return self.end
        return max([min(self.end, self.limit)] + [offset + 1 for _, offset in self.kept])

    def blocks(self, tp: TopicPartition) -> list[tuple[str, int, int]]:
        """The range's blocks: (name, first offset, end offset)."""
        stem = range_stem(tp, self.start, self.end)
        count = max(1, math.ceil((self.end - self.start) / OFFSETS_PER_FILE))
        return [
            (
                f"{stem}-{n:03d}",
                self.start + n * OFFSETS_PER_FILE,
                min(self.end, self.start + (n + 1) * OFFSETS_PER_FILE),
            )
            for n in range(count)
        ]

    def mask(self, table: pa.Table, tp: TopicPartition, lo: int, hi: int) -> pa.ChunkedArray:
        """Which of ``table``'s rows (output or quarantine) are this range's, in ``[lo, hi)``."""
        offsets = table["offset"]
        mine = pc.and_(
            pc.and_(pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition)),
            pc.and_(pc.greater_equal(offsets, lo), pc.less(offsets, hi)),
        )
        if self.whole:
            return mine
        pairs = pc.binary_join_element_wise(table["session"], pc.cast(offsets, pa.string()), "\x00")
        if self.limit is not None:
            kept = pa.array([f"{s}\x00{o}" for s, o in self.kept], pa.string())
            mine = pc.and_(mine, pc.or_(pc.less(offsets, self.limit), pc.is_in(pairs, kept)))
        if self.earlier:
            earlier = pa.array([f"{s}\x00{o}" for s, o in self.earlier], pa.string())
            mine = pc.and_(mine, pc.invert(pc.is_in(pairs, earlier)))
        return mine


@dataclass(frozen=True, slots=True)
class ForeignRange:
    """Offsets ``[start, end)`` of a live batch and the sessions it treated as another
    partition's there (rule 6, resync: the ledger entry's ``foreign``)."""

    start: int
    end: int
    sessions: tuple[tuple[str, TopicPartition], ...]


@dataclass(frozen=True, slots=True)
class SchemaRange:
    """Offsets ``[start, end)`` of a live batch and the digest of the table schema it ran
    with (the ledger entry's ``schema``): a recompute reads them with that schema."""

    start: int
    end: int
    digest: str


@dataclass(frozen=True, slots=True)
class PartitionWork:
    """One task: a partition read from ``begin`` with empty state, ``ranges`` written."""

    tp: TopicPartition
    begin: int
    read_end: int
    ranges: tuple[tuple[int, int], ...]
    files: tuple[ArchiveFile, ...]  # the archive files of [begin, read_end)
    foreign: tuple[ForeignRange, ...] = ()  # the live job's rule 6 owners, by range
    rows: tuple[RangeRows, ...] = ()  # which rows of ``ranges`` are theirs (after repairs)
    schemas: tuple[SchemaRange, ...] = ()  # the live job's table schemas, by range

    def owned(self) -> dict[str, RangeRows]:
        """Each range's rows by its files' common name (:func:`range_stem`)."""
        return {range_stem(self.tp, r.start, r.end): r for r in self.rows}

    @property
    def offsets(self) -> int:
        return self.read_end - self.begin


def published_ranges(entries: Iterable[LedgerEntry]) -> list[PublishedRange]:
    """Every range the ledger's batch entries published, with its epoch and limit."""
    epoch = 0
    found: list[tuple[TopicPartition, int, int, LedgerEntry, int]] = []
    repairs: list[tuple[int, LedgerEntry]] = []  # (the epoch it ends, the repair)
    previous: LedgerEntry | None = None
    for entry in entries:
        if entry.kind == ledger_mod.REPAIR:
            repairs.append((epoch, entry))
            epoch += 1
        else:
            for tp, (start, end) in sorted(entry.ranges(previous).items()):
                found.append((tp, start, end, entry, epoch))
        previous = entry
    ranges: list[PublishedRange] = []
    for tp, start, end, entry, number in found:
        repair = next((r for e, r in repairs if e == number and tp in r.end), None)
        limit = None if repair is None else repair.end[tp]
        if limit is not None and limit <= start:
            continue  # entirely removed by the repair, and published again after it
        kept = () if repair is None or limit is None else _adopted(repair, limit, end)
        began = next((r for e, r in repairs if e == number - 1), None)
        earlier = () if began is None else _adopted(began, start, end)
        ranges.append(PublishedRange(tp, start, end, entry, number, limit, kept, earlier))
    return ranges


def group_blocks(entries: Iterable[LedgerEntry]) -> dict[str, frozenset[str]]:
    """The blocks each group's files hold (:func:`~app.engine.segments.group_members`), by the
    group's block, from the batch entries that published them."""
    found: dict[str, frozenset[str]] = {}
    previous: LedgerEntry | None = None
    for entry in entries:
        if entry.kind != ledger_mod.REPAIR:
            published = entry.ranges(previous)
            for relative in entry.files:
                block = rewrite_mod.block_of(relative)
                if block not in found:
                    members = group_members(block, published)
                    if members is not None:
                        found[block] = members
        previous = entry
    return found


def _adopted(repair: LedgerEntry, lo: int, hi: int) -> tuple[tuple[str, int], ...]:
    """The snapshots ``repair`` adopted at offsets in ``[lo, hi)``, as (session, offset)."""
    return tuple(sorted((s, o) for s, o in repair.adopt.items() if lo <= o < hi))


def grid_ranges(tp: TopicPartition, start: int, end: int) -> list[PublishedRange]:
    """Fixed ranges of :data:`OFFSETS_PER_FILE` offsets covering ``[start, end)``.

    For an output without a ledger: the same offsets always get the same
    names, so replays into it never duplicate a row, whatever overlaps.
    """
    first = start // OFFSETS_PER_FILE
    last = math.ceil(end / OFFSETS_PER_FILE)
    return [
        PublishedRange(tp, n * OFFSETS_PER_FILE, (n + 1) * OFFSETS_PER_FILE, None, 0, None)
        for n in range(first, last)
    ]


def works(
    chosen: Iterable[PublishedRange], every: Iterable[PublishedRange], index: ArchiveIndex
) -> list[PartitionWork]:
    """The tasks that recompute ``chosen``: one per partition and epoch.

    ``every`` is all the output's ranges: an epoch begins at the first of its
    partition's ranges, whether chosen or not.
    """
    every = list(every)
    begins: dict[tuple[TopicPartition, int], int] = {}
    for r in every:
        key = (r.tp, r.epoch)
        begins[key] = min(begins.get(key, r.start), r.start)
    groups: dict[tuple[TopicPartition, int], list[PublishedRange]] = {}
    for r in chosen:
        groups.setdefault((r.tp, r.epoch), []).append(r)
    out: list[PartitionWork] = []
    for (tp, epoch), group in sorted(groups.items()):
        begin = begins.get((tp, epoch), min(r.start for r in group))
        read_end = max(r.rows.read_end for r in group)
        held = index.latest(tp) if tp in index.files else begin
        if read_end > held:
            if group[0].entry is not None:
                raise ConfigurationError(
                    f"the archive holds {tp} only up to offset {held - 1} but the output "
                    f"published it up to offset {read_end - 1}: wait until the archive has "
                    "caught up with the live job"
                )
            read_end = held  # a grid range: the archive's end so far
        ranges = tuple(sorted({(r.start, r.end) for r in group}))
        files = tuple(index.covering(tp, begin, read_end)) if read_end > begin else ()
        foreign = tuple(
            ForeignRange(r.start, r.end, tuple(sorted(r.entry.foreign[tp].items())))
            for r in every
            if r.tp == tp and r.epoch == epoch and r.entry is not None and r.entry.foreign.get(tp)
        )
        rows = tuple(sorted({r.rows for r in group}, key=lambda r: r.start))
        schemas = tuple(
            SchemaRange(r.start, r.end, _digest(r.entry.schema))
            for r in sorted(every, key=lambda r: r.start)
            if r.tp == tp and r.epoch == epoch and r.entry is not None
        )
        out.append(PartitionWork(tp, begin, read_end, ranges, files, foreign, rows, schemas))
    return out


def _digest(recorded: str | None) -> str:
    return DEFAULT_SCHEMA.digest if recorded is None else recorded


def recorded_schemas(location: Location, works: Iterable[PartitionWork]) -> dict[str, TableSchema]:
    """Every table schema the ranges ``works`` read were published with, by digest."""
    digests = {r.digest for w in works for r in w.schemas}
    return {d: schemas_mod.load(location, d) for d in sorted(digests)}


def recorded_rules(
    chosen: Iterable[PublishedRange], every: Iterable[PublishedRange]
) -> LiveRules | None:
    """The rules the live job ran with over the state a recompute of ``chosen`` rebuilds
    (every batch of their partitions' epochs); None where the ledger does not say."""
    epochs = {(r.tp, r.epoch) for r in chosen}
    found = {
        r.entry.rules
        for r in every
        if (r.tp, r.epoch) in epochs and r.entry is not None and r.entry.rules is not None
    }
    if len(found) > 1:
        described = "; ".join(sorted(rules.describe() for rules in found))
        raise ConfigurationError(
            f"the live job changed its rules within the ranges to recompute ({described}): "
            "a recompute applies one set; recompute the ranges of each set apart"
        )
    return next(iter(found), None)


def live_rules(recorded: LiveRules | None, given: GivenRules, adopt: Mapping[str, int]) -> Rules:
    """The rules to recompute with: the live job's; an option that contradicts them is
    refused (the rows would differ from what the live job published)."""
    mode, timeout_ms = given.integrity, given.session_timeout_ms
    if recorded is None:
        return Rules(
            mode or IntegrityMode.STRICT, timeout_ms or defaults.SESSION_TIMEOUT_MS, dict(adopt)
        )
    if mode is not None and mode is not recorded.mode:
        raise ConfigurationError(
            f"--integrity {mode.value} differs from the live job's integrity "
            f"{recorded.mode.value} for these ranges (its ledger): leave --integrity out to "
            "recompute with the live job's"
        )
    if timeout_ms is not None and timeout_ms != recorded.timeout_ms:
        raise ConfigurationError(
            f"--session-timeout {spark_interval(timeout_ms)} differs from the live job's "
            f"session timeout of {spark_interval(recorded.timeout_ms)} for these ranges (its "
            "ledger): leave --session-timeout out to recompute with the live job's"
        )
    return Rules(recorded.mode, recorded.timeout_ms, dict(adopt))


class Recomputed(Protocol):
    """A recompute, as its record (:class:`app.recompute.run.RecomputeRecord`) says."""

    @property
    def ranges(self) -> Mapping[str, Sequence[tuple[int, int]]]: ...
    @property
    def job(self) -> JobVersion: ...
    @property
    def processor(self) -> ProcessorRecord | None: ...


def computed_by(r: PublishedRange, recomputes: Iterable[Recomputed]) -> list[LedgerEntry]:
    """The batch entry of ``r`` as it names each code that computed its rows: its own job
    and processor, then those of every recompute (a replay, a correction) that rewrote the
    range."""
    entry = r.entry
    assert entry is not None
    found = [entry]
    for done in recomputes:
        if (r.start, r.end) in done.ranges.get(r.tp.key(), ()):
            processor = done.processor or entry.processor  # older records name none
            found.append(replace(entry, job=done.job, processor=processor))
    return found


def select_entries(
    ranges: Iterable[PublishedRange],
    keep: Callable[[LedgerEntry], bool],
    recomputes: Iterable[Recomputed] = (),
) -> list[PublishedRange]:
    """The published ranges whose rows a code ``keep`` selects computed, when it published
    them or rewrote them since (recomputing a range again only takes time; missing one
    leaves that code's rows)."""
    done = list(recomputes)
    return [r for r in ranges if r.entry is not None and any(map(keep, computed_by(r, done)))]


def files_in_window(
    location: Location, index: ArchiveIndex, since_ms: int, until_ms: int
) -> dict[TopicPartition, list[ArchiveFile]]:
    """Archive files whose records' timestamps may fall in ``[since, until)``.

    From each file's Parquet statistics (its footer alone), never its rows.
    """
    found: dict[TopicPartition, list[ArchiveFile]] = {}
    for tp, files in sorted(index.files.items()):
        for archive_file in files:
            low, high = _timestamp_bounds_ms(location, archive_file)
            if low is None or high is None or (low < until_ms and high >= since_ms):
                found.setdefault(tp, []).append(archive_file)
    return found


def _timestamp_bounds_ms(location: Location, archive_file: ArchiveFile) -> tuple[int | None, ...]:
    with location.fs.open_input_file(archive_file.path) as handle:
        metadata = pq.ParquetFile(handle).metadata
    column = (
        metadata.schema.names.index("timestamp") if "timestamp" in metadata.schema.names else -1
    )
    if column < 0:
        return None, None
    low: int | None = None
    high: int | None = None
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None, None
        lo, hi = _ms(stats.min), _ms(stats.max)
        low = lo if low is None else min(low, lo)
        high = hi if high is None else max(high, hi)
    return low, high


def _ms(value: object) -> int:
    """A Parquet statistic of a UTC timestamp column in ms since the epoch."""
    timestamp = getattr(value, "timestamp", None)
    if callable(timestamp):
        return int(timestamp() * 1000)
    micros: int = value  # type: ignore[assignment]
    return micros // 1000
