"""Repair's plan refuses, with the facts of what it cannot do, before it changes anything."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from app.contract.offsets import TopicPartition
from app.engine.output import OUTPUT_SCHEMA
from app.engine.writer import stage_table
from app.errors import DataLossError, OutputStateError
from app.recovery import repair
from app.sink import ledger as ledger_mod
from app.sink import rewriter
from app.sink.ledger import Ledger, LedgerEntry
from app.sink.visible import visible_files
from app.sources import archive
from app.sources.records import SCHEMA, no_headers
from app.storage import resolve
from app.table import commit as table_commit
from app.table.catalog import threads_released
from app.tools.generate import CaptureSpec
from tests.held_rewriter import assert_fenced, held_rewriter, output_files, take_over
from tests.readers import read_everywhere
from tests.table.helpers import assert_exact, capture_rows, cuts, publish_batches

A0 = TopicPartition("sensor-a", 0)
# A capture whose sessions resync, for a repair that cuts every partition back to a snapshot.
SPEC = CaptureSpec(
    topics=2, partitions=2, sessions=8, updates=30, records_per_file=40, resync_every=8, seed=7
)
LATER = date(2100, 1, 1)  # a compaction merges every day before it


def _output_ending_at(output: Path, end: int) -> str:
    Ledger(resolve(str(output))).append(LedgerEntry(0, ledger_mod.BATCH, {A0: end}))
    return str(output)


def _archive(root: Path, messages: list[tuple[str, int, str]]) -> str:
    """One file of ``A0`` holding ``(session, seq, type)`` messages from offset 0."""
    n = len(messages)
    values = [
        orjson.dumps({"session": s, "seq": seq, "type": kind, "ts": 1, "rows": []})
        for s, seq, kind in messages
    ]
    table = (
        pa.table(
            {
                "key": [s.encode() for s, _, _ in messages],
                "value": values,
                "topic": [A0.topic] * n,
                "partition": [A0.partition] * n,
                "offset": list(range(n)),
                "timestamp": [0] * n,
                "timestampType": [0] * n,
            }
        )
        .append_column("headers", no_headers(n))
        .cast(SCHEMA)
    )
    archive.write_file(resolve(str(root)), A0, 0, n, table)
    return str(root)


def test_a_partition_the_archive_lacks_is_data_loss_naming_it(tmp_path: Path) -> None:
    output = _output_ending_at(tmp_path / "out", 5)
    (tmp_path / "archive").mkdir()
    read = repair.archive_reader(str(tmp_path / "archive"), "^sensor-.+")
    with pytest.raises(DataLossError) as lost:
        repair.plan_repair(output, read)
    assert str(lost.value) == (
        "the archive holds nothing of topic sensor-a partition 0, which the output holds"
    )
    assert lost.value.facts == {"source": "the archive", "topic": "sensor-a", "partition": 0}


def test_a_session_without_a_snapshot_in_reach_refuses_the_repair_with_its_facts(
    tmp_path: Path,
) -> None:
    # Session x's snapshot is gone from the archive: its updates cannot be rebuilt.
    root = _archive(
        tmp_path / "archive", [("y", 0, "snapshot"), ("x", 4, "update"), ("x", 5, "update")]
    )
    output = _output_ending_at(tmp_path / "out", 3)
    with pytest.raises(OutputStateError) as refused:
        repair.plan_repair(output, repair.archive_reader(root, "^sensor-.+"))
    assert str(refused.value).startswith(
        "cannot repair topic sensor-a partition 0: session 'x' has no snapshot at or before "
        "offset 3 in the source"
    )
    assert refused.value.facts == {
        "output": output,
        "topic": "sensor-a",
        "partition": 0,
        "session": "x",
        "offset": 3,
    }
    # Nothing was changed: the ledger still ends where it did.
    head = Ledger(resolve(output)).head()
    assert head is not None and head.end == {A0: 3}


def test_files_repair_rewrites_keep_the_output_schema_for_every_reader(tmp_path: Path) -> None:
    # Session y: a snapshot, then updates; the ledger says offsets 0 to 5 are published.
    messages = [
        ("y", 0, "snapshot"),
        ("y", 1, "update"),
        ("y", 2, "update"),
        ("y", 3, "snapshot"),
        ("y", 4, "update"),
    ]
    root = _archive(tmp_path / "archive", messages)
    out = tmp_path / "out"
    location = resolve(str(out))
    rows = pa.table(
        {
            "topic": [A0.topic] * 5,
            "partition": [0] * 5,
            "offset": list(range(5)),
            "session": ["y"] * 5,
            "seq": list(range(5)),
            "type": [m[2] for m in messages],
            "ts": [0] * 5,
            "row_id": ["a"] * 5,
            "value": [1.0] * 5,
            "status": ["ok"] * 5,
            "deleted": [False] * 5,
        },
        schema=OUTPUT_SCHEMA,
    )
    name = "sensor-a-0-00000000000000000000-00000000000000000005-000"
    for staged in stage_table(location, "", "", rows, "ts", name):
        assert not staged.quarantine
    _output_ending_at(out, 5)
    assert len(read_everywhere(out)) == 5
    plan = repair.plan_repair(str(out), repair.archive_reader(root, "^sensor-.+"))
    assert plan.end == {A0: 3} and len(plan.files_to_rewrite) == 1
    repair.apply_repair(str(out), str(tmp_path / "ckpt"), plan)
    # Offset 4 goes; 3, the adopted resync snapshot, keeps its rows.
    assert sorted(read_everywhere(out)["offset"].to_pylist()) == [0, 1, 2, 3]


def test_files_of_a_batch_that_crashed_before_its_ledger_entry_do_not_survive_a_repair(
    tmp_path: Path,
) -> None:
    # The ledger holds partition 0 to offset 2; a crashed batch (steps 5 and 6,
    # never 7) published a file of partition 1, which no entry names at all.
    messages = [("y", 0, "snapshot"), ("y", 1, "update")]
    root = _archive(tmp_path / "archive", messages)
    out = tmp_path / "out"
    location = resolve(str(out))
    b1 = TopicPartition("sensor-a", 1)
    rows = pa.table(
        {
            "topic": [b1.topic],
            "partition": [1],
            "offset": [0],
            "session": ["z"],
            "seq": [0],
            "type": ["snapshot"],
            "ts": [0],
            "row_id": ["a"],
            "value": [1.0],
            "status": ["ok"],
            "deleted": [False],
        },
        schema=OUTPUT_SCHEMA,
    )
    name = "sensor-a-1-00000000000000000000-00000000000000000001-000"
    published = [s.path for s in stage_table(location, "", "", rows, "ts", name)]
    ledger = Ledger(location)
    ledger.set_pending(ledger_mod.Pending("sensor-a:1=1", tuple(published)))
    _output_ending_at(out, 2)
    assert read_everywhere(out)["partition"].to_pylist() == [1]

    plan = repair.plan_repair(str(out), repair.archive_reader(root, "^sensor-.+"))
    repair.apply_repair(str(out), str(tmp_path / "ckpt"), plan)
    assert visible_files(location) == []  # the next run publishes partition 1 again, once
    assert ledger.pending_lists() == []


def test_a_repair_beside_a_running_job_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job renewing its hold on the output: repair changes nothing, not even the
    checkpoint's place, and says which job to stop."""
    from app import cli
    from app.sink import fencing

    root = _archive(tmp_path / "archive", [("y", 0, "snapshot"), ("y", 1, "update")])
    out = tmp_path / "out"
    location = resolve(str(out))
    live = fencing.claim(location, fencing.new_writer("run", str(tmp_path / "ckpt"), 1.0))
    keeper = fencing.LeaseKeeper(live).start()
    try:
        keeper.committed(live.append(LedgerEntry(-1, ledger_mod.BATCH, {A0: 2}, batch_id=0)))
        (tmp_path / "ckpt").mkdir()
        before = output_files(tmp_path)
        argv = ["repair", "--archive", root, "--output", str(out), "--checkpoint"]
        code = cli.main([*argv, str(tmp_path / "ckpt"), "--yes"])
    finally:
        keeper.stop(release=True)
    err = capsys.readouterr().err
    assert code == 4, err
    assert "held by a running writer: `tablecast run`" in err and "ledger entry 1 (batch 0)" in err
    assert output_files(tmp_path) == before and (tmp_path / "ckpt").is_dir()


