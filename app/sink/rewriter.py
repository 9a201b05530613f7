"""One rewriter at a time: a rewriting command's claim, from before it plans until it ends.

A rewrite's record (:mod:`app.sink.rewrite`) makes a second rewriter refuse,
but it exists only once its rewriter has planned: a compaction has staged
its merged files and written its history by then, a recompute its
recomputed files. A second rewriter started in that window would see
nothing, start too and plan from the same files (two compactions deleting
each other's staging; a compaction merging the old rows of files a
correction is about to retire). So every rewriter (``tablecast compact``,
the live job's scheduled compaction, ``replay``, ``correct``, ``repair``)
first takes the output's rewriter claim and holds it until it has ended,
built as the writers' claims are (:mod:`app.sink.fencing`, whose leases it
shares):

- **Claims.** ``_tablecast/rewriters/<n>.json`` names the rewriter (host,
  pid, command, lease); the next rewriter creates number ``n + 1`` with
  create-if-absent (:meth:`app.storage.Location.create_exclusive`): of two
  starting at once, one gets it, the other is refused in one line naming it.
- **Leases.** The holder renews ``_tablecast/rewriters/leases/<n>.json``
  from a thread every quarter of its lease and marks it released when it
  ends. A newer rewriter finding it neither released nor gone (on this host:
  its process is gone) watches it for up to a lease: a renewal means a live
  holder, and the start is refused in one line naming it and its lease;
  none means it is gone (SIGKILL, a lost machine, or frozen), and the claim
  is taken over. Only the renewal counter is compared, never two machines'
  clocks. The live job's scheduled compaction never waits: it skips a
  period beside a holder, and takes the claim over when it finds the same
  lease unrenewed a lease or more after it first saw it.
- **Fence.** A holder that paused past its lease and woke after a takeover
  finds the number after its own taken (:meth:`RewriterClaim.check`, one
  small request) before each point of no return: its first step's tidying
  (finishing others' rewrites, dropping what interrupted compactions left or
  its selection's earlier staging, which may be the staging of the one that
  took over), writing a compaction's history, a recompute's staging of its
  rewrite's merged files (a recompute of the same selection that took over
  stages into the same folder), recording its rewrite. It stops there,
  having at most staged (which the one that took over deletes), and its
  lease is no longer renewed.

What is left to chance, as with the writers' fence: a pause of more than a
lease between the last check and the rewrite's record it guards. Once the
record exists, its own lease (:mod:`app.sink.rewrite`) guards its steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from app import defaults
from app.errors import OutputStateError, OwnershipLostError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink.ledger import WriterInfo
from app.storage import Location

log = logging.getLogger(__name__)

CLAIMS_DIR = f"{ledger_mod.CONTROL_DIR}/rewriters"
LEASES_DIR = f"{CLAIMS_DIR}/leases"
CLAIMS_KEPT = 4  # older claims (and their leases) are removed, but the last few (diagnosis)
# A rewriter's lease (a module variable: the tests shorten it).
DEFAULT_LEASE_S = defaults.WRITER_LEASE_S


def _claim_path(location: Location, number: int) -> str:
    return location.child(CLAIMS_DIR, f"{number:020d}.json")


def _claims(location: Location) -> list[int]:
    names = (i.base_name for i in location.list_dir(location.child(CLAIMS_DIR)))
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def _read_claim(location: Location, number: int) -> WriterInfo | None:
    try:
        doc = orjson.loads(location.read_bytes(_claim_path(location, number)))
    except FileNotFoundError:  # removed as an old claim meanwhile
        return None
    return WriterInfo.from_json(doc["rewriter"])


def find_holder(location: Location) -> fencing.Holder | None:
    """The newest rewriter claim and its lease; None if no rewriter ever claimed."""
    claims = _claims(location)
    if not claims:
        return None
    info = _read_claim(location, claims[-1])
    if info is None:
        return None
    return fencing.Holder(claims[-1], info, fencing.read_lease(location, claims[-1], LEASES_DIR))


def _describe(holder: fencing.Holder) -> str:
    lease = holder.lease
    renewed = f", last renewed at {lease.renewed_at} by its clock" if lease else ""
    return (
        f"{holder.info.describe()}, rewriter claim {holder.claim}: its lease runs out "
        f"{holder.info.lease_s:g} s after its last renewal{renewed}"
    )


def _refusal(location: Location, holder: fencing.Holder) -> OutputStateError:
    return OutputStateError(
        f"output {location.uri} is being rewritten by {_describe(holder)}; wait until it "
        "ends, or, if its process is gone, until its lease runs out, and run again",
        output=location.uri,
        claim=holder.claim,
        host=holder.info.host,
    )


@dataclass(frozen=True)
class RewriterClaim:
    """This process's rewriter claim on an output (a :class:`fencing.Holding`)."""

    location: Location
    claim: int
    info: WriterInfo

    def holds(self) -> bool:
        """No newer claim: the next number is free, and this one is still there (old claims
        are removed in order, once newer ones exist: the next number's too, after this)."""
        location = self.location
        if location.exists(_claim_path(location, self.claim + 1)):
            return False
        return location.exists(_claim_path(location, self.claim))

    def check(self, doing: str) -> None:
        """Raise :class:`OwnershipLostError` if another rewriter took the claim over."""
        if self.holds():
            return
        taken = _read_claim(self.location, self.claim + 1)
        by = taken.describe() if taken is not None else "another rewriter"
        raise OwnershipLostError(
            f"output {self.location.uri}: {by} took the rewriter claim over while this "
            f"`tablecast {self.info.role}` paused past its lease; this one stops before "
            f"{doing}, changing nothing more (what it staged is the other's to drop)",
            output=self.location.uri,
            claim=self.claim,
            by=self.claim + 1,
        )


