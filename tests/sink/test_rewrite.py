"""Rewrites: new names published, old names retired, a crash finished by the next run.

Locally and on S3 (moto on loopback, with bucket versioning: an object
written twice under one key would show two versions).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.contract.offsets import TopicPartition
from app.errors import ConfigurationError, OutputStateError, OwnershipLostError
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.guard import check_before_start
from app.sink.ledger import Ledger, LedgerEntry
from app.sink.rewrite import Rewrite, RewriteSteps
from app.sink.visible import visible_files
from app.storage import Location, resolve
from app.table import commit as table_commit
from app.table.commit import snapshot_rewrite
from tests.sink.spark_checkpoint import QUERY, write_checkpoint

_BLOCK = "part-t-0-00000000000000000000-00000000000000000010-000"
OLD = (f"date=2026-01-01/{_BLOCK}.parquet", f"date=2026-01-02/{_BLOCK}.parquet")
STAGED = f"_tablecast/recompute/k/date=2026-01-01/{_BLOCK}.parquet"


class Crash(Exception):
    pass


class CrashAfter(RewriteSteps):
    def __init__(self, step: int) -> None:
        self.step = step

    def recorded(self) -> None:
        if self.step == 1:
            raise Crash("after step 1")

    def published(self) -> None:
        if self.step == 2:
            raise Crash("after step 2")


@pytest.fixture(params=["local", "s3"])
def output(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Location]:
    if request.param == "local":
        yield resolve(str(tmp_path / "out"))
        return
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        request_ = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request_).close()
        settings = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "TABLECAST_S3_ENDPOINT": endpoint,
        }
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="lake")
        client.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
        yield resolve("s3://lake/out")
    finally:
        server.stop()


def _visible(location: Location) -> dict[str, bytes]:
    return {p: location.read_bytes(location.child(p)) for p in visible_files(location)}


def _prepare(location: Location) -> Rewrite:
    for relative in OLD:
        location.write_bytes_atomic(location.child(relative), b"old " + relative.encode())
    location.write_bytes_atomic(location.child(STAGED), b"new")
    new = rewrite_mod.renamed(OLD[0], "r1")
    assert new == OLD[0].replace("-000.parquet", "-000~r1.parquet")
    assert rewrite_mod.block_of(new) == rewrite_mod.block_of(OLD[0])
    return Rewrite("r1", ((STAGED, new),), OLD)


@pytest.mark.parametrize("step", [1, 2])
def test_a_rewrite_crashed_after_a_step_is_finished_by_the_next_run(
    output: Location, step: int
) -> None:
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(step), snapshot=snapshot_rewrite)
    seen = set(_visible(output))
    # Old names are still visible (step 2: beside the new one, its block twice).
    assert set(OLD) <= seen
    assert (rewrite.publish[0][1] in seen) == (step == 2)
    assert [r.key for r in rewrite_mod.open_rewrites(output)] == ["r1"]

    assert [r.key for r in rewrite_mod.finish_open(output, snapshot=snapshot_rewrite)] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []
    # Nothing left to finish:
    assert rewrite_mod.finish_open(output, snapshot=snapshot_rewrite) == []


def test_no_published_name_is_written_twice(output: Location) -> None:

    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(2), snapshot=snapshot_rewrite)
    # The crashed attempt published the new name; finishing must not copy it again.
    output.write_bytes_atomic(output.child(STAGED), b"new")
    rewrite_mod.finish_open(output, snapshot=snapshot_rewrite)
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    if not output.is_local:  # S3: one version of the key (moto keeps each write)
        import os

        import boto3

        client = boto3.client(
            "s3", endpoint_url=os.environ["TABLECAST_S3_ENDPOINT"], region_name="us-east-1"
        )
        versions = client.list_object_versions(Bucket="lake", Prefix="out/date=")["Versions"]
        new_key = "out/" + rewrite.publish[0][1]
        assert sum(1 for v in versions if v["Key"] == new_key) == 1


def test_a_rewrite_whose_staged_file_is_gone_keeps_the_old_names_and_says_so(
    output: Location,
) -> None:
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(1), snapshot=snapshot_rewrite)
    output.delete_file(output.child(STAGED))
    with pytest.raises(OutputStateError) as refused:
        rewrite_mod.finish_open(output, snapshot=snapshot_rewrite)
    assert "\n" not in str(refused.value) and "r1" in str(refused.value)
    assert set(_visible(output)) == set(OLD)  # nothing retired: no row lost


_KILLED_AFTER_PUBLISHING = """
import os, signal, sys
from app.sink import rewrite as rewrite_mod
from app.storage import resolve
from app.table.commit import snapshot_rewrite

class Die(rewrite_mod.RewriteSteps):
    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

