"""The output's own record of what it holds, keyed by source offsets.

``<output>/_tablecast/ledger/<n>.json``, one entry per published micro-batch
(and per repair), says which offsets the visible files cover. ``n`` counts
entries of this output only; Spark's batch numbers are recorded for the
operator's eyes but never used as a key, because they mean nothing to
another checkpoint. Each batch entry also records the rules it ran with and
the rule 6 owners it settled, which a recompute applies
(:mod:`app.recompute.plan`). Beside the numbered entries,
``recomputes/`` records finished recomputes and ``rewrites/`` the rewrites
under way (:mod:`app.sink.rewrite`). Readers of the dataset skip
``_tablecast`` (names that start with ``_`` are hidden).

Every entry is created once and never written again (:meth:`Ledger.append`,
create-if-absent on every storage): two writers can never both record entry
``n``. A writer takes the output by appending a *claim* (kind ``writer``)
under the next number, and each entry it writes after that takes the number
after its last: a writer whose next number another writer took has lost the
output (:mod:`app.sink.fencing`). Claims hold no offsets; :meth:`Ledger.head`
and :meth:`Ledger.entries` give the data entries (batches and repairs) only.

The numbered files do not pile up: the live job folds old data entries into
a few compressed parts under ``folded/`` (:mod:`app.sink.fold`), as Delta's
log checkpoints fold its log, and :meth:`Ledger.entries` reads them and the
numbered files as one ledger. A part never holds a claim: claims stay where
they are, so the number after any writer's last entry is still taken.
"""

from __future__ import annotations

import gzip
import logging
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

import orjson
import pyarrow.fs as pafs

from app.code_version import JobVersion, job_version
from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, TopicPartition, parse_key
from app.durations import spark_interval
from app.engine.machine import IntegrityMode, Rules
from app.engine.state import StateVersion
from app.storage import Location

log = logging.getLogger(__name__)

_T = TypeVar("_T")

CONTROL_DIR = "_tablecast"
LEDGER_DIR = posixpath.join(CONTROL_DIR, "ledger")
STAGING_DIR = posixpath.join(CONTROL_DIR, "staging")  # <claim>/<batch key>/...
PENDING_DIR = posixpath.join(CONTROL_DIR, "pending")  # <claim>.json
# The one pending list of outputs written before claims: an older claim's than any.
LEGACY_PENDING_FILE = posixpath.join(CONTROL_DIR, "pending.json")
LEGACY_CLAIM = -1
# Old data entries, folded (app.sink.fold): parts of entries and the heads that say how far.
FOLDED_DIR = posixpath.join(LEDGER_DIR, "folded")
# A reader that finds a part or an entry gone (a fold moved it meanwhile) reads again.
READ_ATTEMPTS = 5


class EntryKind(StrEnum):
    BATCH = "batch"  # a micro-batch the live job published
    REPAIR = "repair"  # the restart offsets `tablecast repair` set
    WRITER = "writer"  # a writer (the live job, a repair) took the output: a claim


BATCH = EntryKind.BATCH
REPAIR = EntryKind.REPAIR
WRITER = EntryKind.WRITER


@dataclass(frozen=True)
class WriterInfo:
    """Who a claim names: enough for an operator to find the process."""

    writer: str  # a random id, one per process and claim
    role: str  # "run" or "repair"
    host: str
    pid: int
    checkpoint: str | None
    lease_s: float  # how long it may go without renewing its lease before it counts as gone

    def describe(self) -> str:
        where = f", checkpoint {self.checkpoint}" if self.checkpoint else ""
        return f"`tablecast {self.role}` on host {self.host} (pid {self.pid}){where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "writer": self.writer,
            "role": self.role,
            "host": self.host,
            "pid": self.pid,
            "checkpoint": self.checkpoint,
            "lease_s": self.lease_s,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WriterInfo:
        return cls(
            writer=str(doc["writer"]),
            role=str(doc["role"]),
            host=str(doc["host"]),
            pid=int(doc["pid"]),
            checkpoint=doc.get("checkpoint"),
            lease_s=float(doc["lease_s"]),
        )


