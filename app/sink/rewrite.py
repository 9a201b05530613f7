"""Rewriting published files: new names, the old ones retired through the ledger.

A published object is never written again under its name: on S3 a copy over
a key races readers that read its footer and then its pages (torn reads,
apache/arrow#41310), and locally or on HDFS the file would change under a
reader's open handle. A rewrite (``tablecast correct``, ``replay``,
``repair``) therefore publishes each changed file under a new name,
``part-<block>~<rewrite>.parquet``, then retires the names it replaces:

1. Record the rewrite: ``_tablecast/ledger/rewrites/<key>.json`` lists the
   staged files with their new names, the names to retire and the grace
   (``grace_s``) the old names get after the snapshot.
2. Publish each staged file under its new name (no name that exists is
   written: a crashed attempt's copy is kept), then commit the output's
   Iceberg table one overwrite snapshot, where the output keeps one: the
   caller's :class:`TableSnapshot` (:func:`app.table.commit.snapshot_rewrite`;
   the table builds on this module, never the other way). The record then
   says when (``published_at``, wall-clock seconds).
3. Once the grace has run out (``published_at + grace_s``), retire the old
   names.
4. Remove the record.

The grace is for Iceberg readers (pyiceberg, Spark, Athena, DuckDB): a query
plans its scan on the snapshot current when it starts and opens the files
afterwards, so a file the rewrite's snapshot removes is still read for as
long as such a scan lasts; deleted at the commit, the reader would get "file
not found". Iceberg deletes such files only when the snapshots that reference
them expire; here they go once the grace (:data:`DEFAULT_GRACE_S`, or the
commands' ``--retire-grace``) has run out. A plain-listing reader
(``CONTRACT.md`` section 3) meanwhile sees the rewritten blocks' messages in
both the old and the new file (it never misses one), so the grace stays
short, and a rewriting command waits it out before it returns (one progress
line: the dataset is exact for every reader once the command is done), unless
told not to (:attr:`Retirement.wait`). The live job never waits: it leaves the
record, its lease given up, to whoever finds it after the grace.

A crash before step 1 leaves only hidden staging. A crash after it leaves
the record, and someone must finish steps 2 to 4 for it, or the rewritten
blocks stay visible twice. But a record alone does not say whether its
rewrite crashed or is still running (or waiting out its grace), and a second
process carrying out the same steps beside a running rewrite would publish
its names while that one does too. So the record carries a lease: the
rewriting process (its ``owner``) writes ``lease_until`` (wall-clock
seconds, ``LEASE_SECONDS`` ahead) in step 1, renews it while it works or
waits (whenever half of it is used), and gives it up at once when it fails
with an error or leaves the retiring to others. A record whose lease has
run out belongs to a process that died (SIGKILL, lost machine), or to one
that left it:

- The live job (:func:`finish_abandoned`, at start-up and after each
  published batch) finishes it once its grace has run out, and leaves a
  record under a running lease or in its grace alone (logged). Of a record
  not yet published it does step 2 at once, and leaves the rest for after
  the grace.
- A rewriting command (:func:`finish_open`, which ``correct``, ``replay``,
  ``repair`` and ``compact`` run first) finishes it too, waiting out what is
  left of its grace, and refuses to start beside a running one, in one line
  naming it and when its lease runs out. The live job's compaction, which
  must not wait, refuses beside one in its grace as well (the next period
  tries again).

A process that finishes someone else's record first takes the lease (its
own owner and a new ``lease_until``), then reads the record back; if another
process took it meanwhile, it leaves the record to that one. Even then two
processes may finish one record at once (both took it within one write,
or an owner that stalled past its lease wakes up), so every step is safe to
repeat and to run twice at once: a publish whose staged file the other
process already moved keeps that process's copy, the table's snapshot
replaces the same files by the same files (step 2 is skipped for a record
that says it was published), and retiring a name already gone does nothing.
The lease and the grace are compared across machines' clocks: the lease is
long (minutes) beside their skew, and a grace shortened by a skew of
seconds still outlasts a scan's planning. A recorded time further in the
future than :data:`MAX_CLOCK_SKEW_S` comes from a clock that is wrong (the
record names the host that wrote it): it is read as the moment this process
first saw it, with a warning, so a fast clock delays nothing by more than
one lease or grace.

Before each change (publishing, the table's snapshot, retiring) the owner
reads the record back: a record another process took over (the owner paused
past its lease) or finished is theirs, and this process changes nothing
more (:class:`~app.errors.OwnershipLostError` for a command's own rewrite;
the live job just leaves it).

The table's snapshots from before a rewrite are kept (they hold the ledger's
position, :mod:`app.table.commit`, and are not expired): a reader that
travels back to one of them after the grace gets "file not found" for the
files the rewrite retired.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import orjson

from app import defaults
from app.errors import ConfigurationError, OutputStateError, OwnershipLostError
from app.sink import ledger as ledger_mod
from app.storage import Location

log = logging.getLogger(__name__)

REWRITES_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "rewrites")
LEASE_SECONDS = 600.0  # a rewrite's steps 2 to 4 renew it; minutes beside clock skew
# A recorded time this far ahead of this machine's clock is another clock's error.
MAX_CLOCK_SKEW_S = 60.0
# How long an Iceberg scan planned on the snapshot before a rewrite may still open its
# files: a query's run time. Read when a rewrite starts (a test sets its own).
DEFAULT_GRACE_S = defaults.RETIRE_GRACE_S  # a module variable: the tests set it to 0
MAX_GRACE_S = defaults.MAX_RETIRE_GRACE_S
_MARK = "~"  # not in a Kafka topic's name ([a-zA-Z0-9._-]): the rewrite's part of a name


def block_of(relative: str) -> str:
    """``<day directory>/part-<block>[~<rewrite>].parquet`` -> ``<block>``."""
    name = posixpath.basename(relative).removeprefix("part-").removesuffix(".parquet")
    return name.split(_MARK, 1)[0]


def renamed(relative: str, rewrite: str) -> str:
    """The name a rewrite publishes ``relative``'s content under (same directory, same block)."""
    directory = posixpath.dirname(relative)
    return posixpath.join(directory, f"part-{block_of(relative)}{_MARK}{rewrite}.parquet")


