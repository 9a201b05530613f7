"""One rewriter at a time, from its plan on: a second compaction (or any rewriting command)
started while one plans refuses in one line naming it; the output is exact afterwards."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from app.errors import OutputStateError, OwnershipLostError
from app.sink import rewrite as rewrite_mod
from app.sink import rewriter as rewriter_mod
from app.storage import resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table.live import ScheduledCompaction
from app.tools.generate import CaptureSpec
from tests.table.helpers import (
    assert_exact,
    capture_rows,
    cuts,
    load_table,
    publish_batches,
)

SPEC = CaptureSpec(
    topics=2, partitions=2, sessions=8, updates=30, records_per_file=40, resync_every=8, seed=7
)
LATER = date(2100, 1, 1)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    return capture_rows(tmp_path_factory.mktemp("rewriters"), SPEC)


@pytest.fixture(autouse=True)
def _short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewriter_mod, "DEFAULT_LEASE_S", 1.0)


class HeldAfterStaging(table_compact.CompactionSteps):
    """Holds the compaction between staging its merged files and recording them."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.go = threading.Event()

    def staged(self) -> None:
        self.inside.set()
        assert self.go.wait(60)


def _output(expected: pa.Table, tmp_path: Path) -> str:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    return output


def test_a_compaction_started_while_another_plans_refuses_naming_it(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = _output(expected, tmp_path)
    held = HeldAfterStaging()
    reports: list[table_compact.CompactionReport] = []
    first = threading.Thread(
        target=lambda: reports.append(
            table_compact.compact(resolve(output), before=LATER, steps=held)
        )
    )
    first.start()
    try:
        assert held.inside.wait(60)
        with pytest.raises(OutputStateError) as refused:
            table_compact.compact(resolve(output), before=LATER)
        message = str(refused.value)
        assert "\n" not in message
        assert "`tablecast compact`" in message and "lease" in message, message
        staged = list((tmp_path / "out" / table_compact.STAGING_DIR).rglob("*.parquet"))
        assert staged  # the first one's staged files are still there
    finally:
        held.go.set()
        first.join()
    [report] = reports
    assert report.groups > 0
    assert_exact(expected, output)
    # Once the first has ended, the next one starts (and finds nothing left to merge).
    assert table_compact.compact(resolve(output), before=LATER).groups == 0
    assert_exact(expected, output)


def test_a_compaction_of_other_groups_started_while_one_plans_refuses_and_changes_nothing(
    expected: pa.Table, tmp_path: Path
) -> None:
    """Beside one planning, a compaction with another target (other groups, another key)
    would drop the first one's staging and retire its inputs: it refuses, writing nothing
    the first one or readers depend on."""
    output = _output(expected, tmp_path)
    location = resolve(output)
    sizes = [f.file_size_in_bytes for f in table_commit.data_files(load_table(output))]
    held = HeldAfterStaging()
    reports: list[table_compact.CompactionReport] = []

    def first() -> None:
        reports.append(table_compact.compact(location, before=LATER, steps=held))

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.inside.wait(60)
        before = _files(tmp_path / "out")
        with pytest.raises(OutputStateError, match="is being rewritten by `tablecast compact`"):
            table_compact.compact(location, before=LATER, target_bytes=3 * max(sizes))
        assert _files(tmp_path / "out") == before
    finally:
        held.go.set()
        thread.join()
    [report] = reports
    assert report.groups > 0 and not rewrite_mod.open_rewrites(location)
    assert_exact(expected, output)
    table_compact.compact(location, before=LATER, target_bytes=3 * max(sizes))
    assert_exact(expected, output)


# A compaction in its own process, held after staging until `go` exists; its lease 1 s.
_COMPACTION = textwrap.dedent(
    """
    import pathlib, sys, time
    from datetime import date
    from app.errors import OwnershipLostError
    from app.sink import rewriter
    from app.storage import resolve
    from app.table import compact

    rewriter.DEFAULT_LEASE_S = 1.0
    out, go = sys.argv[1], pathlib.Path(sys.argv[2])

    class Held(compact.CompactionSteps):
        def staged(self):
            print("staged", flush=True)
            while not go.exists():
                time.sleep(0.05)

    try:
        report = compact.compact(resolve(out), before=date(2100, 1, 1), steps=Held())
    except OwnershipLostError as exc:
        print(exc, flush=True)
        sys.exit(3)
    print("compacted", report.groups, flush=True)
    """
)


@pytest.fixture
def compaction_process(
    expected: pa.Table, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A compaction in another process of this host, held after staging its merged files."""
    _output(expected, tmp_path)
    go = tmp_path / "go"
    process = subprocess.Popen(
        [sys.executable, "-c", _COMPACTION, str(tmp_path / "out"), str(go)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "staged"
        yield process, go
    finally:
        process.kill()
        process.wait()


def test_a_compaction_killed_mid_plan_is_taken_over_and_its_staging_replaced(
    expected: pa.Table, tmp_path: Path, compaction_process: tuple[subprocess.Popen[str], Path]
) -> None:
    process, _ = compaction_process
    output = str(tmp_path / "out")
    process.send_signal(signal.SIGKILL)
    process.wait()
    # Its process gone on this host: the claim is taken at once; its staging is dropped.
    report = table_compact.compact(resolve(output), before=LATER)
    assert report.groups > 0
    assert_exact(expected, output)
    assert rewriter_mod.find_holder(resolve(output)).claim == 1  # type: ignore[union-attr]
    assert not list((tmp_path / "out" / table_compact.STAGING_DIR).rglob("*"))
    assert not list((tmp_path / "out" / table_compact.PENDING_DIR).glob("*"))


def test_a_frozen_compaction_is_taken_over_after_its_lease_and_fenced_when_it_wakes(
    expected: pa.Table, tmp_path: Path, compaction_process: tuple[subprocess.Popen[str], Path]
) -> None:
    process, go = compaction_process
    output = str(tmp_path / "out")
    process.send_signal(signal.SIGSTOP)
    lines: list[str] = []
    claimant = rewriter_mod.Claimant("compact", notice=lines.append)
    # Its lease is not renewed for its length: taken over; this compaction does the work.
    report = table_compact.compact(resolve(output), before=LATER, claimant=claimant)
    assert report.groups > 0
    assert len(lines) == 1 and f"pid {process.pid}" in lines[0], lines
    assert_exact(expected, output)
    done = _files(tmp_path / "out")
    # Woken, it stops before recording anything: the output stays exact and unchanged.
    go.touch()
    process.send_signal(signal.SIGCONT)
    said, _ = process.communicate(timeout=60)
    assert process.returncode == 3, said
    assert "took the rewriter claim over" in said and "before recording its merges" in said
    assert _files(tmp_path / "out") == done
    assert_exact(expected, output)


# A compaction in its own process that freezes itself (SIGSTOP, as a paused VM) right after
# its first step's call to the table, past its claim and before what that step tidies
# ("claimed"), or once its rewrite is carried out, before its last step drops its staging
# ("rewritten"); its lease 1 s, its grace none, its target another than the default (other
# groups).
_FROZEN_AFTER_ITS_CLAIM = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import date
    from app.errors import OwnershipLostError
    from app.sink import rewriter
    from app.storage import resolve
    from app.table import commit, compact

    rewriter.DEFAULT_LEASE_S = 1.0
    compact.rewrite_mod.DEFAULT_GRACE_S = 0.0  # as in the test's process: no two-minute wait
    out, target, where = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    catch_up, carry_out = commit.catch_up, compact.rewrite_mod.carry_out
    calls = []

    def frozen_once(location, **kwargs):
        if not calls:
            calls.append(1)
            print("claimed", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return catch_up(location, **kwargs)

    def frozen_after(*args, **kwargs):
        done = carry_out(*args, **kwargs)
        print("rewritten", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        return done

    if where == "claimed":
        commit.catch_up = frozen_once
    else:
        compact.rewrite_mod.carry_out = frozen_after
    try:
        report = compact.compact(resolve(out), before=date(2100, 1, 1), target_bytes=target)
    except OwnershipLostError as exc:
        print(exc, flush=True)
        sys.exit(3)
    print("compacted", report.groups, flush=True)
    """
)


@pytest.mark.parametrize("where", ["claimed", "rewritten"])
def test_a_compaction_frozen_after_its_claim_leaves_its_successors_staging_when_it_wakes(
    expected: pa.Table, tmp_path: Path, where: str
) -> None:
    """Woken after a takeover, a compaction stops before its first step's tidying, or,
    its rewrite carried out, before its last step drops its staging: either would drop
    the staged merges of the compaction that took over (which then failed to publish
    them, its rewrite record left for an operator to remove)."""
    output = _output(expected, tmp_path)
    location = resolve(output)
    sizes = [f.file_size_in_bytes for f in table_commit.data_files(load_table(output))]
    # Frozen once rewritten, it merged pairs: what the one that took over merges is left.
    target = 3 * max(sizes) if where == "claimed" else 2 * max(sizes)
    stale = subprocess.Popen(
        [sys.executable, "-c", _FROZEN_AFTER_ITS_CLAIM, output, str(target), where],
        stdout=subprocess.PIPE,
        text=True,
    )
    held = HeldAfterStaging()
    reports: list[table_compact.CompactionReport] = []
    failures: list[BaseException] = []

    def successor() -> None:
        try:
            reports.append(table_compact.compact(location, before=LATER, steps=held))
        except BaseException as exc:  # the test's failure, raised below
            failures.append(exc)

    thread = threading.Thread(target=successor)
    try:
        assert stale.stdout is not None and stale.stdout.readline().strip() == where
        _until_stopped(stale.pid)
        thread.start()  # its lease unrenewed for its length: taken over
        assert held.inside.wait(60), failures
        staged = _files(tmp_path / "out")
        stale.send_signal(signal.SIGCONT)
        said, _ = stale.communicate(timeout=60)
        assert stale.returncode == 3, said
        assert "took the rewriter claim over" in said, said
        assert _files(tmp_path / "out") == staged  # the successor's staging untouched
    finally:
        held.go.set()
        thread.join()
        if stale.poll() is None:
            stale.kill()
            stale.wait()
    assert not failures, failures
    [report] = reports
    assert report.groups > 0 and not rewrite_mod.open_rewrites(location)
    assert_exact(expected, output)


def _until_stopped(pid: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rpartition(")")[2].split()[0] == "T":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not stop")


def _files(root: Path) -> set[str]:
    """Every file readers or rewriters read: data, table, ledger and history (not leases)."""
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "leases" not in p.parts and "rewriters" not in p.parts
    }


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(hours=1)  # every call a new period
        return self.now


def test_the_scheduled_compaction_skips_beside_a_rewriter_and_takes_a_frozen_ones_claim(
    expected: pa.Table,
    tmp_path: Path,
    compaction_process: tuple[subprocess.Popen[str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    process, go = compaction_process
    output = str(tmp_path / "out")
    batches: list[int] = []
    job = ScheduledCompaction(
        sink=lambda frame, batch: batches.append(batch),
        output=output,
        every_s=60,
        clock=_Clock(),
    )
    with caplog.at_level(logging.WARNING, logger="app.table.live"):
        job(None, 0)  # the holder renews its lease: skipped at once, never waiting
    assert batches == [0] and job.runs == 0
    [line] = [r.getMessage() for r in caplog.records if "scheduled compaction" in r.getMessage()]
    assert "not done" in line and "`tablecast compact` on host" in line, line
    assert f"(pid {process.pid})" in line and "lease runs out 1 s after" in line, line

    process.send_signal(signal.SIGSTOP)
    job(None, 1)  # first seen with this lease: skipped
    assert job.runs == 0
    time.sleep(1.5)  # one lease and a renewal's interval, in this process's time
    job(None, 2)  # the same lease, unrenewed for longer than its length: taken over
    assert batches == [0, 1, 2] and job.runs == 1
    assert_exact(expected, output)
    go.touch()
    process.send_signal(signal.SIGCONT)
    said, _ = process.communicate(timeout=60)
    assert process.returncode == 3, said
    assert_exact(expected, output)


def test_rewriter_claims_on_s3_are_exclusive_and_fence_a_stale_holder(
    aws: dict[str, str],
) -> None:
    location = resolve("s3://lake/out")
    with rewriter_mod.held(location, rewriter_mod.Claimant("compact")) as holding:
        with pytest.raises(OutputStateError, match=r"`tablecast compact` on host .* claim 0"):
            rewriter_mod.Claimant("correct").take(location)
        assert holding.holds()
    # Released: the next takes claim 1 at once. Its lease never renewed (no keeper) and
    # this process not renewing it: gone, so the one after takes claim 2 and fences it.
    stale = rewriter_mod.Claimant("replay").take(location)
    assert stale.claim == 1
    taker = rewriter_mod.Claimant("correct").take(location)
    assert taker.claim == 2 and taker.holds() and not stale.holds()
    with pytest.raises(OwnershipLostError, match=r"`tablecast correct` on host .* took"):
        stale.check("recording its rewrite")
    # Create-if-absent on S3: the number taken is never written again.
    assert not location.create_exclusive(
        location.child(rewriter_mod.CLAIMS_DIR, f"{2:020d}.json"), b"{}"
    )


def test_a_stale_holder_stays_fenced_after_old_claims_are_removed(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    # Each taken without a lease keeper: gone at once, so the next one takes over.
    stale = rewriter_mod.Claimant("compact").take(location)
    later = [rewriter_mod.Claimant("replay").take(location) for _ in range(8)]
    assert [c.claim for c in later] == list(range(1, 9))
    claims = sorted(p.name for p in (tmp_path / "out" / rewriter_mod.CLAIMS_DIR).glob("*.json"))
    assert len(claims) == rewriter_mod.CLAIMS_KEPT + 1  # the newest and the few before it
    assert not stale.holds() and not later[0].holds() and later[-1].holds()
    with pytest.raises(OwnershipLostError, match="before recording its rewrite"):
        stale.check("recording its rewrite")
