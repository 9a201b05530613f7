"""Folding the ledger: old data entries into a few compressed parts, claims left in place.

A batch a minute is 525,600 numbered entries a year; a start or a batch that
lists or reads them all costs more every day. So the live job folds old data
entries after its commits (steps 10 to 13 of :mod:`app.sink.commit`), as
Delta folds its log into checkpoints, and :meth:`app.sink.ledger.Ledger.entries`
reads the parts and the numbered files as one ledger:

10. Choose the data entries to fold: every one after the last fold but the
    newest, which a batch reads (:data:`LIVE_MIN` at least: the state
    versions' history), those within the table's history, and at most
    :data:`LIVE_MAX` in all; nothing unless :data:`FOLD_MIN` are due. Write
    them as one part of level 0, ``folded/part-00-<first>-<last>.jsonl.gzip``,
    created only if absent (a part's bytes follow from its entries, which
    never change).
11. Write the fold's head, ``folded/head-<last>.json``: the parts hold every
    data entry up to it; every repair's adopted sessions so far (what a start
    needs); the last entry's end in full. Readers take the newest head: what
    is up to it comes from the parts, what is after it from the numbered
    files.
12. Check the fence; delete the numbered files of the folded data entries
    (and of any data entry up to the head that a crash left). Never a claim:
    the entry after any writer's last is another writer's claim, and it must
    stay, or a writer frozen before the fold and woken after it would find
    its next number free (docs/design.md, "One writer").
13. Merge: :data:`FANOUT` parts of one level become one part of the next
    (written first; after the fence, the inputs deleted), so the parts stay
    few: fewer than :data:`FANOUT` per level, a level per factor of
    :data:`FANOUT`. Then remove what a crash left (a part past the head, a
    part another covers) and every head but the newest two.

A crash anywhere leaves one ledger: before the head (step 11) the part is
extra (its entries are still numbered files, and readers stop at the head);
after it, a numbered file up to the head is a copy readers pass over; a
merged part and its inputs hold the same entries. The next fold finishes
what is left (steps 12 and 13 look again every time). A reader that finds a
file gone between listing and reading (the fold moved it) reads again.

The newest entry is never folded (a claim, or among the newest data
entries): :func:`app.sink.fencing.claim` numbers the next claim after it,
and :func:`app.sink.fencing.find_holder` reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.contract.offsets import Offsets
from app.sink import ledger as ledger_mod
from app.sink.fencing import Fence
from app.sink.ledger import FoldedPart, FoldHead, Ledger, LedgerEntry

log = logging.getLogger(__name__)

# Data entries a batch reads stay numbered: the head, and the state versions of the
# few batches before it (app.sink.commit._recorded_states reads the last eight numbers).
LIVE_MIN = 16
LIVE_MAX = 100  # however long the history: a start and a batch list at most this many
FOLD_MIN = 10  # a part holds at least this many entries
FANOUT = 10  # parts of a level merged into one of the next
HEADS_KEPT = 2

PART_WRITTEN = 10
HEAD_WRITTEN = 11
ENTRIES_DELETED = 12
MERGED = 13

# Called after each step (10 to 13), and inside step 12 after each delete (its count).
FoldHook = Callable[[int, int | None], None]


@dataclass(frozen=True)
class FoldReport:
    folded: int  # data entries folded now
    deleted: int  # numbered files deleted (a crashed fold's included)
    merged: int  # parts merged into others


@dataclass
class LedgerFold:
    """The live job's folding of its output's ledger; entries it read are kept in memory
    (entries never change), so a batch reads only the entries new since the last."""

    ledger: Ledger
    _read: dict[int, LedgerEntry] = field(default_factory=dict)

    def _entry(self, number: int) -> LedgerEntry:
        entry = self._read.get(number)
        if entry is None:
            entry = self._read[number] = self.ledger.read(number)
        return entry

    def fold(
        self,
        fence: Fence,
        history_s: float,
        hook: FoldHook | None = None,
        now: datetime | None = None,
    ) -> FoldReport | None:
        """Steps 10 to 13 when enough entries are due; None when nothing was."""
        step = hook or _no_hook
        location = self.ledger.location
        numbers = self.ledger.numbers()
        head, parts = self.ledger.folded()
        through = -1 if head is None else head.through
        self._read = {n: e for n, e in self._read.items() if n in numbers}
        left = [n for n in numbers if n <= through]  # a crash in step 12 left them
        live = [n for n in numbers if n > through]
        due = self._due(live, history_s, now or datetime.now(UTC))
        if (
            not due
            and not [n for n in left if self._entry(n).kind is not ledger_mod.WRITER]
            and not _untidy(parts, through)
        ):
            return None
        fence.check("folding the ledger")  # a writer woken from a pause writes nothing
        folded = 0
        if due:
            # Step 10 (a part a crash left past the head first: its entries are in this one)
            for part in self.ledger.folded_parts():
                if part.first > through:
                    location.delete_file(part.path(location))
            part = FoldedPart(first=due[0].number, last=due[-1].number, level=0)
            previous = head.end if head is not None else {}
            location.create_exclusive(part.path(location), _encode(due, previous))
            step(PART_WRITTEN, None)
            # Step 11
            adopt = dict(head.adopt) if head is not None else {}
            for entry in due:
                if entry.kind is ledger_mod.REPAIR:
                    adopt.update(entry.adopt)
            head = FoldHead(
                through=part.last,
                adopt=adopt,
                end=due[-1].end,
                entries=(head.entries if head is not None else 0) + len(due),
            )
            location.create_exclusive(head.path(location), head.to_json())
            step(HEAD_WRITTEN, None)
            folded = len(due)
            through = head.through
        # Step 12
        fence.check("deleting folded ledger entries")
        gone = [
            n
            for n in numbers
            if n <= through and self._entry(n).kind is not ledger_mod.WRITER  # claims stay
        ]
        for done, number in enumerate(gone, start=1):
            location.delete_file(location.child(ledger_mod.LEDGER_DIR, f"{number:020d}.json"))
            self._read.pop(number, None)
            step(ENTRIES_DELETED, done)
        step(ENTRIES_DELETED, None)
        # Step 13
        merged = self._merge(fence, through)
        step(MERGED, None)
        if folded:
            log.info(
                "ledger of %s: %d entries folded (through entry %d), %d numbered files "
                "deleted, %d parts merged",
                location.uri,
                folded,
                through,
                len(gone),
                merged,
            )
        return FoldReport(folded, len(gone), merged)

    def _due(self, live: list[int], history_s: float, now: datetime) -> list[LedgerEntry]:
        """The data entries to fold now, oldest first (step 10's choice)."""
        if len(live) < LIVE_MIN + FOLD_MIN:  # claims counted: too few either way
            return []
        data = [e for e in (self._entry(n) for n in live) if e.kind is not ledger_mod.WRITER]
        foldable = data[: max(0, len(data) - LIVE_MIN)]
        beyond_max = max(0, len(data) - LIVE_MAX)
        # Oldest first and back to back: a part holds a run of entries.
        count = 0
        for entry in foldable:
            if count >= beyond_max and _age_s(entry, now) <= history_s:
                break
            count += 1
        return foldable[:count] if count >= FOLD_MIN else []

    def _merge(self, fence: Fence, through: int) -> int:
        """Step 13: merge full levels, and remove what crashed folds and merges left."""
        location = self.ledger.location
        merged = 0
        while True:
            parts = [p for p in self.ledger.folded_parts() if p.last <= through]
            stale = [
                p
                for p in self.ledger.folded_parts()
                if p.first > through or any(o.covers(p) for o in parts)
            ]
            if stale:
                fence.check("removing folded parts a crash left")
                for part in stale:
                    location.delete_file(part.path(location))
                continue
            full = _full_level(parts)
            if full is None:
                break
            inputs = full[:FANOUT]
            out = FoldedPart(first=inputs[0].first, last=inputs[-1].last, level=inputs[0].level + 1)
            lines = [
                line
                for part in inputs
                for line in ledger_mod.part_lines(location.read_bytes(part.path(location)))
            ]
            location.create_exclusive(out.path(location), ledger_mod.encode_part(lines))
            fence.check("deleting merged folded parts")
            for part in inputs:
                location.delete_file(part.path(location))
            merged += len(inputs)
            log.debug("ledger of %s: %d entries merged into %s", location.uri, len(lines), out.name)
        heads = self.ledger.fold_heads()
        if len(heads) > HEADS_KEPT:
            fence.check("removing old fold heads")
            for number in heads[:-HEADS_KEPT]:
                location.delete_file(ledger_mod.head_path(location, number))
        return merged


def _no_hook(step: int, done: int | None) -> None:
    return None


def _age_s(entry: LedgerEntry, now: datetime) -> float:
    written = datetime.fromisoformat(entry.written_at)
    if written.tzinfo is None:
        written = written.replace(tzinfo=UTC)
    return (now - written).total_seconds()


def _encode(entries: list[LedgerEntry], previous: Offsets) -> bytes:
    lines: list[bytes] = []
    for entry in entries:
        lines.append(ledger_mod.folded_line(entry, previous))
        previous = entry.end
    return ledger_mod.encode_part(lines)


def _untidy(parts: list[FoldedPart], through: int) -> bool:
    """Whether step 13 has work: a full level, or what a crash left."""
    done = [p for p in parts if p.last <= through]
    return (
        _full_level(done) is not None
        or any(p.first > through for p in parts)
        or any(o.covers(p) for o in parts for p in parts)
    )


def _full_level(parts: list[FoldedPart]) -> list[FoldedPart] | None:
    """The oldest parts of the lowest level that holds :data:`FANOUT` of them."""
    for level in sorted({p.level for p in parts}):
        found = sorted(p for p in parts if p.level == level)
        if len(found) >= FANOUT:
            return found
    return None