@dataclass(frozen=True)
class LiveRules:
    """The rules an entry's rows were computed with; a recompute applies the same."""

    mode: IntegrityMode
    timeout_ms: int

    @classmethod
    def of(cls, rules: Rules) -> LiveRules:
        return cls(mode=rules.mode, timeout_ms=rules.timeout_ms)

    def describe(self) -> str:
        return f"integrity {self.mode.value}, session timeout {spark_interval(self.timeout_ms)}"

    def to_json(self) -> dict[str, Any]:
        return {"integrity": self.mode.value, "session_timeout_ms": self.timeout_ms}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> LiveRules | None:
        if doc is None:
            return None
        return cls(mode=IntegrityMode(doc["integrity"]), timeout_ms=int(doc["session_timeout_ms"]))


@dataclass(frozen=True)
class ProcessorRecord:
    """The processor an entry's rows were computed with: its name (``module:Class``, or
    ``table``, the built-in), its state version, the digest of the input schema its
    messages were read with (its document in ``_tablecast/schemas/``) and the version of
    the distribution that held it ("" where none did). The entry's ``schema`` is its
    output schema's."""

    name: str
    state_version: int
    input: str
    version: str = ""

    def describe(self) -> str:
        shown = f" {self.version}" if self.version else ""
        return f"processor {self.name}{shown} (state version {self.state_version})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state_version": self.state_version,
            "input": self.input,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> ProcessorRecord | None:
        if doc is None:
            return None
        return cls(
            name=str(doc["name"]),
            state_version=int(doc["state_version"]),
            input=str(doc["input"]),
            version=str(doc.get("version") or ""),
        )


# Sessions a resync batch treated as another partition's (rule 6): partition -> session -> owner.
ForeignSessions = dict[TopicPartition, dict[str, TopicPartition]]


@dataclass(frozen=True)
class LedgerEntry:
    number: int
    kind: EntryKind
    end: Offsets  # every partition's next offset after this entry
    files: tuple[str, ...] = ()
    rows: int = 0
    checkpoint: str | None = None  # the checkpoint's URI when the entry was written
    checkpoint_id: str | None = None  # Spark's query id in that checkpoint
    batch_id: int | None = None  # for the operator's eyes only
    # session -> offset of the resync snapshot a repair restarts it from
    adopt: dict[str, int] = field(default_factory=dict)
    written_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    # The code that wrote the entry (None in entries older than the field).
    job: JobVersion | None = field(default_factory=job_version)
    # Where each partition's range of a batch began ({} in older entries: the
    # previous entry's end). Ranges [start, end) are what the entry published.
    start: Offsets = field(default_factory=dict)
    # Each partition's last saved state version after this batch entry, the
    # only one the next batch may load (None in entries older than the field).
    states: dict[TopicPartition, StateVersion] | None = None
    # The rules the batch ran with (None in entries older than the field).
    rules: LiveRules | None = None
    # Rule 6 across partitions, as the batch settled it: a recompute rebuilds
    # one partition alone and takes these owners from here.
    foreign: ForeignSessions = field(default_factory=dict)
    # The claim of the writer that wrote it (None in entries older than claims);
    # a claim's own entry names its writer.
    claim: int | None = None
    writer: WriterInfo | None = None
    # The digest of the table schema the entry's rows were computed with, its document
    # in _tablecast/schemas/ (app.sink.schemas); None in older entries: the default.
    schema: str | None = None
    # The processor the rows were computed with (None in older entries: the built-in table
    # processor over ``schema``).
    processor: ProcessorRecord | None = None

    def ranges(self, previous: LedgerEntry | None) -> dict[TopicPartition, tuple[int, int]]:
        """The offsets this batch entry published, per partition (empty ranges left out)."""
        begin = self.start or (previous.end if previous is not None else {})
        found = {tp: (begin.get(tp, end), end) for tp, end in self.end.items()}
        return {tp: (a, b) for tp, (a, b) in found.items() if b > a}

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "number": self.number,
            "kind": self.kind,
            "end": offsets_mod.to_archive_json(self.end),
            "files": list(self.files),
            "rows": self.rows,
            "checkpoint": self.checkpoint,
            "checkpoint_id": self.checkpoint_id,
            "batch_id": self.batch_id,
            "adopt": dict(sorted(self.adopt.items())),
            "written_at": self.written_at,
            "job": None
            if self.job is None
            else {
                "version": self.job.version,
                "commit": self.job.commit,
                "code": self.job.code,
            },
            "start": offsets_mod.to_archive_json(self.start),
            "rules": None if self.rules is None else self.rules.to_json(),
            "foreign": {
                tp.key(): {s: o.key() for s, o in sorted(sessions.items())}
                for tp, sessions in sorted(self.foreign.items())
            },
            "states": None
            if self.states is None
            else {
                tp.key(): {"offset": v.offset, "digest": v.digest}
                for tp, v in sorted(self.states.items())
            },
            "claim": self.claim,
            "writer": None if self.writer is None else self.writer.to_json(),
            "schema": self.schema,
            "processor": None if self.processor is None else self.processor.to_json(),
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes) -> LedgerEntry:
        doc = orjson.loads(data)
        return cls(
            number=doc["number"],
            kind=EntryKind(doc["kind"]),
            end=offsets_mod.from_json(doc["end"]),
            files=tuple(doc["files"]),
            rows=doc["rows"],
            checkpoint=doc["checkpoint"],
            checkpoint_id=doc["checkpoint_id"],
            batch_id=doc["batch_id"],
            adopt=dict(doc.get("adopt", {})),
            written_at=doc["written_at"],
            job=None if doc.get("job") is None else JobVersion(**doc["job"]),
            start=offsets_mod.from_json(doc.get("start") or {}),
            rules=LiveRules.from_json(doc.get("rules")),
            foreign={
                offsets_mod.parse_key(tp): {s: offsets_mod.parse_key(o) for s, o in found.items()}
                for tp, found in (doc.get("foreign") or {}).items()
            },
            states=None
            if doc.get("states") is None
            else {
                parse_key(key): StateVersion(int(v["offset"]), str(v["digest"]))
                for key, v in doc["states"].items()
            },
            claim=doc.get("claim"),
            writer=None if doc.get("writer") is None else WriterInfo.from_json(doc["writer"]),
            schema=doc.get("schema"),
            processor=ProcessorRecord.from_json(doc.get("processor")),
        )