def test_a_repair_beside_a_running_rewriter_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction planning (holding the rewriter claim): repair takes no writer claim,
    changes nothing, and names the compaction."""
    from app import cli

    monkeypatch.setattr(rewriter, "DEFAULT_LEASE_S", 1.0)
    root = _archive(tmp_path / "archive", [("y", 0, "snapshot"), ("y", 1, "update")])
    out = tmp_path / "out"
    _output_ending_at(out, 2)
    (tmp_path / "ckpt").mkdir()
    with rewriter.held(resolve(str(out)), rewriter.Claimant("compact")):
        before = output_files(tmp_path)
        argv = ["repair", "--archive", root, "--output", str(out), "--checkpoint"]
        code = cli.main([*argv, str(tmp_path / "ckpt"), "--yes"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "is being rewritten by `tablecast compact` on host" in err, err
    [refusal] = [line for line in err.splitlines() if "being rewritten" in line]
    assert "lease runs out 1 s after its last renewal" in refusal, err
    assert output_files(tmp_path) == before  # no writer claim, no checkpoint moved


# A repair in its own process, held after staging its rewritten files (the test's hold),
# its rewriter claim's lease 1 s; it fails as `tablecast repair` does: one line, its code.
_REPAIR = """
import logging
from app import logs
from app.cli.outcome import outcome
from app.logs import LogFormat
from app.recovery import repair
from app.sink import rewrite, rewriter

