"""Lost or damaged state versions are state errors, never blamed on the data."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from app.errors import StateError
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