@dataclass(frozen=True)
class Rewrite:
    """Files published under new names, and the names they retire (paths relative)."""

    key: str
    publish: tuple[tuple[str, str], ...]  # (staged path, new visible path)
    retire: tuple[str, ...]
    kind: str = "rewrite"  # replay, correction, repair: the Iceberg snapshot's kind
    note: str = ""  # what was rewritten, for the snapshot's summary
    owner: str = ""  # the process carrying it out ("": none; records from before leases)
    lease_until: float = 0.0  # seconds since the epoch; 0: given up (its owner failed or left)
    grace_s: float = 0.0  # how long the old names stay after the snapshot (step 3)
    published_at: float = 0.0  # seconds since the epoch that step 2 ended; 0: not yet
    host: str = ""  # the machine whose clock wrote lease_until and published_at

    def to_json(self) -> bytes:
        doc = {
            "key": self.key,
            "publish": [list(p) for p in self.publish],
            "retire": list(self.retire),
            "kind": self.kind,
            "note": self.note,
            "owner": self.owner,
            "lease_until": self.lease_until,
            "grace_s": self.grace_s,
            "published_at": self.published_at,
            "host": self.host,
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @property
    def published(self) -> bool:
        """Step 2 is done: every new name published, the table's snapshot committed."""
        return self.published_at > 0

    @property
    def retire_at(self) -> float:
        """When the old names may go (seconds since the epoch), once published."""
        return self.published_at + self.grace_s

    def in_grace(self, now: float) -> bool:
        """Published, with old names to retire that readers may still open."""
        return self.published and bool(self.retire) and now < self.retire_at

    def running(self, now: float) -> bool:
        """Whether its owner may still be at work (its lease has not run out)."""
        return now < self.lease_until

    def describe_lease(self) -> str:
        if not self.lease_until:
            return f"owner {self.owner or '?'}, lease given up"
        until = datetime.fromtimestamp(self.lease_until, UTC).isoformat(timespec="seconds")
        return f"owner {self.owner or '?'}, lease until {until}"

    def describe_grace(self) -> str:
        return (
            f"{len(self.retire)} old files retire at {_clock(self.retire_at)}, after readers "
            f"of the table's snapshot before it had {self.grace_s:g} s"
        )

    @classmethod
    def from_json(cls, data: bytes) -> Rewrite:
        doc = orjson.loads(data)
        return cls(
            key=doc["key"],
            publish=tuple((a, b) for a, b in doc["publish"]),
            retire=tuple(doc["retire"]),
            kind=doc.get("kind", "rewrite"),
            note=doc.get("note", ""),
            owner=doc.get("owner", ""),
            lease_until=float(doc.get("lease_until", 0.0)),
            grace_s=float(doc.get("grace_s", DEFAULT_GRACE_S)),
            published_at=float(doc.get("published_at", 0.0)),
            host=str(doc.get("host", "")),
        )


def _clock(seconds: float) -> str:
    """A moment for a progress line: its time, and its date when that is not today."""
    moment = datetime.fromtimestamp(seconds, UTC)
    if moment.date() == datetime.now(UTC).date():
        return moment.strftime("%H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


# Recorded times from a clock ahead of this one, by what recorded them: when this
# process first saw each (time.time()), so that it runs out here after all.
_first_seen: dict[tuple[str, str, float], float] = {}


def _trusted(rewrite: Rewrite, what: str, recorded: float, now: float) -> float:
    """``recorded`` (seconds since the epoch), or when first seen if it is in the future
    beyond :data:`MAX_CLOCK_SKEW_S`: that clock is wrong, not the rewrite's timing."""
    if recorded <= now + MAX_CLOCK_SKEW_S:
        return recorded
    key = (rewrite.key, what, recorded)
    if key not in _first_seen:
        _first_seen[key] = now
        log.warning(
            "rewrite %s of %s: its %s was recorded at %s by host %s, %s s ahead of this "
            "machine's clock: read as now",
            rewrite.key,
            what,
            what,
            _clock(recorded),
            rewrite.host or "?",
            f"{recorded - now:,.0f}",
        )
    return _first_seen[key]


def as_read_now(rewrite: Rewrite, now: float) -> Rewrite:
    """The record with times from a clock far ahead of this one read as when first seen."""
    published_at = rewrite.published_at
    if published_at:
        published_at = _trusted(rewrite, "snapshot time", published_at, now)
    lease_until = rewrite.lease_until
    if lease_until:
        # lease_until is its writer's now plus a lease: that "now" is what is judged.
        lease_until = _trusted(rewrite, "lease", lease_until - LEASE_SECONDS, now) + LEASE_SECONDS
    if (published_at, lease_until) == (rewrite.published_at, rewrite.lease_until):
        return rewrite
    return dataclasses.replace(rewrite, published_at=published_at, lease_until=lease_until)


def check_grace(grace_s: float, *, option: str = "--retire-grace") -> float:
    """A grace within bounds, or a one-line error naming the option."""
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise ConfigurationError(
            f"{option} {grace_s:g} s must be from 0 to {MAX_GRACE_S:g} s: plain-listing "
            "readers see the rewritten blocks twice until it ends"
        )
    return grace_s


@dataclass(frozen=True, kw_only=True)
class Retirement:
    """How a rewrite's old names go after its snapshot (step 3)."""

    grace_s: float | None = None  # None: DEFAULT_GRACE_S
    # Wait out the grace and retire (a command), or leave the record, its lease given
    # up, to whoever finds it after the grace (the live job, which never blocks).
    wait: bool = True
    notice: Callable[[str], None] | None = None  # the waiting's progress line [the log]

    def grace(self) -> float:
        return DEFAULT_GRACE_S if self.grace_s is None else self.grace_s

    def tell(self, line: str) -> None:
        if self.notice is None:
            log.info("%s", line)
        else:
            self.notice(line)


class TableSnapshot(Protocol):
    """The output's table told of a rewrite's new names and retired ones (end of step 2)."""

    def __call__(self, location: Location, rewrite: Rewrite) -> None: ...


class RewriteSteps:
    """Hooks between the steps (tests inject crashes here; they do nothing by default)."""

    def recorded(self) -> None:
        """After step 1."""

    def published(self) -> None:
        """After step 2 (the record says when it ended)."""

    def waiting(self) -> None:
        """In step 3's grace, before each pause of the owner's wait."""


def _record_path(location: Location, key: str) -> str:
    return location.child(REWRITES_DIR, f"{key}.json")


def _now() -> float:
    return time.time()


def _new_owner() -> str:
    return uuid.uuid4().hex[:16]


_HOST = socket.gethostname()


class _Lease:
    """The lease a process holds on one record while it carries out steps 2 to 4."""

    def __init__(self, location: Location, rewrite: Rewrite) -> None:
        self.location = location
        self.rewrite = rewrite

    def write(self, until: float) -> None:
        self.rewrite = dataclasses.replace(self.rewrite, lease_until=until, host=_HOST)
        self.location.write_bytes_atomic(
            _record_path(self.location, self.rewrite.key), self.rewrite.to_json()
        )

    def confirm(self, doing: str) -> None:
        """Raise :class:`OwnershipLostError` unless the record is still this process's."""
        current = _read(self.location, self.rewrite.key)
        if current is not None and current.owner == self.rewrite.owner:
            return
        by = "finished it" if current is None else f"took it over ({current.describe_lease()})"
        raise OwnershipLostError(
            f"rewrite {self.rewrite.key} of {self.location.uri}: another process {by} while "
            f"this one paused past its lease; this one stops before {doing}, changing nothing "
            "more",
            output=self.location.uri,
            rewrite=self.rewrite.key,
            by=current.owner if current is not None else "",
        )

    def published(self) -> None:
        """The end of step 2, recorded: the grace runs from now (unless another process
        took the record over, or finished it: its own record says when, or none is left)."""
        now = _now()
        self.rewrite = dataclasses.replace(self.rewrite, published_at=now)
        current = _read(self.location, self.rewrite.key)
        if current is not None and current.owner == self.rewrite.owner:
            self.write(now + LEASE_SECONDS)

    def renew(self) -> None:
        """A new lease once half of it is used, unless the record is gone or another
        process took it over (this one's steps then repeat that one's, harmlessly)."""
        now = _now()
        if self.rewrite.lease_until - now > LEASE_SECONDS / 2:
            return
        current = _read(self.location, self.rewrite.key)
        if current is not None and current.owner == self.rewrite.owner:
            self.write(now + LEASE_SECONDS)

    def give_up(self) -> None:
        """The owner failed, or leaves the retiring to others: the record is anyone's to
        finish (after its grace)."""
        with contextlib.suppress(Exception):  # best effort: the lease runs out anyway
            current = _read(self.location, self.rewrite.key)
            if current is not None and current.owner == self.rewrite.owner:
                self.write(0.0)


def _read(location: Location, key: str) -> Rewrite | None:
    try:
        return Rewrite.from_json(location.read_bytes(_record_path(location, key)))
    except FileNotFoundError:
        return None  # finished (step 4) meanwhile


def carry_out(
    location: Location,
    rewrite: Rewrite,
    steps: RewriteSteps | None = None,
    *,
    snapshot: TableSnapshot,
    retirement: Retirement | None = None,
) -> bool:
    """Steps 1 to 4; False when the record is left for after the grace (not waiting)."""
    steps = steps or RewriteSteps()
    retirement = retirement or Retirement()
    grace_s = check_grace(retirement.grace())
    lease = _Lease(location, dataclasses.replace(rewrite, owner=_new_owner(), grace_s=grace_s))
    # Step 1
    lease.write(_now() + LEASE_SECONDS)
    return _steps_2_to_4(lease, steps, snapshot, retirement, recorded=True)


def _steps_2_to_4(
    lease: _Lease,
    steps: RewriteSteps,
    snapshot: TableSnapshot,
    retirement: Retirement,
    *,
    recorded: bool = False,
    now: float | None = None,
) -> bool:
    try:
        if recorded:
            steps.recorded()
        return _finish(lease, steps, snapshot, retirement, now)
    except BaseException:
        lease.give_up()
        raise


def _finish(
    lease: _Lease,
    steps: RewriteSteps,
    snapshot: TableSnapshot,
    retirement: Retirement,
    now: float | None,
) -> bool:
    location = lease.location
    if not lease.rewrite.published:
        # Step 2
        lease.confirm("publishing")
        for staged, visible in lease.rewrite.publish:
            lease.renew()
            _publish(location, lease.rewrite, staged, visible)
        lease.renew()
        lease.confirm("the table's snapshot")
        # The Iceberg table's one overwrite snapshot, before any old name goes: its
        # readers see the old files or the new. Done again when a rewrite that crashed
        # before recording its end is finished (the same content; one more snapshot).
        snapshot(location, lease.rewrite)
        lease.published()
        steps.published()
    rewrite = lease.rewrite
    if rewrite.in_grace(_now() if now is None else now):
        if not retirement.wait:
            lease.give_up()  # anyone's once the grace has run out
            log.info("rewrite %s of %s: %s", rewrite.key, location.uri, rewrite.describe_grace())
            return False
        retirement.tell(f"rewrite {rewrite.key}: {rewrite.describe_grace()}")
        _wait_out(lease, steps)
    # Step 3
    lease.confirm("retiring the old names")
    for relative in rewrite.retire:
        with contextlib.suppress(FileNotFoundError):  # another finisher retired it first
            location.delete_file(location.child(relative))
    # Step 4
    with contextlib.suppress(FileNotFoundError):
        location.delete_file(_record_path(location, rewrite.key))
    return True


def _wait_out(lease: _Lease, steps: RewriteSteps) -> None:
    """The owner's wait for the grace to run out, its lease renewed meanwhile."""
    while (left := lease.rewrite.retire_at - _now()) > 0:
        lease.renew()
        steps.waiting()
        time.sleep(min(left, LEASE_SECONDS / 4))


def _publish(location: Location, rewrite: Rewrite, staged: str, visible: str) -> None:
    """One publish of step 2; the staged file may be gone because an earlier attempt, or a
    process finishing the same record at the same time, published it."""
    source, target = location.child(staged), location.child(visible)
    if location.exists(source):
        try:
            location.move(source, target)
            return
        except OSError:
            if not location.exists(target):  # not the other finisher's move: a real failure
                raise
            with contextlib.suppress(OSError):
                location.delete_file(source)
            return
    if not location.exists(target):
        raise OutputStateError(
            f"rewrite {rewrite.key} of {location.uri} cannot finish: its staged file "
            f"{staged} is gone and {visible} was never published; the names it would "
            f"retire stay (remove {posixpath.join(REWRITES_DIR, rewrite.key)}.json and "
            "run the recompute again)",
            output=location.uri,
            rewrite=rewrite.key,
            path=staged,
        )


def open_rewrites(location: Location) -> list[Rewrite]:
    directory = location.child(REWRITES_DIR)
    names = sorted(
        i.base_name for i in location.list_dir(directory) if i.base_name.endswith(".json")
    )
    found = (_read(location, n.removesuffix(".json")) for n in names)
    now = _now()
    return [as_read_now(r, now) for r in found if r is not None]


def _take(location: Location, rewrite: Rewrite) -> _Lease | None:
    """Take over a record whose owner died; None if another process took it first."""
    lease = _Lease(location, dataclasses.replace(rewrite, owner=_new_owner()))
    lease.write(_now() + LEASE_SECONDS)
    current = _read(location, rewrite.key)
    if current is None or current.owner != lease.rewrite.owner:
        log.info(
            "rewrite %s of %s: taken over by another process; left to it", rewrite.key, location.uri
        )
        return None
    return lease


def _finish_one(
    location: Location,
    rewrite: Rewrite,
    snapshot: TableSnapshot,
    retirement: Retirement,
    now: float,
) -> bool:
    """Whether this process finished it (False: taken by another, or left in its grace)."""
    # Only retiring is left of a published one (the live job's compaction leaves that).
    log.log(
        logging.INFO if rewrite.published else logging.WARNING,
        "finishing rewrite %s of %s, %s before (%s): %d files to publish, %d names to retire",
        rewrite.key,
        location.uri,
        "published" if rewrite.published else "interrupted",
        rewrite.describe_lease(),
        0 if rewrite.published else len(rewrite.publish),
        len(rewrite.retire),
    )
    lease = _take(location, rewrite)
    if lease is None:
        return False
    return _steps_2_to_4(lease, RewriteSteps(), snapshot, retirement, now=now)


def finish_open(
    location: Location,
    now: float | None = None,
    *,
    snapshot: TableSnapshot,
    retirement: Retirement | None = None,
) -> list[Rewrite]:
    """Before a rewriting command: finish every rewrite whose owner died or left it (steps
    2 to 4, waiting out what is left of its grace); the ones finished. One that is running
    refuses the command (raises); with ``retirement.wait`` False (the live job's
    compaction), so does one still in its grace."""
    retirement = retirement or Retirement()
    now = _now() if now is None else now
    found = open_rewrites(location)
    running = [r for r in found if r.running(now)]
    if running:
        first = running[0]
        raise OutputStateError(
            f"rewrite {first.key} of {location.uri} is in progress ({first.describe_lease()}; "
            f"its record: {posixpath.join(REWRITES_DIR, first.key)}.json): wait until it "
            "ends, or, if its process is gone, until its lease runs out, and run again",
            output=location.uri,
            rewrite=first.key,
        )
    if not retirement.wait:
        _refuse_in_grace(location, found, now)
    finished = [r for r in found if _finish_one(location, r, snapshot, retirement, now)]
    if not retirement.wait:  # those it published just now
        _refuse_in_grace(location, open_rewrites(location), _now())
    return finished


def _refuse_in_grace(location: Location, found: list[Rewrite], now: float) -> None:
    waiting = [r for r in found if r.in_grace(now)]
    if waiting:
        first = waiting[0]
        raise OutputStateError(
            f"rewrite {first.key} of {location.uri}: {first.describe_grace()}; "
            "run again after that",
            output=location.uri,
            rewrite=first.key,
        )


def finish_abandoned(
    location: Location, now: float | None = None, *, snapshot: TableSnapshot
) -> list[Rewrite]:
    """For the live job, which never waits: finish every rewrite whose owner died or left
    it, once its grace has run out (one not yet published is published, and left for after
    its grace); leave running ones to their owners. A rewrite that cannot finish is logged,
    and the job goes on: its old names stay visible (no row is lost) until the recompute
    runs again."""
    now = _now() if now is None else now
    finished: list[Rewrite] = []
    for rewrite in open_rewrites(location):
        if rewrite.running(now):
            log.info(
                "rewrite %s of %s is in progress (%s): left to its owner",
                rewrite.key,
                location.uri,
                rewrite.describe_lease(),
            )
            continue
        if rewrite.in_grace(now):
            log.info("rewrite %s of %s: %s", rewrite.key, location.uri, rewrite.describe_grace())
            continue
        try:
            if _finish_one(location, rewrite, snapshot, Retirement(wait=False), now):
                finished.append(rewrite)
        except OwnershipLostError:
            log.info(
                "rewrite %s of %s: taken over by another process; left to it",
                rewrite.key,
                location.uri,
            )
        except OutputStateError as exc:
            log.error("%s", exc)
    return finished
