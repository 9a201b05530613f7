"""Rewriting published files: new names, the old ones retired through the ledger.

A published object is never written again under its name: on S3 a copy over
a key races readers that read its footer and then its pages (torn reads,
apache/arrow#41310), and locally or on HDFS the file would change under a
reader's open handle. A rewrite (``tablecast correct``, ``replay``,
``repair``) therefore publishes each changed file under a new name,
``part-<block>~<rewrite>.parquet``, then retires the names it replaces:

1. Record the rewrite: ``_tablecast/ledger/rewrites/<key>.json`` lists the
   staged files with their new names and the names to retire.
2. Publish each staged file under its new name (no name that exists is
   written: a crashed attempt's copy is kept), then commit the output's
   Iceberg table one overwrite snapshot, where the output keeps one: the
   caller's :class:`TableSnapshot` (:func:`app.table.commit.snapshot_rewrite`;
   the table builds on this module, never the other way).
3. Retire the old names.
4. Remove the record.

A crash before step 1 leaves only hidden staging. A crash after it leaves
the record, and someone must finish steps 2 to 4 for it, or the rewritten
blocks stay visible twice. But a record alone does not say whether its
rewrite crashed or is still running, and a second process carrying out
the same steps beside a running rewrite would publish its names while that
one does too. So the record carries a lease: the rewriting process (its
``owner``) writes ``lease_until`` (wall-clock seconds, ``LEASE_SECONDS``
ahead) in step 1, renews it while it works (whenever half of it is used),
and gives it up at once when it fails with an error. A record whose lease
has run out belongs to a process that died (SIGKILL, lost machine):

- The live job (:func:`finish_abandoned`, at start-up and after each
  published batch) finishes it, and leaves a record under a running lease
  alone (logged).
- A rewriting command (:func:`finish_open`, which ``correct``, ``replay``
  and ``repair`` run first) finishes it too, and refuses to start beside a
  running one, in one line naming it and when its lease runs out.

A process that finishes someone else's record first takes the lease (its
own owner and a new ``lease_until``), then reads the record back; if another
process took it meanwhile, it leaves the record to that one. Even then two
processes may finish one record at once (both took it within one write,
or an owner that stalled past its lease wakes up), so every step is safe to
repeat and to run twice at once: a publish whose staged file the other
process already moved keeps that process's copy, the table's snapshot
replaces the same files by the same files, and retiring a name already
gone does nothing. The lease is compared across machines' clocks: it is
long (minutes) beside their skew.

Between steps 2 and 3 a plain-listing reader sees the rewritten blocks'
messages in both the old and the new file; it never misses one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import orjson

from app.errors import OutputStateError
from app.sink import ledger as ledger_mod
from app.storage import Location

log = logging.getLogger(__name__)

REWRITES_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "rewrites")
LEASE_SECONDS = 600.0  # a rewrite's steps 2 to 4 renew it; minutes beside clock skew
_MARK = "~"  # not in a Kafka topic's name ([a-zA-Z0-9._-]): the rewrite's part of a name


def block_of(relative: str) -> str:
    """``date=<day>/part-<block>[~<rewrite>].parquet`` -> ``<block>``."""
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
    lease_until: float = 0.0  # seconds since the epoch; 0: given up (its owner failed)

    def to_json(self) -> bytes:
        doc = {
            "key": self.key,
            "publish": [list(p) for p in self.publish],
            "retire": list(self.retire),
            "kind": self.kind,
            "note": self.note,
            "owner": self.owner,
            "lease_until": self.lease_until,
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    def running(self, now: float) -> bool:
        """Whether its owner may still be at work (its lease has not run out)."""
        return now < self.lease_until

    def describe_lease(self) -> str:
        until = datetime.fromtimestamp(self.lease_until, UTC).isoformat(timespec="seconds")
        return f"owner {self.owner or '?'}, lease until {until}"

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
        )


class TableSnapshot(Protocol):
    """The output's table told of a rewrite's new names and retired ones (end of step 2)."""

    def __call__(self, location: Location, rewrite: Rewrite) -> None: ...


class RewriteSteps:
    """Hooks between the steps (tests inject crashes here; they do nothing by default)."""

    def recorded(self) -> None:
        """After step 1."""

    def published(self) -> None:
        """After step 2."""


def _record_path(location: Location, key: str) -> str:
    return location.child(REWRITES_DIR, f"{key}.json")


def _now() -> float:
    return time.time()


def _new_owner() -> str:
    return uuid.uuid4().hex[:16]


class _Lease:
    """The lease a process holds on one record while it carries out steps 2 to 4."""

    def __init__(self, location: Location, rewrite: Rewrite) -> None:
        self.location = location
        self.rewrite = rewrite

    def write(self, until: float) -> None:
        self.rewrite = dataclasses.replace(self.rewrite, lease_until=until)
        self.location.write_bytes_atomic(
            _record_path(self.location, self.rewrite.key), self.rewrite.to_json()
        )

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
        """The owner failed: the record is at once anyone's to finish."""
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
) -> None:
    """Steps 1 to 4."""
    steps = steps or RewriteSteps()
    lease = _Lease(location, dataclasses.replace(rewrite, owner=_new_owner()))
    # Step 1
    lease.write(_now() + LEASE_SECONDS)
    _steps_2_to_4(lease, steps, snapshot, recorded=True)