@dataclass(frozen=True)
class Pending:
    """Files a micro-batch is about to publish, written before it publishes."""

    end_key: str
    files: tuple[str, ...]
    claim: int = LEGACY_CLAIM  # the writer whose list it is


@dataclass(frozen=True)
class FoldHead:
    """``folded/head-<through>.json``: how far the fold went, and what a start needs of it."""

    through: int  # every data entry numbered up to here is in the parts (claims never are)
    adopt: dict[str, int]  # every repair's adopted sessions up to ``through``, merged
    end: Offsets  # the end of the last folded data entry, in full (a part keeps its ranges)
    entries: int  # data entries folded in all

    def path(self, location: Location) -> str:
        return head_path(location, self.through)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "through": self.through,
                "adopt": dict(sorted(self.adopt.items())),
                "end": offsets_mod.to_archive_json(self.end),
                "entries": self.entries,
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_json(cls, data: bytes) -> FoldHead:
        doc = orjson.loads(data)
        return cls(
            through=int(doc["through"]),
            adopt={str(s): int(o) for s, o in doc["adopt"].items()},
            end=offsets_mod.from_json(doc["end"]),
            entries=int(doc["entries"]),
        )


# Not ".gz": pyarrow would inflate it on reading.
_PART = re.compile(r"part-(\d{2})-(\d{20})-(\d{20})\.jsonl\.gzip")
_HEAD = re.compile(r"head-(\d{20})\.json")


@dataclass(frozen=True, order=True)
class FoldedPart:
    """``folded/part-<level>-<first>-<last>.jsonl.gzip``: the data entries numbered from
    ``first`` to ``last``, one JSON line each, gzipped. Level 0 is one fold's; a part of
    level n + 1 merges parts of level n."""

    first: int
    last: int
    level: int

    @property
    def name(self) -> str:
        return f"part-{self.level:02d}-{self.first:020d}-{self.last:020d}.jsonl.gzip"

    def path(self, location: Location) -> str:
        return location.child(FOLDED_DIR, self.name)

    def covers(self, other: FoldedPart) -> bool:
        return self != other and self.first <= other.first and other.last <= self.last

    @classmethod
    def parse(cls, name: str) -> FoldedPart | None:
        match = _PART.fullmatch(name)
        if match is None:
            return None
        return cls(first=int(match[2]), last=int(match[3]), level=int(match[1]))


