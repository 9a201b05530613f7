"""The job's source fences Spark's planning of each batch (:mod:`app.spark.planning`).

Without a JVM: the source's reader as Spark's planner process runs it, built from the
options the job gives it, over a real archive and a real output's ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import StructType

from app import defaults
from app.errors import OwnershipLostError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink.ledger import LedgerEntry
from app.sources import backend_options
from app.sources.stream import OffsetStreamReader
from app.spark import planning
from app.storage import resolve
from tests.sink.commit_steps_harness import SPEC
from tests.spark.helpers import write_capture

LIMIT = ReadMaxRows(10)


def test_the_jobs_source_plans_while_its_writer_holds_the_output_and_stops_once_taken_over(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "archive"
    write_capture(archive, SPEC)
    location = resolve(str(tmp_path / "out"))
    fence = fencing.claim(location, fencing.new_writer("run", str(tmp_path / "ckpt")))
    options = (
        backend_options.common_options(defaults.TOPIC_PATTERN, 10, None)
        | backend_options.archive_options(str(archive))
        | planning.fence_options(fence)
    )
    source = planning.FencedSource(options)
    reader = source.streamReader(StructType())  # its schema is the options'
    assert isinstance(reader, OffsetStreamReader)

    def committed(batch_id: int) -> None:
        """The driver's commit of the batch Spark planned (in its own process): its entry."""
        fence.append(LedgerEntry(-1, ledger_mod.BATCH, {}, batch_id=batch_id))

    first = reader.latestOffset(reader.initialOffset(), LIMIT)
    committed(0)
    second = reader.latestOffset(first, LIMIT)  # past the writer's own entry
    assert second != first
    committed(1)
    # The driver paused before Spark planned the next batch; a new driver took over.
    taken = fencing.claim(location, fencing.new_writer("run", str(tmp_path / "ckpt")))
    with pytest.raises(OwnershipLostError) as lost:
        reader.latestOffset(second, LIMIT)
    assert str(lost.value).startswith(
        f"output {location.uri} was taken over while this run paused: ledger entry "
        f"{taken.claim} was claimed by `tablecast run`"
    )
    assert "this process stops before Spark records its next batch in the checkpoint" in str(
        lost.value
    )
    assert lost.value.exit_code == 7 and lost.value.facts["by"] == taken.claim