setattr(Die, sys.argv[2], Die.die)  # published: right after step 2; waiting: in the grace
rewrite = rewrite_mod.Rewrite.from_json(sys.stdin.buffer.read())
retirement = rewrite_mod.Retirement(grace_s=float(sys.argv[3]))
rewrite_mod.carry_out(
    resolve(sys.argv[1]), rewrite, Die(), snapshot=snapshot_rewrite, retirement=retirement
)
"""


def _sigkilled_after_publishing(
    location: Location, rewrite: Rewrite, hook: str = "published", grace_s: float = 0.0
) -> None:
    """A recompute's process killed between steps 2 and 3 (no error handler runs)."""
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_PUBLISHING, location.uri, hook, str(grace_s)],
        input=rewrite.to_json(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert set(OLD) | {rewrite.publish[0][1]} == set(_visible(location))


def test_a_sigkilled_rewrite_is_left_to_its_owner_until_its_lease_runs_out(
    output: Location,
) -> None:
    """Its process died, but nothing tells a dead owner from a slow one but the lease:
    the live job leaves the record, and another rewrite refuses to start beside it."""
    rewrite = _prepare(output)
    _sigkilled_after_publishing(output, rewrite)
    assert rewrite_mod.finish_abandoned(output, snapshot=snapshot_rewrite) == []
    assert [r.key for r in rewrite_mod.open_rewrites(output)] == ["r1"]
    assert set(OLD) <= set(_visible(output))  # left as the owner may still be at work
    with pytest.raises(OutputStateError) as refused:
        rewrite_mod.finish_open(output, snapshot=snapshot_rewrite)
    message = str(refused.value)
    assert "\n" not in message and "r1" in message and "in progress" in message

    later = time.time() + rewrite_mod.LEASE_SECONDS + 1  # the lease ran out: the owner is gone
    finished = rewrite_mod.finish_abandoned(output, now=later, snapshot=snapshot_rewrite)
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []


def test_a_rewrite_that_failed_with_an_error_is_anyones_to_finish_at_once(
    output: Location,
) -> None:
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(2), snapshot=snapshot_rewrite)
    (record,) = rewrite_mod.open_rewrites(output)
    assert not record.running(time.time())  # given up by its owner on the error
    finished = rewrite_mod.finish_abandoned(output, snapshot=snapshot_rewrite)
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}


def test_a_running_rewrite_keeps_its_lease_while_it_works(
    output: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half of the lease used before the table's snapshot: it is renewed, so that no other
    process takes the record over from a live owner."""
    rewrite = _prepare(output)
    seen: list[Rewrite] = []

    class Slow(RewriteSteps):
        def recorded(self) -> None:
            (first,) = rewrite_mod.open_rewrites(output)
            seen.append(first)
            # The owner's clock jumps past half the lease, as a slow publish would.
            later = first.lease_until - rewrite_mod.LEASE_SECONDS / 4
            monkeypatch.setattr(rewrite_mod, "_now", lambda: later)

        def published(self) -> None:
            (current,) = rewrite_mod.open_rewrites(output)
            seen.append(current)

    rewrite_mod.carry_out(output, rewrite, Slow(), snapshot=snapshot_rewrite)
    first, later = seen
    assert later.owner == first.owner and later.lease_until > first.lease_until
    assert rewrite_mod.open_rewrites(output) == []


def test_two_processes_finishing_one_record_at_once_publish_each_name_once(
    output: Location,
) -> None:
    """The other finisher moved the staged file between this one's look and its move."""
    rewrite = _prepare(output)
    _sigkilled_after_publishing(output, rewrite)
    new = rewrite.publish[0][1]
    output.write_bytes_atomic(output.child(STAGED), b"new")  # the other one's, not yet moved
    real_move = Location.move

    def move_raced(self: Location, source: str, target: str) -> None:
        real_move(self, source, target)  # the other finisher, first
        real_move(self, source, target)  # this one: its source is gone

    later = time.time() + rewrite_mod.LEASE_SECONDS + 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Location, "move", move_raced)
        finished = rewrite_mod.finish_abandoned(output, now=later, snapshot=snapshot_rewrite)
        assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {new: b"new"}


@pytest.mark.spark
def test_the_live_job_finishes_a_rewrite_whose_owner_died_before_it_starts(
    spark: Any, tmp_path: Path
) -> None:
    """A correction killed between publishing and retiring, its lease run out: the job's
    start-up retires the old names, so the rewritten block is not visible twice."""
    output = resolve(str(tmp_path / "out"))
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        # An error: the lease given up.
        rewrite_mod.carry_out(output, rewrite, CrashAfter(2), snapshot=snapshot_rewrite)
    assert set(OLD) | {rewrite.publish[0][1]} == set(_visible(output))
    end = {TopicPartition("t", 0): 10}
    Ledger(output).append(LedgerEntry(0, ledger_mod.BATCH, end, checkpoint_id=QUERY, batch_id=0))
    write_checkpoint(tmp_path / "ckpt", [end], committed=0)
    check_before_start(output.uri, CheckpointLog(spark, str(tmp_path / "ckpt")), table_commit)
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []


