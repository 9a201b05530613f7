"""A second writer, and a stale writer woken from a pause, at every commit step: real processes.

``tablecast run`` stops itself with its JVM and workers (SIGSTOP to its
process group, as a frozen VM would) right after a commit step
(``TABLECAST_CRASH_MODE=sigstop``). While it is stopped:

- a second job on the same output with another checkpoint (a fresh one, or
  a stale copy of the live one) is refused in one line and changes nothing;
- a new driver on the same checkpoint (a node roll) takes the output over
  once the stopped one's lease has run out, and goes on until it stops
  itself at the next step of a later batch;
- the stopped one is woken (SIGCONT to its group): it ends with exit code 7 in one line
  and changes nothing (every file under the output and the state directory
  is as the new driver left it).

One chain of processes, each the next one's stale writer, as the SIGKILL
chain of ``tests/sink/test_commit_steps.py`` does; the last runs to the end
and the output is exact for plain and table readers. The same on S3 (a moto
server) for the steps around publishing. Beside it, a job that is running
refuses a second job naming it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from app.errors import OutputStateError, OwnershipLostError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink.crash_points import CRASH_ENV, CRASH_MODE_ENV, STOPPED_S
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table.catalog import threads_released
from tests.process_groups import reap_group
from tests.s3_server import S3Server
from tests.sink.commit_steps_harness import SPEC
from tests.spark.helpers import assert_exact, run_argv_over, write_capture
from tests.table.helpers import assert_follows_ledger

LEASE = "2 seconds"
MAX_OFFSETS = 10  # 14 batches of the capture: one per link and more
CHAIN = ("1", "2", "3", "4", "5", "6.1", "6", "7", "8")
S3_CHAIN = ("5", "6.1", "7", "8")


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("writers") / "archive"
    write_capture(path, SPEC)
    return path


def _start(
    archive: Path,
    output: str,
    checkpoint: Path,
    env: Mapping[str, str],
    stop_at: str | None = None,
    trigger: str = "available-now",
) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in env.items() if k not in (CRASH_ENV, CRASH_MODE_ENV)}
    if stop_at is not None:
        clean |= {CRASH_ENV: stop_at, CRASH_MODE_ENV: "sigstop"}
    argv = run_argv_over(archive, output, checkpoint)
    argv[argv.index("--trigger") + 1] = trigger
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            *argv,
            "--max-offsets-per-trigger",
            str(MAX_OFFSETS),
            "--writer-lease",
            LEASE,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # The driver, its JVM and Python workers: one process group, stopped and woken as
        # one. Not a session of its own: the kernel wakes a stopped orphaned group (one
        # whose leader's parent is outside its session) whenever one of its members exits.
        process_group=0,
        env=clean,
    )


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped), or ``""`` once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return stat.rpartition(")")[2].split()[0]


def _until_stopped(process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise AssertionError(f"ended ({process.returncode}) before stopping: {stderr[-3000:]}")
        if _state(process.pid) == "T":
            return
        time.sleep(0.2)
    raise AssertionError("did not stop in time")


def _ended(process: subprocess.Popen[bytes], timeout: float = 300) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr.decode()


def _reap(process: subprocess.Popen[bytes]) -> None:
    """Nothing of the process group outlives the test (a stopped one is killed too)."""
    reap_group(process)
    if process.poll() is None:
        process.wait(timeout=20)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            _reap(process)


def _local_files(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


Snapshot = Callable[[], dict[str, str]]


def _beyond_its_own_lease(before: dict[str, str], after: dict[str, str], output: str) -> set[str]:
    """What a woken writer changed, less a renewal of an older claim's lease: one in flight
    when it froze (checked before the other claimed, written after) lands in its own lease
    file, which no writer reads once a newer claim exists (docs/design.md, "One writer")."""
    holder = fencing.find_holder(Ledger(resolve(output)))
    assert holder is not None

    def older_lease(key: str) -> bool:
        folder, _, name = key.rpartition("/")
        number = name.removesuffix(".json")
        return (
            folder.endswith(fencing.LEASES_DIR) and number.isdigit() and int(number) < holder.claim
        )

    changed = {k for k in after.keys() | before.keys() if after.get(k) != before.get(k)}
    return {k for k in changed if not older_lease(k)}


def _one_line(stderr: str) -> str:
    """The line the command ends with (the tools' own lines, not Spark's log)."""
    lines = [line for line in stderr.splitlines() if line.startswith("tablecast run: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _chain(
    archive: Path,
    output: str,
    work: Path,
    links: tuple[str, ...],
    snapshot: Snapshot,
    env: Mapping[str, str],
    processes: list[subprocess.Popen[bytes]],
) -> None:
    checkpoint = work / "ckpt"
    stopped: subprocess.Popen[bytes] | None = None
    stale_copy: Path | None = None
    for batch, where in enumerate(links, start=1):
        if stopped is not None:
            # A second job beside the stopped one: another checkpoint, fresh or a stale copy.
            other = work / f"other-{batch}"
            if stale_copy is not None and batch % 2:
                shutil.copytree(stale_copy, other)
            before = snapshot()
            second = _start(archive, output, other, env)
            processes.append(second)
            code, stderr = _ended(second)
            assert code == OutputStateError.exit_code, stderr[-3000:]
            assert "checkpoint" in _one_line(stderr)
            assert snapshot() == before, f"the refused job changed the output at {where}"
        # A new driver on the same checkpoint takes over, then stops at the next point.
        driver = _start(archive, output, checkpoint, env, stop_at=f"{where}:{batch}")
        processes.append(driver)
        _until_stopped(driver)
        if stale_copy is None:
            # A backup of the checkpoint: as of its last committed batch, which the output's
            # ledger has passed by the time a second job is started with it.
            stale_copy = work / "stale-copy"
            shutil.copytree(checkpoint, stale_copy)
            committed = max(int(p.name) for p in (stale_copy / "commits").glob("[0-9]*"))
            for planned in (stale_copy / "offsets").glob("*"):
                if planned.name.lstrip(".").split(".")[0].isdigit() and (
                    int(planned.name.lstrip(".").split(".")[0]) > committed
                ):
                    planned.unlink()
        if stopped is not None:
            before = snapshot()
            assert _state(stopped.pid) == "T", f"woke before SIGCONT: {_state(stopped.pid)}"
            os.killpg(stopped.pid, signal.SIGCONT)
            code, stderr = _ended(stopped)
            assert code == OwnershipLostError.exit_code, stderr[-3000:]
            assert "was taken over while this run paused" in _one_line(stderr)
            after = snapshot()
            changed = _beyond_its_own_lease(before, after, output)
            assert not changed, (
                f"woken after {links[batch - 2]}: "
                f"{[(k, k in before, k in after) for k in sorted(changed)]} {stderr[-3000:]}"
            )
        stopped = driver
    # The last driver runs to the end; the one it took over from wakes and changes nothing.
    last = _start(archive, output, checkpoint, env)
    processes.append(last)
    code, stderr = _ended(last)
    assert code == 0, stderr[-3000:]
    assert stopped is not None
    before = snapshot()
    os.killpg(stopped.pid, signal.SIGCONT)
    code, stderr = _ended(stopped)
    assert code == OwnershipLostError.exit_code, stderr[-3000:]
    assert not _beyond_its_own_lease(before, snapshot(), output)
    # The pipeline carries on with no repair: another run finds nothing new, and succeeds.
    again = _start(archive, output, checkpoint, env)
    processes.append(again)
    code, stderr = _ended(again)
    assert code == 0, stderr[-3000:]


def _assert_each_batch_once(output: str) -> None:
    entries = Ledger(resolve(output)).entries()
    assert all(e.kind is ledger_mod.BATCH for e in entries)
    assert [e.batch_id for e in entries] == list(range(len(entries)))
    files = [f for e in entries for f in e.files]
    assert len(files) == len(set(files))


@pytest.mark.spark
@pytest.mark.chain
def test_stale_and_second_writers_at_each_commit_step_change_nothing(
    archive: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    output = tmp_path / "out"

    def snapshot() -> dict[str, str]:
        state = {f"state/{k}": v for k, v in _local_files(tmp_path / "ckpt" / "tablecast").items()}
        return _local_files(output) | state

    _chain(archive, str(output), tmp_path, CHAIN, snapshot, dict(os.environ), processes)
    assert_exact(archive, output)
    _assert_each_batch_once(str(output))
    with threads_released():  # pyiceberg's shared pool, ended after the read
        assert_follows_ledger(output)


@pytest.mark.spark
@pytest.mark.chain
def test_on_s3_stale_and_second_writers_around_publishing_change_nothing(
    archive: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    with S3Server() as server:
        server.create_bucket("lake")
        client = server.client()

        def snapshot() -> dict[str, str]:
            listed = client.list_objects_v2(Bucket="lake").get("Contents", [])
            state = _local_files(tmp_path / "ckpt" / "tablecast")
            return {o["Key"]: o["ETag"] for o in listed} | {
                f"state/{k}": v for k, v in state.items()
            }

        _chain(archive, "s3://lake/out", tmp_path, S3_CHAIN, snapshot, server.env, processes)
        assert_exact(archive, "s3://lake/out")
        _assert_each_batch_once("s3://lake/out")


@pytest.mark.spark
@pytest.mark.chain
def test_a_running_job_refuses_a_second_job_naming_itself(
    archive: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    output, env = tmp_path / "out", dict(os.environ)
    live = _start(archive, str(output), tmp_path / "ckpt", env, trigger="processing-time=1 second")
    processes.append(live)
    caught_up: dict[str, int] = {}
    for path in archive.rglob("*.parquet"):  # <topic>/<partition>/<start>-<end>.parquet
        key = f"{path.parent.parent.name}:{path.parent.name}"
        caught_up[key] = max(caught_up.get(key, 0), int(path.stem.split("-")[1]))
    deadline = time.monotonic() + 300
    while True:  # until it has caught up with the archive, and keeps running
        head = Ledger(resolve(str(output))).head()
        if head is not None and {tp.key(): n for tp, n in head.end.items()} == caught_up:
            break
        assert live.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    before = _local_files(output)
    second = _start(archive, str(output), tmp_path / "other", env)
    processes.append(second)
    code, stderr = _ended(second)
    line = _one_line(stderr)
    assert code == OutputStateError.exit_code, stderr[-3000:]
    assert f"held by a running writer: `tablecast run` on host {os.uname().nodename}" in line
    assert f"(pid {live.pid})" in line and f"checkpoint {tmp_path / 'ckpt'}" in line
    assert "last commit ledger entry" in line
    assert not (tmp_path / "other").exists() or not list((tmp_path / "other").rglob("offsets/*"))
    # The live job went on alone: every data file and ledger entry is still there (its own
    # pending list and old table metadata are its to clear as it commits on).
    kept = {k for k in before if k.endswith(".parquet") or k.startswith("_tablecast/ledger/")}
    assert _local_files(output).keys() >= kept
    live.send_signal(signal.SIGINT)
    code, stderr = _ended(live)
    assert code == 130, stderr[-3000:]
    assert_exact(archive, output)


@pytest.mark.spark
@pytest.mark.chain
def test_a_driver_woken_after_its_batch_leaves_the_checkpoints_log_to_the_one_that_took_over(
    archive: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Frozen after its batch's commit (step 8), before Spark recorded the batch in the
    checkpoint's commit log; a new driver on the same checkpoint takes over and redoes that
    batch (recognised as published), and is frozen inside it. Woken first, the old driver
    stops (exit 7) leaving the checkpoint's logs as they were: before, its Spark recorded
    the batch and planned the next one, and the new driver's Spark then failed, finding
    them written by another query."""
    output, checkpoint, env = tmp_path / "out", tmp_path / "ckpt", dict(os.environ)
    stale = _start(archive, str(output), checkpoint, env, stop_at="8:1")
    processes.append(stale)
    _until_stopped(stale)
    successor = _start(archive, str(output), checkpoint, env, stop_at="4:1")
    processes.append(successor)
    _until_stopped(successor)  # claimed once the stale lease ran out; inside batch 1's redo

    stopped_at = time.monotonic()
    _woken_stale_stops(stale, checkpoint)
    _wake_and_finish(successor, archive, output, stopped_at)


