"""Lost or damaged state versions are state errors, never blamed on the data; inspect reads
the recorded version."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.contract.offsets import TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine.store import StateStore, content_digest, encode, state_root
from app.errors import StateError
from app.recovery.inspect import read_state
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.spark.helpers import assert_exact, copy_files, run_job, write_capture

pytestmark = pytest.mark.spark

SPEC = CaptureSpec(topics=1, partitions=2, sessions=4, updates=30, records_per_file=20, seed=13)
PARTITION_DIR = Path("tablecast") / "state" / "sensor-0" / "1"


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("state-faults") / "full"
    write_capture(path, SPEC)
    return path


def _first_part_published(spark: Any, full: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The job has published the first files of every partition; the rest arrives later."""
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    copy_files(full, archive, lambda relative: relative.name < "00000000000000000040")
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=20)
    shutil.rmtree(archive)
    shutil.copytree(full, archive)
    return archive, output, checkpoint


def _newest(checkpoint: Path) -> Path:
    return max((checkpoint / PARTITION_DIR).glob("*.state"))


@pytest.mark.parametrize("fault", ["lost", "damaged"])
def test_a_lost_or_damaged_state_version_is_a_state_error(
    fault: str, spark: Any, full: Path, tmp_path: Path
) -> None:
    archive, output, checkpoint = _first_part_published(spark, full, tmp_path)
    newest = _newest(checkpoint)
    version = int(newest.name[:20])
    if fault == "lost":
        newest.unlink()
    else:
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0xFF
        newest.write_bytes(bytes(data))
    with pytest.raises(StateError) as failed:
        run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=20)
    error = failed.value
    assert error.exit_code == StateError.exit_code == 6
    assert error.facts["topic"] == "sensor-0" and error.facts["partition"] == 1
    assert error.facts["version"] == version
    assert str(checkpoint / PARTITION_DIR) in str(error.facts["path"])
    assert f"sensor-0:1 version {version}" in str(error)
    assert "missing" in str(error) if fault == "lost" else "damaged" in str(error)


def test_an_intact_checkpoint_goes_on_exactly(spark: Any, full: Path, tmp_path: Path) -> None:
    archive, output, checkpoint = _first_part_published(spark, full, tmp_path)
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=20)
    assert_exact(archive, output)


def test_inspect_reads_the_version_the_ledger_records_not_the_newest(
    spark: Any, full: Path, tmp_path: Path
) -> None:
    """A stale version of the same offset (a losing resync pass, a zombie task) sorts after
    the recorded one: inspect shows the recorded state, as the next batch would load it."""
    _, output, checkpoint = _first_part_published(spark, full, tmp_path)
    head = Ledger(resolve(str(output))).head()
    assert head is not None and head.states is not None
    tp = TopicPartition("sensor-0", 1)
    recorded = head.states[tp]
    store = StateStore(state_root(str(checkpoint)))
    state = store.load(tp, recorded, TableProcessor())
    assert len(state.sessions) > 1
    # Drop one session (and move the clock, if need be) until the digest sorts after.
    candidates = (
        (name, dataclasses.replace(state, sessions=sessions, clock_ms=state.clock_ms + k))
        for k in range(16)
        for name in sorted(state.sessions)
        for sessions in [{s: v for s, v in state.sessions.items() if s != name}]
    )
    found = next(
        (
            (name, c)
            for name, c in candidates
            if content_digest(encode(c, TableProcessor())) > recorded.digest
        ),
        None,
    )
    assert found is not None, "no stale version sorts after the recorded one"
    name, stale = found
    version, _ = store.save(stale, TableProcessor())
    assert max(store.versions(tp)) == version != recorded  # what "the newest" would pick

    snapshot = read_state(spark, str(checkpoint), output=str(output))
    shown = {v.state.session for v in snapshot.sessions if v.tp == tp}
    assert shown == set(state.sessions)

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(
            ["inspect", "--checkpoint", str(checkpoint), "--output", str(output), "--session", name]
        )
    assert code == 0 and stdout.getvalue().startswith(f"session {name} in checkpoint ")


def test_inspect_names_a_lost_recorded_version_as_a_state_error(
    spark: Any, full: Path, tmp_path: Path
) -> None:
    _, output, checkpoint = _first_part_published(spark, full, tmp_path)
    newest = _newest(checkpoint)
    newest.unlink()
    with pytest.raises(StateError, match=f"sensor-0:1 version {int(newest.name[:20])}"):
        read_state(spark, str(checkpoint), output=str(output))