rewriter.DEFAULT_LEASE_S = 1.0
archive, out, checkpoint = sys.argv[3:6]
logs.configure(LogFormat.TEXT, logging.WARNING)


class Held(repair.RepairSteps):
    def staged(self):
        hold()


def run():
    read = repair.archive_reader(archive, "^sensor-.+")
    plan = repair.plan_repair(out, read, archive=archive)
    assert plan.files_to_rewrite, plan.describe()
    no_grace = rewrite.Retirement(grace_s=0)
    repair.apply_repair(out, checkpoint, plan, no_grace, archive=archive, steps=Held())
    return 0


sys.exit(outcome("tablecast repair", run))
"""


@pytest.fixture
def _pyiceberg_pool_ended() -> Iterator[None]:
    """The test reads the table with pyiceberg: its shared pool ends with it (tests/leaks.py)."""
    with threads_released():
        yield


@pytest.mark.usefixtures("_pyiceberg_pool_ended")
def test_a_frozen_repair_is_taken_over_after_its_lease_and_fenced_when_it_wakes(
    tmp_path: Path,
) -> None:
    """Frozen after staging its rewrite, before recording it: a compaction takes the
    rewriter claim over once its lease has run out and merges every day's files, those
    the repair was about to retire among them; woken, the repair stops (exit 7) in one
    line naming the compaction, and the output is exactly what the compaction left."""
    rows = capture_rows(tmp_path, SPEC)  # its archive in tmp_path / "archive"
    ends = cuts(rows, 8)[:6]  # every session goes on past the ledger's end: rows to remove
    out = tmp_path / "out"
    publish_batches(str(out), rows, ends)
    table_commit.catch_up(resolve(str(out)))
    published = _before(rows, ends[-1])
    argv = [str(tmp_path / "archive"), str(out), str(tmp_path / "ckpt")]
    with held_rewriter(_REPAIR, *argv, folder=tmp_path / "repair") as held:
        assert list((out / repair.REPAIR_DIR).rglob("*.parquet"))  # staged, not recorded
        held.freeze()
        take_over(out, "repair", held)
        assert_exact(published, str(out))
        before = output_files(out)
        code, err = held.wake()
    assert_fenced(code, err, "repair", out, "recording its rewrite")
    assert output_files(out) == before
    assert_exact(published, str(out))


# The same repair held right after it took its rewriter claim, before its writer claim.
_REPAIR_HELD_AT_ITS_CLAIM = _REPAIR.replace(
    "def run():",
    """_take = rewriter.Claimant.take


def _held_take(self, location):
    claim = _take(self, location)
    hold()  # its rewriter claim taken; the output not claimed yet
    return claim


rewriter.Claimant.take = _held_take


def run():""",
)


@pytest.mark.usefixtures("_pyiceberg_pool_ended")
def test_a_repair_frozen_right_after_its_rewriter_claim_changes_nothing_when_it_wakes(
    tmp_path: Path,
) -> None:
    """Frozen after taking the rewriter claim, before claiming the output: a compaction
    takes the rewriter claim over and does its work; woken, the repair stops (exit 7)
    before it claims the output, moves the checkpoint aside or stages anything."""
    rows = capture_rows(tmp_path, SPEC)  # its archive in tmp_path / "archive"
    ends = cuts(rows, 8)[:6]
    out = tmp_path / "out"
    publish_batches(str(out), rows, ends)
    table_commit.catch_up(resolve(str(out)))
    published = _before(rows, ends[-1])
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    argv = [str(tmp_path / "archive"), str(out), str(checkpoint)]
    with held_rewriter(_REPAIR_HELD_AT_ITS_CLAIM, *argv, folder=tmp_path / "repair") as held:
        held.freeze()
        take_over(out, "repair", held)
        before = output_files(out)
        code, err = held.wake()
    assert_fenced(code, err, "repair", out, "claiming the output")
    assert output_files(out) == before
    assert checkpoint.is_dir()  # not moved aside
    assert_exact(published, str(out))


def _before(rows: pa.Table, end: dict[TopicPartition, int]) -> pa.Table:
    """The rows of offsets before ``end``, partition by partition."""
    keep = pc.equal(pa.repeat(pa.scalar(True), len(rows)), False)
    for tp, stop in end.items():
        mask = pc.and_(
            pc.and_(pc.equal(rows["topic"], tp.topic), pc.equal(rows["partition"], tp.partition)),
            pc.less(rows["offset"], stop),
        )
        keep = pc.or_(keep, mask)
    return rows.filter(keep)