def _checkpoint_logs(checkpoint: Path) -> dict[str, str]:
    """Spark's record of its batches in ``checkpoint``: the commit and offset logs."""
    return {
        k: v for k, v in _local_files(checkpoint).items() if k.startswith(("commits/", "offsets/"))
    }


def _woken_stale_stops(stale: subprocess.Popen[bytes], checkpoint: Path) -> str:
    """Wakes the driver that was taken over: it stops (exit 7) leaving the checkpoint's
    logs as they were. Its one line."""
    before = _checkpoint_logs(checkpoint)
    os.killpg(stale.pid, signal.SIGCONT)
    code, stderr = _ended(stale)
    assert code == OwnershipLostError.exit_code, stderr[-3000:]
    after = _checkpoint_logs(checkpoint)
    assert after == before, sorted(k for k in after.keys() | before.keys() if k not in before)
    line = _one_line(stderr)
    assert "was taken over while this run paused" in line
    return line


def _wake_and_finish(
    successor: subprocess.Popen[bytes], archive: Path, output: Path, stopped_at: float
) -> None:
    """Wakes the driver that took over, frozen since ``stopped_at``: it runs to the end,
    the output exact, each batch committed once."""
    # The stop hook tells a stop from a nap by its length: stopped at least that long.
    time.sleep(max(0.0, stopped_at + 2 * STOPPED_S - time.monotonic()))
    os.killpg(successor.pid, signal.SIGCONT)
    code, stderr = _ended(successor)
    assert code == 0, stderr[-3000:]
    assert_exact(archive, output)
    _assert_each_batch_once(str(output))