GRACE_S = 60.0  # the clock the tests pass stands for the waiting


def test_a_rewrite_keeps_the_old_names_through_its_grace_and_the_live_job_does_not_wait(
    output: Location,
) -> None:
    """Left in its grace (a command's --no-wait, or the live job's compaction): the old
    names stay for readers that planned on the snapshot before it; the live job leaves
    the record, and retires them in the first pass after the grace."""
    rewrite = _prepare(output)
    retirement = rewrite_mod.Retirement(grace_s=GRACE_S, wait=False)
    done = rewrite_mod.carry_out(output, rewrite, snapshot=snapshot_rewrite, retirement=retirement)
    assert not done
    (record,) = rewrite_mod.open_rewrites(output)
    assert record.published and record.grace_s == GRACE_S and not record.running(time.time())
    assert record.retire_at == record.published_at + GRACE_S
    assert set(OLD) | {rewrite.publish[0][1]} == set(_visible(output))

    during = record.published_at + GRACE_S / 2
    assert rewrite_mod.finish_abandoned(output, now=during, snapshot=snapshot_rewrite) == []
    assert [r.key for r in rewrite_mod.open_rewrites(output)] == ["r1"]  # no wait: left
    assert set(OLD) <= set(_visible(output))
    # The live job's compaction does not wait either: it refuses, in one line.
    with pytest.raises(OutputStateError) as refused:
        rewrite_mod.finish_open(
            output, now=during, snapshot=snapshot_rewrite, retirement=retirement
        )
    message = str(refused.value)
    assert "\n" not in message and "r1" in message and "retire at" in message

    finished = rewrite_mod.finish_abandoned(output, now=record.retire_at, snapshot=snapshot_rewrite)
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []


def test_a_command_waits_out_the_grace_and_returns_with_the_old_names_gone(
    output: Location,
) -> None:
    """Its own rewrite's grace, and what is left of one another process left."""
    lines: list[str] = []
    # A grace the publish outlasts on no machine (moto's S3 took over 0.5 s between the
    # publish and the check beside a loaded suite: nothing was left to wait).
    retirement = rewrite_mod.Retirement(grace_s=3.0, notice=lines.append)
    rewrite = _prepare(output)
    seen: list[set[str]] = []

    class Look(RewriteSteps):
        def waiting(self) -> None:
            seen.append(set(_visible(output)))

    assert rewrite_mod.carry_out(
        output, rewrite, Look(), snapshot=snapshot_rewrite, retirement=retirement
    )
    assert seen and all(set(OLD) <= names for names in seen)  # kept through the grace
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []
    (line,) = lines
    assert line.startswith("rewrite r1: 2 old files retire at ") and "had 3 s" in line

    rewrite = _prepare(output)
    # A grace the publish cannot outlast on a loaded machine (moto's S3 took over 0.5 s
    # between the publish and the check): left open, not finished at once.
    left = rewrite_mod.Retirement(grace_s=5.0, wait=False)
    assert not rewrite_mod.carry_out(output, rewrite, snapshot=snapshot_rewrite, retirement=left)
    finished = rewrite_mod.finish_open(output, snapshot=snapshot_rewrite, retirement=retirement)
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert len(lines) == 2


def test_a_rewrite_that_failed_in_its_grace_is_finished_after_it(output: Location) -> None:
    rewrite = _prepare(output)

    class FailWaiting(RewriteSteps):
        def waiting(self) -> None:
            raise Crash("in the grace")

    retirement = rewrite_mod.Retirement(grace_s=GRACE_S)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(
            output, rewrite, FailWaiting(), snapshot=snapshot_rewrite, retirement=retirement
        )
    (record,) = rewrite_mod.open_rewrites(output)
    assert record.published and not record.running(time.time())  # given up on the error
    assert (
        rewrite_mod.finish_abandoned(output, now=record.published_at, snapshot=snapshot_rewrite)
        == []
    )
    assert set(OLD) <= set(_visible(output))
    finished = rewrite_mod.finish_abandoned(output, now=record.retire_at, snapshot=snapshot_rewrite)
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}