@dataclass
class Claimant:
    """Who takes the claim, and how it treats a holder."""

    role: str  # the command, as `tablecast <role>` names it
    # Watch a holder's lease for up to its length (a command); False: never wait, refuse
    # at once (the live job, which takes over a holder it saw unrenewed a lease ago).
    watch: bool = True
    notice: Callable[[str], None] | None = None
    lease_s: float | None = None  # None: DEFAULT_LEASE_S
    _quiet: tuple[fencing.Holder, float] | None = field(default=None, init=False, repr=False)

    def _alive(self, location: Location, holder: fencing.Holder) -> fencing.Holder | None:
        if self.watch:
            return fencing.renewing_holder(
                location,
                holder,
                self.notice,
                LEASES_DIR,
                named=f"{holder.info.describe()} (rewriter claim {holder.claim})",
            )
        if fencing.let_go(holder):
            return None
        now = time.monotonic()
        if self._quiet is not None and self._quiet[0] == holder:
            lease_s = holder.info.lease_s
            if now - self._quiet[1] >= lease_s + lease_s / fencing.RENEWALS_PER_LEASE:
                return None
            return holder
        self._quiet = (holder, now)
        return holder

    def refuse_if_held(self, location: Location) -> fencing.Holder | None:
        """Raise, naming it, if a live rewriter holds the output; else the last one."""
        holder = find_holder(location)
        alive = None if holder is None else self._alive(location, holder)
        if alive is not None:
            raise _refusal(location, alive)
        return holder

    def take(self, location: Location) -> RewriterClaim:
        """The claim, or a one-line refusal naming the live rewriter that holds it."""
        last = self.refuse_if_held(location)
        number = _next_number(location, last)
        lease_s = DEFAULT_LEASE_S if self.lease_s is None else self.lease_s
        info = fencing.new_writer(self.role, None, lease_s)
        document = orjson.dumps({"claim": number, "rewriter": info.to_json()})
        if not location.create_exclusive(_claim_path(location, number), document):
            other = find_holder(location)
            raise (
                _refusal(location, other)
                if other is not None
                else OutputStateError(
                    f"output {location.uri}: another rewriter took rewriter claim {number} while "
                    "this one started; run again",
                    output=location.uri,
                    claim=number,
                )
            )
        location.write_bytes_atomic(
            fencing.lease_path(location, number, LEASES_DIR),
            fencing.Lease(number, info, renewed_at=_now_text()).to_json(),
        )
        if last is not None and not (last.lease is not None and last.lease.released):
            log.warning(
                "output %s: rewriter claim %d taken over from %s",
                location.uri,
                number,
                _describe(last),
            )
        _remove_old(location, number)
        return RewriterClaim(location, number, info)


def _next_number(location: Location, last: fencing.Holder | None) -> int:
    claims = _claims(location)
    return max([*claims, -1 if last is None else last.claim]) + 1


def _now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _remove_old(location: Location, number: int) -> None:
    for old in _claims(location):
        if old < number - CLAIMS_KEPT:
            location.delete_file(_claim_path(location, old))
            lease = fencing.lease_path(location, old, LEASES_DIR)
            if location.exists(lease):
                location.delete_file(lease)


@contextmanager
def held(location: Location, claimant: Claimant) -> Iterator[RewriterClaim]:
    """The output's rewriter claim, its lease renewed, for the block; released after."""
    claim = claimant.take(location)
    keeper = fencing.LeaseKeeper(claim, LEASES_DIR).start()
    try:
        yield claim
    finally:
        keeper.stop(release=True)


@dataclass(frozen=True)
class HeldOutput:
    """What a rewriting tool that also writes the output holds: both claims."""

    rewriting: RewriterClaim
    fence: fencing.Fence


@contextmanager
def holding_output(
    location: Location, claimant: Claimant, writer: WriterInfo
) -> Iterator[HeldOutput]:
    """The output held by a tool that rewrites it and writes its ledger (``repair``,
    ``table --rebuild``), for the block: refused beside a live writer, then the rewriter
    claim, then the writer's claim, both leases renewed and released after.

    The writer's claim takes the number read before the checks: a writer that claimed
    while this one watched a holder's lease keeps the output (:func:`fencing.claim`). A
    holder woken after another rewriter took over stops at its check, having claimed
    nothing."""
    number = fencing.next_number(location)
    fencing.refuse_if_held(location, claimant.notice)
    with held(location, claimant) as rewriting:
        rewriting.check("claiming the output")
        fence = fencing.claim(location, writer, number)
        lease = fencing.LeaseKeeper(fence).start()
        try:
            yield HeldOutput(rewriting, fence)
        finally:
            lease.stop(release=True)
