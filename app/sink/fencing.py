"""Who may change an output: one writer at a time, and a stale one changes nothing.

The live job and ``tablecast repair`` change what an output holds; a second
job started by mistake, or an old driver woken from a long pause (a frozen
VM, a node roll), must never change it beside them. Three mechanisms, each
from what every storage guarantees (local disk, S3, HDFS):

**Claims fence.** A writer takes the output by creating the ledger's next
entry, a claim (kind ``writer``, naming host, pid, checkpoint and lease),
with create-if-absent (:meth:`app.storage.Location.create_exclusive`: a link
locally, a rename HDFS refuses over an existing name, ``If-None-Match: *``
on S3). Every entry it writes afterwards takes the number after its last,
created the same way. So once another writer has claimed, the old one's
next entry is taken: its commit fails and it stops
(:class:`~app.errors.OwnershipLostError`), whatever its clock or its pause.
A claim takes the number read before the writer checked the output: one that
another writer took meanwhile refuses the start, never a number after it.
Before anything it deletes, it checks that the number after its last is
still free (one small request: :meth:`Fence.check`).

**Staging fences publishing.** A writer stages under its own claim
(``_tablecast/staging/<claim>/``) and publishes by moving staged files. The
writer that takes over deletes older claims' staging before it runs, so a
stale writer that wakes in the middle of publishing finds its files gone:
the move fails and nothing lands. Files it had published before the pause
are in its pending list, which the new writer retires.

**Leases tell the living from the gone.** The holder renews
``_tablecast/leases/<claim>.json`` every quarter of its lease. A writer that
finds the output claimed by another watches that lease for up to its
length: a renewal means a live holder, and the start is refused in one line
naming it; none means the holder is gone (or frozen, which fencing makes
safe) and the output is taken. Only the renewal counter is compared, never
one machine's clock against another's. A holder that ended cleanly marks
its lease released, and one on this host whose process is gone counts as
gone at once: a restart waits only when the last holder died elsewhere.

What is left to chance: a pause of more than a lease between a
:meth:`Fence.check` and the deletes it guards (removing a few old state
versions or a pending list's files), which no storage without conditional
deletes can close; docs/design.md ("One writer") says what it can cost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from app import defaults
from app.errors import OutputStateError, OwnershipLostError
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry, WriterInfo
from app.storage import Location

log = logging.getLogger(__name__)

LEASES_DIR = f"{ledger_mod.CONTROL_DIR}/leases"
RENEWALS_PER_LEASE = 4  # the holder renews every quarter of its lease
LEASES_KEPT = 4  # older claims' lease files are removed, but the last few (diagnosis)


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_writer(role: str, checkpoint: str | None, lease_s: float | None = None) -> WriterInfo:
    """This process as a writer of an output."""
    return WriterInfo(
        writer=uuid.uuid4().hex[:16],
        role=role,
        host=socket.gethostname(),
        pid=os.getpid(),
        checkpoint=checkpoint,
        lease_s=defaults.WRITER_LEASE_S if lease_s is None else lease_s,
    )


@dataclass(frozen=True)
class LastCommit:
    """A holder's last ledger entry, for the line that refuses a second job."""

    entry: int
    batch_id: int | None
    at: str

    def describe(self) -> str:
        batch = f" (batch {self.batch_id})" if self.batch_id is not None else ""
        return f"ledger entry {self.entry}{batch} at {self.at}"


