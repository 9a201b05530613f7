"""A checkpoint as Spark writes it, for the sink's start-up check to read."""

from __future__ import annotations

import json
from pathlib import Path

from app.contract.offsets import Offsets

QUERY = "5f0c4b4e-0000-4000-8000-000000000001"
"""The query id the checkpoint's metadata records, unless told otherwise."""


def write_checkpoint(
    path: Path, planned: list[Offsets], committed: int | None, query: str = QUERY
) -> None:
    """A checkpoint as Spark writes it: batches 0.. planned, 0..committed committed."""
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text(json.dumps({"id": query}))
    for batch, end in enumerate(planned):
        source = json.dumps({tp.key(): offset for tp, offset in end.items()})
        (path / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{source}')
    for batch in range(-1 if committed is None else committed + 1):
        (path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
