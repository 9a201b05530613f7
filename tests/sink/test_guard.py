"""The start-up check, one case per decision, on hand-written checkpoints and ledgers.

The checkpoints are written in Spark's own layout (``metadata``,
``offsets/<n>``, ``commits/<n>``) and read through Hadoop's FileSystem as
the job reads them, so the Spark session is needed, but no query runs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, TopicPartition
from app.errors import OutputStateError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.guard import StartPlan, check_before_start
from app.sink.ledger import Ledger, LedgerEntry
from app.storage import resolve
from app.table import commit as table_commit
from tests.sink.spark_checkpoint import QUERY, write_checkpoint

pytestmark = pytest.mark.spark

A = TopicPartition("sensor-a", 0)
B = TopicPartition("sensor-a", 1)


def _ledger(output: Path, *entries: LedgerEntry) -> None:
    ledger = Ledger(resolve(str(output)))
    for entry in entries:
        ledger.append(entry)


def _batch(number: int, end: Offsets, query: str = QUERY) -> LedgerEntry:
    return LedgerEntry(
        number, ledger_mod.BATCH, end, checkpoint="/old/ckpt", checkpoint_id=query, batch_id=number
    )


def _check(
    spark: Any, output: Path, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> tuple[StartPlan, list[tuple[int, str]]]:
    caplog.set_level(logging.INFO, logger="app.sink.guard")
    caplog.clear()
    plan = check_before_start(str(output), CheckpointLog(spark, str(checkpoint)), table_commit)
    return plan, _logged(caplog)


def _refused(spark: Any, output: Path, checkpoint: Path, caplog: pytest.LogCaptureFixture) -> str:
    caplog.set_level(logging.INFO, logger="app.sink.guard")
    caplog.clear()
    with pytest.raises(OutputStateError) as refused:
        check_before_start(str(output), CheckpointLog(spark, str(checkpoint)), table_commit)
    message = str(refused.value)
    assert _logged(caplog) == [(logging.INFO, f"start refused: {message}")]
    assert str(checkpoint) in message
    assert refused.value.facts == {"output": str(output), "checkpoint": str(checkpoint)}
    return message


def _logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "app.sink.guard"]


def test_new_output_and_new_checkpoint_start_from_the_earliest(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan, logged = _check(spark, tmp_path / "out", tmp_path / "ckpt", caplog)
    assert plan == StartPlan(None, {})
    assert [level for level, _ in logged] == [logging.INFO]
    assert "both new" in logged[0][1]


def test_a_repair_prepares_a_fresh_checkpoint_to_start_at_its_offsets(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    repair = LedgerEntry(1, ledger_mod.REPAIR, {A: 25, B: 30}, adopt={"s7": 21})
    _ledger(output, _batch(0, {A: 40, B: 30}), repair)
    plan, logged = _check(spark, output, tmp_path / "ckpt", caplog)
    assert plan == StartPlan({A: 25, B: 30}, {"s7": 21})
    expected = (
        f"start: checkpoint {tmp_path / 'ckpt'} begins at the last repair's offsets "
        "sensor-a:0@25, sensor-a:1@30 (1 adopted sessions)"
    )
    assert logged == [(logging.INFO, expected)]
    # The run after the repair died before committing anything: the same offsets again.
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 35, B: 30}], committed=None, query="other")
    plan, _ = _check(spark, output, tmp_path / "ckpt", caplog)
    assert plan == StartPlan({A: 25, B: 30}, {"s7": 21})


def test_a_lost_checkpoint_beside_a_published_output_is_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _ledger(output, _batch(0, {A: 40, B: 30}))
    message = _refused(spark, output, tmp_path / "ckpt", caplog)
    assert "holds offsets up to sensor-a:0@40, sensor-a:1@30" in message
    assert "tablecast repair" in message


def test_an_empty_output_beside_committed_batches_is_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}, {A: 20}], committed=1)
    message = _refused(spark, tmp_path / "out", tmp_path / "ckpt", caplog)
    assert "is empty but checkpoint" in message and "committed batches up to 1" in message


def test_a_first_batch_that_died_before_publishing_starts_again(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}], committed=None)
    plan, logged = _check(spark, tmp_path / "out", tmp_path / "ckpt", caplog)
    assert plan == StartPlan(None, {})
    assert [level for level, _ in logged] == [logging.INFO]


def test_another_querys_checkpoint_is_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _ledger(output, _batch(0, {A: 10}, query="the-writer"))
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}], committed=0, query="someone-else")
    message = _refused(spark, output, tmp_path / "ckpt", caplog)
    assert "(query someone-else) is not the one that wrote output" in message
    assert "(query the-writer, /old/ckpt)" in message


def test_output_at_the_last_committed_batch_goes_on(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _ledger(output, _batch(0, {A: 10, B: 5}), _batch(1, {A: 20, B: 9}))
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10, B: 5}, {A: 20, B: 9}], committed=1)
    plan, logged = _check(spark, output, tmp_path / "ckpt", caplog)
    assert plan == StartPlan(None, {})
    expected = (
        f"start: output {output} ends at sensor-a:0@20, sensor-a:1@9, as checkpoint "
        f"{tmp_path / 'ckpt'}'s committed batch 1 does"
    )
    assert logged == [(logging.INFO, expected)]


def test_output_at_the_planned_batch_published_before_the_crash_goes_on(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _ledger(output, _batch(0, {A: 10}), _batch(1, {A: 20}))
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}, {A: 20}], committed=0)
    plan, logged = _check(spark, output, tmp_path / "ckpt", caplog)
    assert plan == StartPlan(None, {})
    assert len(logged) == 1 and logged[0][0] == logging.INFO
    assert "ends at sensor-a:0@20" in logged[0][1] and "planned batch 1" in logged[0][1]


def test_output_and_checkpoint_apart_are_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    # The output was restored from an older copy: it ends before the checkpoint.
    _ledger(output, _batch(0, {A: 10}))
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}, {A: 20}, {A: 30}], committed=1)
    message = _refused(spark, output, tmp_path / "ckpt", caplog)
    assert "ends at sensor-a:0@10 but checkpoint" in message
    assert "committed sensor-a:0@20" in message


def test_files_staged_by_a_run_that_died_are_removed(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    staged = output / ledger_mod.STAGING_DIR / "k1" / "date=2026-01-01" / "part-x.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"PAR1")
    _check(spark, output, tmp_path / "ckpt", caplog)
    assert not list((output / ledger_mod.STAGING_DIR).rglob("*"))


def _published(output: Path, relative: str) -> Path:
    path = output / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return path


def test_visible_files_no_ledger_entry_covers_are_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _published(
        output,
        "date=2026-01-01/part-sensor-a-0-00000000000000000000-00000000000000000010-000.parquet",
    )
    message = _refused(spark, output, tmp_path / "ckpt", caplog)
    assert "holds 1 data files that no ledger entry covers" in message
    assert "date=2026-01-01/part-sensor-a-0-" in message and "delete them" in message


def test_files_a_crashed_batch_published_without_a_ledger_entry_are_retired(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Step 6 of batch 0, then the checkpoint was lost: its visible files go before a run."""
    output = tmp_path / "out"
    name = f"date=2026-01-01/part-sensor-a-0-{0:020d}-{10:020d}-000.parquet"
    files = (name, f"_quarantine/{name}")
    for relative in files:
        _published(output, relative)
    ledger = Ledger(resolve(str(output)))
    ledger.set_pending(ledger_mod.Pending(offsets_mod.fingerprint({A: 10}), files))
    plan, _ = _check(spark, output, tmp_path / "ckpt", caplog)
    assert plan == StartPlan(None, {})
    assert not any((output / f).exists() for f in files) and ledger.pending_lists() == []