def folded_line(entry: LedgerEntry, previous_end: Offsets) -> bytes:
    """A data entry as a part holds it: without the state versions (only the newest few
    are ever loaded), and a batch with only the partitions it published, each with its
    range's start and end (``previous_end``: the end of the data entry before it, for
    entries older than recorded starts)."""
    doc = orjson.loads(entry.to_json())
    doc["states"] = None
    if entry.kind is BATCH:
        ranges = entry.ranges(LedgerEntry(number=-1, kind=BATCH, end=previous_end, job=None))
        doc["start"] = {tp.key(): a for tp, (a, _) in sorted(ranges.items())}
        doc["end"] = {tp.key(): b for tp, (_, b) in sorted(ranges.items())}
    return orjson.dumps(doc)


def head_path(location: Location, through: int) -> str:
    return location.child(FOLDED_DIR, f"head-{through:020d}.json")


def encode_part(lines: list[bytes]) -> bytes:
    return gzip.compress(b"\n".join(lines), compresslevel=6, mtime=0)  # the same bytes each time


def part_lines(data: bytes) -> list[bytes]:
    return [line for line in gzip.decompress(data).splitlines() if line]


def decode_part(data: bytes) -> list[LedgerEntry]:
    return [LedgerEntry.from_json(line) for line in part_lines(data)]