@dataclass(frozen=True)
class Lease:
    """``_tablecast/leases/<claim>.json``: a holder's sign of life."""

    claim: int
    info: WriterInfo
    renewals: int = 0
    renewed_at: str = ""  # the holder's clock, for the operator's eyes only
    last_commit: LastCommit | None = None
    released: bool = False  # the holder ended and let the output go

    def to_json(self) -> bytes:
        commit = self.last_commit
        return orjson.dumps(
            {
                "claim": self.claim,
                "writer": self.info.to_json(),
                "renewals": self.renewals,
                "renewed_at": self.renewed_at,
                "last_commit": None
                if commit is None
                else {"entry": commit.entry, "batch_id": commit.batch_id, "at": commit.at},
                "released": self.released,
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_json(cls, data: bytes) -> Lease:
        doc = orjson.loads(data)
        commit = doc.get("last_commit")
        return cls(
            claim=int(doc["claim"]),
            info=WriterInfo.from_json(doc["writer"]),
            renewals=int(doc["renewals"]),
            renewed_at=str(doc.get("renewed_at", "")),
            last_commit=None
            if commit is None
            else LastCommit(int(commit["entry"]), commit.get("batch_id"), str(commit["at"])),
            released=bool(doc.get("released", False)),
        )


def lease_path(location: Location, claim: int, directory: str = LEASES_DIR) -> str:
    return location.child(directory, f"{claim:020d}.json")


def read_lease(location: Location, claim: int, directory: str = LEASES_DIR) -> Lease | None:
    """``directory``: the leases of the output's writers, or of its rewriters
    (:mod:`app.sink.rewriter`)."""
    try:
        return Lease.from_json(location.read_bytes(lease_path(location, claim, directory)))
    except FileNotFoundError:
        return None


def _lease_claims(location: Location) -> list[int]:
    names = (i.base_name for i in location.list_dir(location.child(LEASES_DIR)))
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


@dataclass(frozen=True)
class Holder:
    """The writer whose claim is the output's newest."""

    claim: int
    info: WriterInfo
    lease: Lease | None  # None: it claimed and has not written its lease (or never will)

    def describe(self) -> str:
        last = self.lease.last_commit if self.lease is not None else None
        commit = f", last commit {last.describe()}" if last else ", nothing committed yet"
        return f"{self.info.describe()} (claim {self.claim}{commit})"


def find_holder(ledger: Ledger) -> Holder | None:
    """The newest claim and its lease; None for an output nobody has claimed.

    A holder writes its lease before it writes any other entry, so a claim
    newer than every lease is the ledger's last entry, if any: the newest
    lease file and the last entry are all there is to read.
    """
    location = ledger.location
    last = ledger.last()
    if last is not None and last.kind is ledger_mod.WRITER and last.writer is not None:
        return Holder(last.number, last.writer, read_lease(location, last.number))
    claims = _lease_claims(location)
    if not claims:
        return None
    lease = read_lease(location, claims[-1])
    if lease is None:
        return None
    return Holder(lease.claim, lease.info, lease)


# Writers of this process whose lease a LeaseKeeper renews: a claim of this process
# that is not among them belongs to a run that has ended (a test's, a failed attempt's).
_renewing: set[str] = set()


def _process_gone(info: WriterInfo) -> bool:
    """Whether a holder on this host has no process any more (a kill, a crash)."""
    if info.host != socket.gethostname():
        return False
    if info.pid == os.getpid():
        return info.writer not in _renewing
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # a process of another user: alive
    return False


def let_go(holder: Holder) -> bool:
    """Whether the holder is known gone without watching: it released its lease, or it
    ran on this host and its process is gone."""
    lease = holder.lease
    return (lease is not None and lease.released) or _process_gone(holder.info)


def renewing_holder(
    location: Location,
    holder: Holder,
    notice: Callable[[str], None] | None = None,
    directory: str = LEASES_DIR,
    named: str | None = None,
) -> Holder | None:
    """The holder as its latest renewal shows it, if it still renews its lease (watched
    for up to one lease); None if it is gone. ``named``: the holder in the notice [its
    description as a writer]."""
    lease = holder.lease
    if let_go(holder):
        return None
    seen = None if lease is None else lease.renewals
    lease_s = holder.info.lease_s
    if notice is not None:
        notice(
            f"output {location.uri} is claimed by {named or holder.describe()}: watching its "
            f"lease for "
            f"up to {lease_s:g} s to tell whether it is still running"
        )
    deadline = time.monotonic() + lease_s + lease_s / RENEWALS_PER_LEASE
    while time.monotonic() < deadline:
        time.sleep(min(1.0, lease_s / 10))
        now = read_lease(location, holder.claim, directory)
        if now is not None and now.renewals != seen:
            return None if now.released else replace(holder, lease=now)
        if _process_gone(holder.info):
            return None
    return None


def refuse_if_held(
    location: Location,
    notice: Callable[[str], None] | None = None,
    gone: Holder | None = None,
) -> Holder | None:
    """Raise, naming it, if a live writer holds the output; else the last holder (or None).

    Nothing is written: a refused writer leaves the output as it found it.
    ``gone``: a holder this process has already watched go quiet; found again
    with its lease as it was then, it is not watched a second time.
    """
    holder = find_holder(Ledger(location))
    if holder is not None and gone is not None and holder == gone:
        return holder
    alive = None if holder is None else renewing_holder(location, holder, notice)
    if alive is not None:
        raise OutputStateError(
            f"output {location.uri} is held by a running writer: {alive.describe()}; "
            "stop it first, or give this run another --output",
            output=location.uri,
            claim=alive.claim,
            host=alive.info.host,
        )
    return holder


class Fence:
    """This writer's hold on the output: its claim and the number of its last entry."""

    def __init__(self, ledger: Ledger, claim: int, info: WriterInfo) -> None:
        self.ledger = ledger
        self.claim = claim
        self.info = info
        self.last = claim

    @property
    def location(self) -> Location:
        return self.ledger.location

    def _lost(self, number: int, doing: str) -> OwnershipLostError:
        try:
            taken = self.ledger.read(number)
        except FileNotFoundError:  # pragma: no cover - created, then gone: never removed
            taken = None
        if taken is not None and taken.kind is ledger_mod.WRITER and taken.writer is not None:
            by = f"claimed by {taken.writer.describe()}"
        elif taken is not None:
            by = f"taken by a {taken.kind} entry of claim {taken.claim}"
        else:
            by = "taken"
        return OwnershipLostError(
            f"output {self.location.uri} was taken over while this {self.info.role} paused: "
            f"ledger entry {number} was {by}; this process stops before {doing}, having "
            "changed nothing since, and the writer that took over carries on",
            output=self.location.uri,
            claim=self.claim,
            by=number,
        )

    def check(self, doing: str) -> None:
        """Raise :class:`OwnershipLostError` if another writer took the output."""
        number = self.last + 1
        if self.ledger.exists(number):
            raise self._lost(number, doing)

    def append(self, entry: LedgerEntry, doing: str = "recording it") -> LedgerEntry:
        """``entry`` under this writer's next number, created only if nobody took it."""
        number = self.last + 1
        entry = replace(entry, number=number, claim=self.claim)
        if not self.ledger.append(entry):
            raise self._lost(number, doing)
        self.last = number
        return entry

    def holds(self) -> bool:
        return not self.ledger.exists(self.last + 1)


class FollowingFence(Fence):
    """A writer's fence in another of its processes, which does not see the writer's entries
    being made (Spark's planner, which runs the job's source: :mod:`app.spark.planning`).

    It follows them in the ledger instead: an entry of its claim after the last it knows
    is the writer's own, any other entry there is another writer's. Each of the writer's
    entries is read once, so a check costs a read of the entry after the last (a HEAD on
    S3, nothing there) and a read of each entry the writer made since the check before (a
    trigger's batch: one). A fold never deletes the newest data entries
    (:data:`app.sink.fold.LIVE_MIN`), and a check before each batch is behind by one.
    """

    def check(self, doing: str) -> None:
        foreign = self._follow()
        if foreign is not None:
            raise self._lost(foreign, doing)

    def holds(self) -> bool:
        return self._follow() is None

    def _follow(self) -> int | None:
        """Passes over the writer's entries after the last it knows: the number of the
        first entry of another writer's, or None when the ledger ends in the writer's."""
        while True:
            number = self.last + 1
            try:
                entry = self.ledger.read(number)
            except FileNotFoundError:
                return None
            if entry.claim != self.claim:
                return number
            self.last = number


def next_number(location: Location) -> int:
    """The number the output's next ledger entry takes."""
    last = Ledger(location).last()
    return 0 if last is None else last.number + 1


def claim(location: Location, info: WriterInfo, number: int | None = None) -> Fence:
    """Take the output: the ledger's next entry, a claim naming this writer.

    ``number``: the one :func:`next_number` gave before this writer checked the output
    (:func:`refuse_if_held`, and what else it checks); None: the next one now. An entry
    another writer made since, while this one watched a holder's lease or paused, takes
    it: the claim is refused in one line naming that writer, which keeps the output (a
    claim after it would take over a writer this one never saw). Two writers starting
    at once: one gets the number, the other is refused the same way.
    """
    ledger = Ledger(location)
    current = next_number(location)
    if number is None:
        number = current
    elif current > number:  # taken, and perhaps folded since: never claimed in the past
        raise _taken(ledger, number)
    head = ledger.head()
    entry = LedgerEntry(
        number=number,
        kind=ledger_mod.WRITER,
        end=head.end if head is not None else {},
        checkpoint=info.checkpoint,
        claim=number,
        writer=info,
    )
    if not ledger.append(entry):
        raise _taken(ledger, number)
    location.write_bytes_atomic(
        lease_path(location, number), Lease(number, info, renewed_at=_now_text()).to_json()
    )
    log.info("claimed output %s as ledger entry %d (%s)", location.uri, number, info.describe())
    return Fence(ledger, number, info)


def _taken(ledger: Ledger, number: int) -> OutputStateError:
    """The refusal of a claim whose number another writer took, naming it (the holder of
    the output, when that entry is a batch of its)."""
    location = ledger.location
    try:
        other: LedgerEntry | None = ledger.read(number)
    except FileNotFoundError:  # folded since
        other = None
    holder = find_holder(ledger)
    if other is not None and other.writer is not None:
        who = other.writer.describe()
    elif holder is not None:
        who = holder.info.describe()
    else:
        who = "another writer" if other is None else f"a {other.kind} entry"
    return OutputStateError(
        f"output {location.uri}: another writer took ledger entry {number} while this one "
        f"started ({who}); only one may write it",
        output=location.uri,
        claim=number,
    )


def remove_old_leases(fence: Fence) -> None:
    """Older claims' lease files but the last few (one per start: bounded)."""
    location = fence.location
    older = [c for c in _lease_claims(location) if c < fence.claim]
    for claim_number in older[:-LEASES_KEPT] if len(older) > LEASES_KEPT else []:
        location.delete_file(lease_path(location, claim_number))


class Holding(Protocol):
    """A claim this process holds: a writer's :class:`Fence`, a rewriter's
    (:class:`app.sink.rewriter.RewriterClaim`)."""

    @property
    def location(self) -> Location: ...

    @property
    def claim(self) -> int: ...

    @property
    def info(self) -> WriterInfo: ...

    def holds(self) -> bool: ...


class LeaseKeeper:
    """Renews the holder's lease from a thread while it writes; releases it at the end.

    It stops renewing as soon as the output is another's. A renewal in
    flight when the holder froze (checked before the other claimed, written
    after) is the one write a stale holder can still make: into its own
    claim's lease file, which no writer reads once a newer claim exists
    (:func:`find_holder` reads the newest claim's).
    """

    def __init__(self, fence: Holding, directory: str = LEASES_DIR) -> None:
        self.fence = fence
        self.directory = directory
        self._lease = Lease(fence.claim, fence.info, renewed_at=_now_text())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def start(self) -> LeaseKeeper:
        _renewing.add(self.fence.info.writer)
        self._thread = threading.Thread(target=self._run, name="tablecast-lease", daemon=True)
        self._thread.start()
        return self

    def committed(self, entry: LedgerEntry) -> None:
        """Note the holder's last commit (the next renewal publishes it)."""
        with self._lock:
            self._lease = replace(
                self._lease, last_commit=LastCommit(entry.number, entry.batch_id, _now_text())
            )

    def _write(self, **changes: Any) -> None:
        with self._lock:
            self._lease = replace(self._lease, renewed_at=_now_text(), **changes)
            data = self._lease.to_json()
        self.fence.location.write_bytes_atomic(
            lease_path(self.fence.location, self.fence.claim, self.directory), data
        )

    def _run(self) -> None:
        interval = self.fence.info.lease_s / RENEWALS_PER_LEASE
        while not self._stop.wait(interval):
            try:
                if not self.fence.holds():
                    self.lost = True
                    log.warning(
                        "output %s: another writer took it over; this one's lease is no "
                        "longer renewed",
                        self.fence.location.uri,
                    )
                    return
                self._write(renewals=self._lease.renewals + 1)
            except Exception:  # a storage hiccup: the next renewal tries again
                log.warning(
                    "could not renew the lease on %s", self.fence.location.uri, exc_info=True
                )

    def stop(self, release: bool) -> None:
        """Stop renewing; ``release``: let the output go at once, if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        _renewing.discard(self.fence.info.writer)
        if release and not self.lost:
            try:
                if self.fence.holds():
                    self._write(released=True)
            except Exception:  # the lease runs out anyway
                log.warning(
                    "could not release the lease on %s", self.fence.location.uri, exc_info=True
                )