def test_a_rewrite_sigkilled_in_its_grace_is_finished_once_its_lease_runs_out(
    output: Location,
) -> None:
    """Killed while it waited: its record says the snapshot was published and when; the
    lease, not the grace, says when the owner is gone; whoever finds it then retires the
    old names without waiting (the grace ran out long before) and commits no snapshot."""
    rewrite = _prepare(output)
    _sigkilled_after_publishing(output, rewrite, hook="waiting", grace_s=GRACE_S)
    (record,) = rewrite_mod.open_rewrites(output)
    assert record.published and record.running(time.time())
    assert rewrite_mod.finish_abandoned(output, snapshot=snapshot_rewrite) == []
    assert set(OLD) <= set(_visible(output))

    snapshots: list[Rewrite] = []
    later = record.lease_until + 1
    finished = rewrite_mod.finish_open(
        output, now=later, snapshot=lambda location, r: snapshots.append(r)
    )
    assert [r.key for r in finished] == ["r1"] and snapshots == []
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []


@pytest.mark.parametrize("bad", [-1.0, rewrite_mod.MAX_GRACE_S + 1])
def test_a_grace_out_of_bounds_is_a_one_line_error(bad: float) -> None:
    with pytest.raises(ConfigurationError) as refused:
        rewrite_mod.check_grace(bad)
    assert "--retire-grace" in str(refused.value) and "\n" not in str(refused.value)


class _TakenOverAfter(RewriteSteps):
    """At a step, another process finds the owner's lease run out (the owner paused past
    it) and finishes the record itself: our finishing code, as the other process runs it."""

    def __init__(self, output: Location, at: str) -> None:
        self.output = output
        self.at = at
        self.taken = False

    def _take_over(self) -> None:
        if self.taken:
            return
        self.taken = True
        later = time.time() + rewrite_mod.LEASE_SECONDS + 1
        finished = rewrite_mod.finish_open(self.output, now=later, snapshot=snapshot_rewrite)
        assert [r.key for r in finished] == ["r1"]

    def recorded(self) -> None:
        if self.at == "recorded":
            self._take_over()

    def waiting(self) -> None:
        if self.at == "waiting":
            self._take_over()


@pytest.mark.parametrize("at", ["recorded", "waiting"])
def test_an_owner_that_paused_past_its_lease_changes_nothing_once_taken_over(
    output: Location, at: str
) -> None:
    """Before it publishes, snapshots or retires, the owner reads its record back: one that
    another process finished is not its own any more, and it stops (exit code 7)."""
    rewrite = _prepare(output)
    # "waiting": a grace long enough that the owner still waits once published on a loaded
    # machine (with 1 s, moto's S3 took it all, and the takeover hook never ran).
    retirement = rewrite_mod.Retirement(grace_s=3.0 if at == "waiting" else 0.0)
    with pytest.raises(OwnershipLostError, match="another process finished it") as lost:
        rewrite_mod.carry_out(
            output,
            rewrite,
            _TakenOverAfter(output, at),
            snapshot=snapshot_rewrite,
            retirement=retirement,
        )
    assert lost.value.exit_code == 7 and lost.value.facts["rewrite"] == "r1"
    # What the other process left, and nothing of the paused owner's after it.
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []


def test_a_snapshot_time_from_a_clock_a_day_ahead_is_read_as_now(
    output: Location, caplog: pytest.LogCaptureFixture
) -> None:
    """A rewrite recorded on a host whose clock is a day fast: the live job keeps the old
    names for the grace from when it first sees the record, not for a day, and says so."""
    rewrite = _prepare(output)
    retirement = rewrite_mod.Retirement(grace_s=GRACE_S, wait=False)
    rewrite_mod.carry_out(output, rewrite, snapshot=snapshot_rewrite, retirement=retirement)
    (record,) = rewrite_mod.open_rewrites(output)
    day = 86_400.0
    fast = dataclasses.replace(
        record, published_at=record.published_at + day, host="fast-clock-host"
    )
    output.write_bytes_atomic(output.child(rewrite_mod.REWRITES_DIR, "r1.json"), fast.to_json())
    caplog.set_level(logging.WARNING, logger="app.sink.rewrite")
    first_seen = time.time()
    assert rewrite_mod.finish_abandoned(output, snapshot=snapshot_rewrite) == []  # in its grace
    warned = [r.getMessage() for r in caplog.records]
    assert any("fast-clock-host" in m and "read as now" in m for m in warned), warned
    (seen,) = rewrite_mod.open_rewrites(output)
    assert first_seen - 1 <= seen.published_at <= time.time()
    # Its progress line shows the recorded moment's date: it is not today.
    assert time.strftime("%Y-%m-%d", time.gmtime(fast.retire_at)) in fast.describe_grace()
    finished = rewrite_mod.finish_abandoned(
        output, now=first_seen + GRACE_S + 1, snapshot=snapshot_rewrite
    )
    assert [r.key for r in finished] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