class Ledger:
    def __init__(self, location: Location) -> None:
        self.location = location

    def _entry_path(self, number: int) -> str:
        return self.location.child(LEDGER_DIR, f"{number:020d}.json")

    def numbers(self) -> list[int]:
        """Every entry's number, claims included, ascending."""
        names = [i.base_name for i in self.location.list_dir(self.location.child(LEDGER_DIR))]
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def head(self) -> LedgerEntry | None:
        """The newest data entry (a batch or a repair); claims after it are passed over."""
        for number in reversed(self.numbers()):
            entry = self.read(number)
            if entry.kind is not WRITER:
                return entry
        return None

    def last(self) -> LedgerEntry | None:
        """The newest entry of any kind, claims included."""
        numbers = self.numbers()
        return self.read(numbers[-1]) if numbers else None

    def exists(self, number: int) -> bool:
        return self.location.exists(self._entry_path(number))

    def read(self, number: int) -> LedgerEntry:
        return LedgerEntry.from_json(self.location.read_bytes(self._entry_path(number)))

    def previous_data(self, number: int) -> LedgerEntry | None:
        """The newest data entry numbered below ``number``."""
        for earlier in reversed([n for n in self.numbers() if n < number]):
            entry = self.read(earlier)
            if entry.kind is not WRITER:
                return entry
        return None

    def entries(self) -> list[LedgerEntry]:
        """The data entries (batches and repairs), oldest first, folded ones included (a
        folded batch entry holds the partitions it published: its ``start`` and ``end``
        name those only); claims left out."""

        def read() -> list[LedgerEntry]:
            numbers = self.numbers()  # before the head: a fold deletes after its head
            head = self.fold_head()
            through = -1 if head is None else head.through
            live = [self.read(n) for n in numbers if n > through]
            folded = [] if head is None else self.folded_entries(head)
            return folded + [e for e in live if e.kind is not WRITER]

        return self._again_if_folded(read)

    def _again_if_folded(self, read: Callable[[], _T]) -> _T:
        """``read()``, again if a fold moved what it read meanwhile (a part merged, an
        entry folded: gone between listing and reading)."""
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                return read()
            except FileNotFoundError:
                if attempt == READ_ATTEMPTS:
                    raise
                log.info("ledger of %s folded while read; reading it again", self.location.uri)
        raise AssertionError("unreachable")  # pragma: no cover

    def all_entries(self) -> list[LedgerEntry]:
        """Every numbered entry still in place, claims included (folded ones are not)."""
        return [self.read(n) for n in self.numbers()]

    def fold_head(self) -> FoldHead | None:
        """The newest fold's head, None if nothing was folded."""
        return self.folded()[0]

    def folded(self) -> tuple[FoldHead | None, list[FoldedPart]]:
        """The newest fold's head and the parts there are, from one listing."""
        names = [i.base_name for i in self._folded_listing()]
        heads = sorted(int(m[1]) for m in map(_HEAD.fullmatch, names) if m is not None)
        parts = sorted(p for p in map(FoldedPart.parse, names) if p is not None)
        if not heads:
            return None, parts
        path = head_path(self.location, heads[-1])
        return FoldHead.from_json(self.location.read_bytes(path)), parts

    def fold_heads(self) -> list[int]:
        """The folds' heads there are (how far each went), oldest first."""
        found = (_HEAD.fullmatch(i.base_name) for i in self._folded_listing())
        return sorted(int(m[1]) for m in found if m is not None)

    def folded_parts(self) -> list[FoldedPart]:
        return self.folded()[1]

    def folded_entries(self, head: FoldHead) -> list[LedgerEntry]:
        """The data entries the parts hold, up to ``head``, each once, oldest first."""
        parts = [p for p in self.folded_parts() if p.first <= head.through]
        # A part another covers is a merge's input its crash left: read the merged one.
        kept = [p for p in parts if not any(o.covers(p) for o in parts)]
        found: dict[int, LedgerEntry] = {}
        for part in kept:
            for entry in decode_part(self.location.read_bytes(part.path(self.location))):
                if entry.number <= head.through:
                    found.setdefault(entry.number, entry)
        return [found[n] for n in sorted(found)]

    def _folded_listing(self) -> list[pafs.FileInfo]:
        return self.location.list_dir(self.location.child(FOLDED_DIR))

    def append(self, entry: LedgerEntry) -> bool:
        """Create entry ``entry.number``; False, writing nothing, if another writer has."""
        return self.location.create_exclusive(self._entry_path(entry.number), entry.to_json())

    def adopted_sessions(self) -> dict[str, int]:
        """Every repair's adopted sessions, merged (the folded ones from the fold's head)."""

        def read() -> dict[str, int]:
            numbers = self.numbers()
            head = self.fold_head()
            adopted: dict[str, int] = {} if head is None else dict(head.adopt)
            for number in numbers:
                if head is None or number > head.through:
                    entry = self.read(number)
                    if entry.kind == REPAIR:
                        adopted.update(entry.adopt)
            return adopted

        return self._again_if_folded(read)

    def _pending_path(self, claim: int) -> str:
        if claim == LEGACY_CLAIM:
            return self.location.child(LEGACY_PENDING_FILE)
        return self.location.child(PENDING_DIR, f"{claim:020d}.json")

    def pending(self, claim: int) -> Pending | None:
        """The pending list of one writer's claim."""
        path = self._pending_path(claim)
        if not self.location.exists(path):
            return None
        doc = orjson.loads(self.location.read_bytes(path))
        return Pending(doc["end_key"], tuple(doc["files"]), claim)

    def pending_lists(self) -> list[Pending]:
        """Every writer's pending list, oldest claim first."""
        claims = [LEGACY_CLAIM] if self.location.exists(self._pending_path(LEGACY_CLAIM)) else []
        for info in self.location.list_dir(self.location.child(PENDING_DIR)):
            stem = info.base_name.removesuffix(".json")
            if info.base_name.endswith(".json") and stem.isdigit():
                claims.append(int(stem))
        found = (self.pending(claim) for claim in sorted(claims))
        return [p for p in found if p is not None]

    def set_pending(self, pending: Pending) -> None:
        self.location.write_bytes_atomic(
            self._pending_path(pending.claim),
            orjson.dumps({"end_key": pending.end_key, "files": list(pending.files)}),
        )

    def clear_pending(self, claim: int) -> None:
        self.location.delete_file(self._pending_path(claim))


def staging_dir(claim: int) -> str:
    """Where one writer's tasks stage their files (relative to the output)."""
    return posixpath.join(STAGING_DIR, f"{claim:020d}")


def retire_unledgered(location: Location, pending: Pending, keep: set[str]) -> list[str]:
    """Delete the files of a pending list that no ledger entry holds (but ``keep``).

    Step 6 made them visible and the batch never reached step 7: the offsets
    they cover are published again by whichever batch covers them next, so
    left in place they would be there twice. Returns what it deleted.
    """
    retired = [f for f in pending.files if f not in keep and location.exists(location.child(f))]
    for relative in retired:
        location.delete_file(location.child(relative))
    if retired:
        shown = ", ".join(retired[:5]) + (" ..." if len(retired) > 5 else "")
        log.warning(
            "retired %d visible files that no ledger entry holds (published by a batch "
            "that never completed, pending list %s): %s",
            len(retired),
            pending.end_key,
            shown,
        )
    return retired
