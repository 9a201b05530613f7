"""The commit's decisions are logged with their batch and offsets (the JSON logs on the cluster)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from app.contract import offsets as offsets_mod
from app.errors import IntegrityViolationError, OutputStateError
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools.generate import CaptureSpec, Fault
from tests.spark.helpers import ledger_end, run_job, write_capture

SPEC = CaptureSpec(topics=1, partitions=1, sessions=2, updates=12, seed=3)


def _decisions(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [
        (r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("app.sink")
    ]


@pytest.mark.spark
def test_published_then_recognised_as_published_then_refused(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    caplog.set_level(logging.INFO, logger="app.sink")

    run_job(spark, archive, output, checkpoint)
    head = Ledger(resolve(str(output))).head()
    assert head is not None and head.rows > 0
    end = offsets_mod.describe(head.end)  # "sensor-0:0@<n>"
    assert (
        "app.sink.commit",
        logging.INFO,
        f"batch 0 published as ledger entry {head.number}: {len(head.files)} files, "
        f"{head.rows} rows, "
        f"sensor-0:0@0 to {end}",
    ) in _decisions(caplog)

    # Died after publishing, before Spark's commit: the redo is recognised.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    caplog.clear()
    run_job(spark, archive, output, checkpoint)
    decisions = _decisions(caplog)
    assert (
        "app.sink.commit",
        logging.INFO,
        f"batch 0 ends at {end}, as ledger entry {head.number} (batch 0) does: published "
        "before a restart, not publishing again",
    ) in decisions
    assert any(
        name == "app.sink.guard"
        and level == logging.INFO
        and "planned batch 0" in message
        and end in message
        for name, level, message in decisions
    )
    assert not any("published as ledger entry" in message for _, _, message in decisions)

    # A checkpoint that is not the output's: refused at start-up, with the output's offsets.
    caplog.clear()
    with pytest.raises(OutputStateError) as refused:
        run_job(spark, archive, output, tmp_path / "other-ckpt")
    # INFO: on a terminal, which shows WARNING and up, the CLI's one error line says it.
    assert _decisions(caplog) == [
        ("app.sink.guard", logging.INFO, f"start refused: {refused.value}")
    ]
    assert f"holds offsets up to {end}" in str(refused.value)


@pytest.mark.spark
def test_a_strict_violation_is_logged_as_not_published(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    write_capture(
        archive,
        CaptureSpec(
            topics=1, partitions=1, sessions=2, updates=12, seed=3, faults=(Fault.SEQ_GAP,)
        ),
    )
    caplog.set_level(logging.INFO, logger="app.sink")
    with pytest.raises(IntegrityViolationError) as failed:
        run_job(spark, archive, output, tmp_path / "ckpt")
    decisions = _decisions(caplog)
    assert not [d for d in decisions if d[1] >= logging.WARNING]  # the error is the one line
    [(name, _, message)] = [d for d in decisions if "not published" in d[2]]
    assert name == "app.sink.commit"
    assert message.startswith("batch 0 (sensor-0:0@0 to sensor-0:0@")
    assert message.endswith(f"not published: {failed.value}")
    assert ledger_end(output) == {}