def test_a_pending_list_the_checkpoint_redoes_is_left_to_its_batch(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    _ledger(output, _batch(0, {A: 10}))
    write_checkpoint(tmp_path / "ckpt", planned=[{A: 10}, {A: 20}], committed=0)
    relative = (
        "date=2026-01-01/part-sensor-a-0-00000000000000000010-00000000000000000020-000.parquet"
    )
    visible = _published(output, relative)
    ledger = Ledger(resolve(str(output)))
    ledger.set_pending(ledger_mod.Pending(offsets_mod.fingerprint({A: 20}), (relative,)))
    _check(spark, output, tmp_path / "ckpt", caplog)
    assert visible.exists() and ledger.pending_lists() != []  # step 5 of the redo settles it
    # Another batch's list (the checkpoint will not redo it) names files no entry holds.
    ledger.set_pending(ledger_mod.Pending(offsets_mod.fingerprint({A: 25}), (relative,)))
    _check(spark, output, tmp_path / "ckpt", caplog)
    assert not visible.exists() and ledger.pending_lists() == []


def test_a_start_that_watched_a_holder_while_another_claimed_is_refused_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    """Two drivers after a holder that went quiet on another host: one already knew it
    gone and claimed while the other still watched its lease (or paused). The watcher's
    claim is refused naming the first, which keeps the output; before, it claimed after
    it, and the first stopped at its next fence check, taken over by a start that had
    checked an output without it."""
    output = tmp_path / "out"
    location = resolve(str(output))
    quiet = dataclasses.replace(
        fencing.new_writer("run", "/elsewhere/ckpt", lease_s=1.0), host="another-host"
    )
    fencing.claim(location, quiet)  # its lease never renewed: gone after one lease
    holder = fencing.find_holder(Ledger(location))
    watching = threading.Event()
    ended: list[StartPlan | BaseException] = []

    def second() -> None:
        try:
            ended.append(
                check_before_start(
                    str(output),
                    CheckpointLog(spark, str(tmp_path / "second")),
                    table_commit,
                    fencing.new_writer("run", str(tmp_path / "second"), lease_s=1.0),
                    notice=lambda line: watching.set(),
                )
            )
        except BaseException as exc:  # raised below, in the test's thread
            ended.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    try:
        assert watching.wait(60), ended
        first = check_before_start(
            str(output),
            CheckpointLog(spark, str(tmp_path / "first")),
            table_commit,
            fencing.new_writer("run", str(tmp_path / "first"), lease_s=1.0),
            gone=holder,  # the quiet holder, watched before Spark started
        )
    finally:
        thread.join()
    assert first.fence is not None
    [refused] = ended
    assert isinstance(refused, OutputStateError), refused
    message = str(refused)
    assert "another writer took ledger entry 1 while this one started" in message, message
    assert str(tmp_path / "first") in message, message
    assert first.fence.holds()
    assert Ledger(location).numbers() == [0, 1]