def _steps_2_to_4(
    lease: _Lease, steps: RewriteSteps, snapshot: TableSnapshot, recorded: bool = False
) -> None:
    try:
        if recorded:
            steps.recorded()
        _finish(lease, steps, snapshot)
    except BaseException:
        lease.give_up()
        raise


def _finish(lease: _Lease, steps: RewriteSteps, snapshot: TableSnapshot) -> None:
    location, rewrite = lease.location, lease.rewrite
    # Step 2
    for staged, visible in rewrite.publish:
        lease.renew()
        _publish(location, rewrite, staged, visible)
    lease.renew()
    # The Iceberg table's one overwrite snapshot, before any old name goes: its
    # readers see the old files or the new, and never a retired one. Done again
    # when a crashed rewrite is finished (the same content; one more snapshot).
    snapshot(location, rewrite)
    steps.published()
    lease.renew()
    # Step 3
    for relative in rewrite.retire:
        with contextlib.suppress(FileNotFoundError):  # another finisher retired it first
            location.delete_file(location.child(relative))
    # Step 4
    with contextlib.suppress(FileNotFoundError):
        location.delete_file(_record_path(location, rewrite.key))


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
    return [r for r in found if r is not None]


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


def _finish_one(location: Location, rewrite: Rewrite, snapshot: TableSnapshot) -> bool:
    log.warning(
        "finishing rewrite %s of %s, interrupted before (%s): %d files to publish, "
        "%d names to retire",
        rewrite.key,
        location.uri,
        rewrite.describe_lease(),
        len(rewrite.publish),
        len(rewrite.retire),
    )
    lease = _take(location, rewrite)
    if lease is None:
        return False
    _steps_2_to_4(lease, RewriteSteps(), snapshot)
    return True


def finish_open(
    location: Location, now: float | None = None, *, snapshot: TableSnapshot
) -> list[Rewrite]:
    """Before a rewriting command: finish every rewrite whose owner died (steps 2 to 4);
    the ones finished. One that is running refuses the command (raises)."""
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
    return [r for r in found if _finish_one(location, r, snapshot)]


def finish_abandoned(
    location: Location, now: float | None = None, *, snapshot: TableSnapshot
) -> list[Rewrite]:
    """For the live job: finish every rewrite whose owner died; leave running ones to their
    owners. A rewrite that cannot finish is logged, and the job goes on: its old names stay
    visible (no row is lost) until the recompute runs again."""
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
        try:
            if _finish_one(location, rewrite, snapshot):
                finished.append(rewrite)
        except OutputStateError as exc:
            log.error("%s", exc)
    return finished
