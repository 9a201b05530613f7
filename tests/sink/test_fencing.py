"""One writer per output: create-if-absent on every storage, claims, leases and the fence.

Without Spark. The storages are the real ones this machine has: the local
disk, S3 as a moto server speaks it (conditional ``PutObject``), and HDFS's
rename (refusing an existing target) over local files
(:mod:`tests.hdfs_semantics`). A holder that lives in another process is a
real process: a Python child that claims the output and renews its lease
with :class:`~app.sink.fencing.LeaseKeeper`, stopped with SIGSTOP as a
frozen VM would be.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from app.contract.offsets import TopicPartition
from app.errors import OutputStateError, OwnershipLostError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry
from app.storage import Location, resolve
from tests.hdfs_semantics import RecordingHandler
from tests.lossy_proxy import LossyProxy
from tests.s3_server import S3Server

A = TopicPartition("sensor-a", 0)


def _hdfs_like(root: Path) -> Location:
    fs = pafs.PyFileSystem(RecordingHandler(hdfs_rename=True))
    return Location(f"hdfs://test{root}", fs, str(root), is_local=False, atomic_rename=True)


@pytest.fixture(params=["local", "s3", "hdfs"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    if request.param == "local":
        yield resolve(str(tmp_path / "out"))
    elif request.param == "hdfs":
        yield _hdfs_like(tmp_path / "out")
    else:
        with S3Server() as server:
            server.create_bucket("lake")
            yield resolve("s3://lake/out")


def test_create_exclusive_gives_a_name_to_exactly_one_of_many_racing_writers(
    location: Location,
) -> None:
    path = location.child("_tablecast", "ledger", f"{7:020d}.json")
    results: dict[int, bool] = {}
    start = threading.Barrier(8)

    def race(n: int) -> None:
        start.wait()
        results[n] = location.create_exclusive(path, f"writer {n}".encode())

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [n for n, won in results.items() if won]
    assert len(winners) == 1, results
    assert location.read_bytes(path) == f"writer {winners[0]}".encode()
    # No temporary name left behind for readers to trip on.
    names = [i.base_name for i in location.list_dir(location.child("_tablecast", "ledger"))]
    assert names == [f"{7:020d}.json"]


def test_a_ledger_entry_is_written_once_and_never_over(location: Location) -> None:
    ledger = Ledger(location)
    first = LedgerEntry(3, ledger_mod.BATCH, {A: 10}, files=("a.parquet",))
    assert ledger.append(first)
    assert not ledger.append(LedgerEntry(3, ledger_mod.BATCH, {A: 99}, files=("b.parquet",)))
    assert ledger.read(3) == first


def _writer(role: str = "run", lease_s: float = 1.0) -> ledger_mod.WriterInfo:
    return fencing.new_writer(role, "/ckpt", lease_s)


def test_claims_take_the_next_number_and_data_entries_pass_over_them(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    first = fencing.claim(location, _writer())
    first.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 10}, batch_id=0))
    second = fencing.claim(location, _writer())  # the first never renewed: gone at once here
    ledger = Ledger(location)
    assert (first.claim, second.claim) == (0, 2)
    assert [e.kind for e in ledger.all_entries()] == ["writer", "batch", "writer"]
    head = ledger.head()
    assert head is not None and head.number == 1 and head.claim == 0
    assert [e.number for e in ledger.entries()] == [1]
    claim = ledger.last()
    assert claim is not None and claim.end == {A: 10}  # where the output stood when claimed


def test_a_stale_writers_check_and_append_fail_and_change_nothing(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    old = fencing.claim(location, _writer())
    old.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 10}))
    old.check("anything")  # still its own
    new = fencing.claim(location, _writer())
    new.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 20}))
    with pytest.raises(OwnershipLostError, match="ledger entry 2 was claimed by") as lost:
        old.check("removing old state versions")
    assert lost.value.exit_code == 7 and lost.value.facts["by"] == 2
    with pytest.raises(OwnershipLostError):
        old.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 15}))
    ledger = Ledger(location)
    assert [(e.number, e.end[A]) for e in ledger.entries()] == [(1, 10), (3, 20)]
    assert not old.holds() and new.holds()


def test_a_fence_in_another_process_passes_over_its_writers_entries_and_stops_at_a_takeover(
    location: Location,
) -> None:
    """Spark's planner sees no entry being made: it follows them, and knows the writer's
    own by their claim, on every storage (a missing entry is a read that finds nothing)."""
    writer = fencing.claim(location, _writer())
    follower = fencing.FollowingFence(Ledger(location), writer.claim, writer.info)
    follower.check("planning")  # nothing after the claim yet
    for end in (10, 20, 30):
        writer.append(LedgerEntry(-1, ledger_mod.BATCH, {A: end}))
    follower.check("planning")
    assert follower.holds() and follower.last == writer.last  # the next check reads on from there
    writer.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 40}))
    new = fencing.claim(location, _writer())  # the writer paused past its lease
    with pytest.raises(
        OwnershipLostError, match=f"ledger entry {new.claim} was claimed by"
    ) as lost:
        follower.check("Spark records its next batch")
    assert lost.value.facts["by"] == new.claim and not follower.holds()


def test_a_renewed_lease_refuses_a_second_writer_naming_the_holder(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    holder = fencing.claim(location, _writer(lease_s=1.0))
    keeper = fencing.LeaseKeeper(holder).start()
    try:
        keeper.committed(holder.append(LedgerEntry(-1, ledger_mod.BATCH, {A: 10}, batch_id=4)))
        lines: list[str] = []
        with pytest.raises(OutputStateError) as refused:
            fencing.refuse_if_held(location, lines.append)
        message = str(refused.value)
        assert "held by a running writer" in message
        assert f"host {holder.info.host} (pid {os.getpid()})" in message
        assert "checkpoint /ckpt" in message and "ledger entry 1 (batch 4)" in message
        assert refused.value.exit_code == 4 and len(lines) == 1
        assert Ledger(location).numbers() == [0, 1]  # the refused writer wrote nothing
    finally:
        keeper.stop(release=True)
    # Released at its end: the next writer takes the output without waiting.
    began = time.monotonic()
    assert fencing.refuse_if_held(location) is not None
    assert time.monotonic() - began < 0.5


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from app.sink import fencing
    from app.storage import resolve
    fence = fencing.claim(resolve(sys.argv[1]), fencing.new_writer("run", "/ckpt", 1.0))
    fencing.LeaseKeeper(fence).start()
    print(fence.claim, flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def holder_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process on this host that claims ``tmp_path/out`` and renews its lease."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "0"
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_holder_in_another_process_is_refused_while_it_renews(
    tmp_path: Path, holder_process: subprocess.Popen[str]
) -> None:
    location = resolve(str(tmp_path / "out"))
    with pytest.raises(OutputStateError, match=rf"pid {holder_process.pid}\)"):
        fencing.refuse_if_held(location)


def test_a_frozen_holder_is_taken_over_after_its_lease_and_fenced_when_it_wakes(
    tmp_path: Path, holder_process: subprocess.Popen[str]
) -> None:
    location = resolve(str(tmp_path / "out"))
    holder_process.send_signal(signal.SIGSTOP)
    began = time.monotonic()
    previous = fencing.refuse_if_held(location)  # watches one lease: no renewal comes
    waited = time.monotonic() - began
    assert previous is not None and previous.claim == 0 and 1.0 <= waited < 5
    fence = fencing.claim(location, _writer())
    holder_process.send_signal(signal.SIGCONT)
    # The woken holder's keeper sees the claim at its next renewal and stops renewing.
    lease_before = fencing.read_lease(location, 0)
    time.sleep(1.0)
    assert fencing.read_lease(location, 0) == lease_before
    assert fence.holds()


def test_a_holder_on_this_host_whose_process_is_gone_is_taken_at_once(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    dies = _HOLDER.replace("time.sleep(600)", "import os; os._exit(9)")
    subprocess.run(
        [sys.executable, "-c", dies, str(tmp_path / "out")],
        check=False,
        capture_output=True,
    )
    began = time.monotonic()
    assert fencing.refuse_if_held(location) is not None
    assert time.monotonic() - began < 0.5
    assert fencing.claim(location, _writer()).claim == 1


class _RacingHandler(RecordingHandler):
    """Local files; right after the ledger's first listing, another writer claims its
    next number: the moment between a writer reading the ledger and claiming."""

    def __init__(self, other: bytes) -> None:
        super().__init__(hdfs_rename=False)
        self.other = other
        self.raced = False

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        found = super().get_file_info_selector(selector)
        if not self.raced and selector.base_dir.endswith(ledger_mod.LEDGER_DIR):
            self.raced = True
            path = f"{selector.base_dir}/{0:020d}.json"
            self.local.create_dir(selector.base_dir, recursive=True)
            with self.local.open_output_stream(path) as out:
                out.write(self.other)
        return found


def test_two_writers_claiming_at_once_one_is_refused_naming_the_other(tmp_path: Path) -> None:
    other = _writer("repair")
    claim = LedgerEntry(0, ledger_mod.WRITER, {}, claim=0, writer=other)
    fs = pafs.PyFileSystem(_RacingHandler(claim.to_json()))
    root = tmp_path / "out"
    location = Location(str(root), fs, str(root), is_local=True)
    with pytest.raises(OutputStateError, match="another writer took ledger entry 0") as refused:
        fencing.claim(location, _writer())
    assert f"`tablecast repair` on host {other.host}" in str(refused.value)
    assert Ledger(resolve(str(root))).all_entries() == [claim]  # the other's claim stands


def test_old_lease_files_are_bounded(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    for _ in range(fencing.LEASES_KEPT + 5):
        fencing.remove_old_leases(fencing.claim(location, _writer()))
    leases = sorted((tmp_path / "out" / fencing.LEASES_DIR).iterdir())
    assert len(leases) == fencing.LEASES_KEPT + 1


def _conditional_put(request: tuple[str, str, dict[str, str]]) -> bool:
    method, _, headers = request
    return method == "PUT" and headers.get("if-none-match") == "*"


def _s3_conflict() -> bytes:
    return (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict'
        b"</Code><Message>A conflicting operation is in progress</Message></Error>"
    )


@pytest.mark.parametrize("then", ["retried", "conflict, then retried"])
def test_on_s3_a_create_whose_answer_was_lost_is_still_its_writers(then: str) -> None:
    """S3 created the name, but its answer was lost (a cut connection, a client timeout):
    the SDK's retry of the conditional PutObject finds the name taken (412), or, while the
    first request is still in flight, conflicting (409). Still this writer's create: its
    claim holds the output and its entries land, where it used to be refused as if
    another writer had taken the number, naming itself."""
    with S3Server() as server, LossyProxy(server.endpoint) as proxy:
        server.create_bucket("lake")
        os.environ["TABLECAST_S3_ENDPOINT"] = proxy.endpoint  # restored by the server's exit
        location = resolve("s3://lake/out")
        path = location.child("created-once")
        proxy.lose_answer(_conditional_put)
        if then == "conflict, then retried":
            proxy.answer(_conditional_put, 409, _s3_conflict())
        assert location.create_exclusive(path, b"writer 1")
        assert location.read_bytes(path) == b"writer 1"
        assert len(proxy.applied) == (2 if then == "conflict, then retried" else 1)
        assert not location.create_exclusive(path, b"writer 2")  # another's bytes: refused

        proxy.lose_answer(_conditional_put)  # the claim's ledger entry
        fence = fencing.claim(location, fencing.new_writer("run", None))
        fence.check("writing a batch")
        proxy.lose_answer(_conditional_put)  # its first batch's entry
        fence.append(LedgerEntry(number=-1, kind=ledger_mod.BATCH, end={A: 10}), doing="a batch")
        ledger = Ledger(location)
        assert [ledger.read(n).kind for n in ledger.numbers()] == [
            ledger_mod.WRITER,
            ledger_mod.BATCH,
        ]