@pytest.mark.spark
@pytest.mark.chain
def test_a_driver_woken_as_spark_plans_its_next_batch_leaves_the_checkpoints_log_to_the_one_that_took_over(  # noqa: E501
    archive: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Frozen between two batches: Spark has recorded batch 1 in the checkpoint's commit log
    and asks the source for batch 2's end (its third trigger). A new driver on the same
    checkpoint takes over and is frozen as it plans batch 2 itself (its first trigger).
    Woken first, the old driver stops (exit 7) leaving the checkpoint's logs as they were:
    before, its Spark recorded batch 2 in the offset log, and the new driver's Spark then
    failed on that entry (Concurrent update to the log, exit 70)."""
    output, checkpoint, env = tmp_path / "out", tmp_path / "ckpt", dict(os.environ)
    stale = _start(archive, str(output), checkpoint, env, stop_at="plan:3")
    processes.append(stale)
    _until_stopped(stale)
    assert {k for k in _checkpoint_logs(checkpoint) if not k.split("/")[1].startswith(".")} == {
        "commits/0",
        "commits/1",
        "offsets/0",
        "offsets/1",
    }
    successor = _start(archive, str(output), checkpoint, env, stop_at="plan:1")
    processes.append(successor)
    _until_stopped(successor)  # claimed once the stale lease ran out; planning batch 2

    stopped_at = time.monotonic()
    line = _woken_stale_stops(stale, checkpoint)
    assert "stops before Spark records its next batch in the checkpoint" in line
    _wake_and_finish(successor, archive, output, stopped_at)
