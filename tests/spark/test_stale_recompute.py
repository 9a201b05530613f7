"""A replay frozen past its lease (right after its claim, or after its tasks staged their
files), its rewriter claim taken over meanwhile: woken, it stops before what it would do
next and changes nothing."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.recompute import run as run_mod
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.held_rewriter import assert_fenced, held_rewriter, output_files, take_over
from tests.spark.helpers import PATTERN, run_job, write_capture
from tests.table.helpers import assert_exact

SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=20, records_per_file=40, resync_every=8, seed=5
)
LATER = date(2100, 1, 1)  # a compaction merges every day before it

pytestmark = pytest.mark.usefixtures("iceberg_pool_ended")

# A replay of everything in its own process (its own local Spark), held once its tasks
# have staged their files (the progress hook at all tasks done), its rewriter claim's
# lease 1 s; it fails as `tablecast replay` does: one line and its exit code.
_REPLAY = """
import logging
from app import logs
from app.cli.outcome import outcome
from app.logs import LogFormat
from app.recompute.replay import plan_replay
from app.recompute.run import recompute
from app.sink.rewrite import Retirement
from app.sink.rewriter import Claimant
from app.spark.session import spark_session

archive, out, pattern = sys.argv[3:6]
logs.configure(LogFormat.TEXT, logging.WARNING)


def progress(done, total):
    if done == total:  # every task's files staged; nothing recorded
        hold()


def run():
    planned = plan_replay(archive, out, 0, 4_102_444_800_000, topic_pattern=pattern)
    spark = spark_session("local[1]")
    claimant = Claimant("replay", lease_s=1.0)
    recompute(spark, planned, progress, retirement=Retirement(grace_s=0), claimant=claimant)
    return 0


sys.exit(outcome("tablecast replay", run))
"""


def _published(spark: Any, tmp_path: Path) -> tuple[Path, pa.Table, list[str]]:
    """The job's output of a capture, what it must hold, and the held replay's arguments."""
    archive, output = tmp_path / "archive", tmp_path / "out"
    write_capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=50)
    expected = verify.expected_output(str(archive), PATTERN).rows
    return output, expected, [str(archive), str(output), PATTERN]


def test_a_frozen_replay_is_taken_over_after_its_lease_and_fenced_when_it_wakes(
    spark: Any, tmp_path: Path
) -> None:
    """Frozen (its driver, JVM and workers) after its tasks staged their files: a
    compaction takes the rewriter claim over once its lease has run out and merges the
    files the replay recomputed; woken, the replay stops (exit 7) in one line naming the
    compaction, and the output is exactly what the compaction left."""
    output, expected, argv = _published(spark, tmp_path)
    with held_rewriter(_REPLAY, *argv, folder=tmp_path / "replay") as held:
        assert list((output / run_mod.RECOMPUTE_DIR).rglob("*.parquet"))  # staged
        assert not list((output / run_mod.RECORDS_DIR).glob("*"))  # not recorded
        held.freeze()
        take_over(output, "replay", held)
        assert_exact(expected, str(output))
        before = output_files(output)
        code, err = held.wake()
    assert_fenced(code, err, "replay", output, "staging its rewrite")
    assert output_files(output) == before
    assert_exact(expected, str(output))


# The same replay held right after it took its rewriter claim, before its first step.
_REPLAY_HELD_AT_ITS_CLAIM = _REPLAY.replace(
    'claimant = Claimant("replay", lease_s=1.0)', 'claimant = HeldAtItsClaim("replay", lease_s=1.0)'
).replace(
    "def run():",
    """class HeldAtItsClaim(Claimant):
    def take(self, location):
        claim = super().take(location)
        hold()  # claimed; nothing of its first step done
        return claim


def run():""",
)


def test_a_replay_frozen_right_after_its_claim_stops_before_its_first_step_when_it_wakes(
    spark: Any, tmp_path: Path
) -> None:
    """Woken after a takeover, a replay changes nothing: its first step would finish others'
    rewrites and drop its selection's staging (that of a replay of the same selection that
    took over, which then could not publish it), and its tasks would stage files."""
    output, expected, argv = _published(spark, tmp_path)
    with held_rewriter(_REPLAY_HELD_AT_ITS_CLAIM, *argv, folder=tmp_path / "replay") as held:
        held.freeze()
        take_over(output, "replay", held)
        before = output_files(output)
        code, err = held.wake()
    assert_fenced(code, err, "replay", output, "finishing what earlier rewriters left")
    assert output_files(output) == before
    assert_exact(expected, str(output))


# The same replay held once it has published its rewrite, before it records it and drops
# its staging (step 4).
_REPLAY_HELD_AFTER_PUBLISHING = _REPLAY.replace(
    "recompute(spark, planned, progress,", "recompute(spark, planned, None,"
).replace(
    "def run():",
    """from app.recompute import run as run_mod

_Record = run_mod.RecomputeRecord


def _held_record(*args, **kwargs):
    hold()  # its rewrite carried out; nothing of step 4 done
    return _Record(*args, **kwargs)


run_mod.RecomputeRecord = _held_record


def run():""",
)


def test_a_replay_frozen_after_publishing_leaves_its_staging_to_the_one_that_took_over(
    spark: Any, tmp_path: Path
) -> None:
    """Woken after a takeover once it had published, a replay records what it did and ends
    as it would have (exit 0), but leaves its staging folder alone: a replay of the same
    selection that took over stages there, and could not publish once it was dropped."""
    output, expected, argv = _published(spark, tmp_path)
    with held_rewriter(_REPLAY_HELD_AFTER_PUBLISHING, *argv, folder=tmp_path / "replay") as held:
        assert not list((output / run_mod.RECORDS_DIR).glob("*"))  # not recorded yet
        held.freeze()
        take_over(output, "replay", held)
        staging = {
            k: v for k, v in output_files(output).items() if k.startswith(run_mod.RECOMPUTE_DIR)
        }
        assert staging  # its own staging, as far as this test's take-over goes
        code, err = held.wake()
    assert code == 0, err[-3000:]
    assert "its staging" in err and "is left to that one" in err, err[-3000:]
    after = output_files(output)
    assert {k: after.get(k) for k in staging} == staging
    assert len(list((output / run_mod.RECORDS_DIR).glob("*"))) == 1  # its work, recorded
    assert_exact(expected, str(output))
