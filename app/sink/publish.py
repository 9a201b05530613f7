"""Publish a table computed on the driver (replay) with the sink's steps.

Stage under ``_tablecast/staging/<name>/`` (hidden), then move each file to
its visible name. Names derive from ``name``, so running the same replay
again replaces its files instead of adding to them.
"""

from __future__ import annotations

import pyarrow as pa

from app.sink import ledger as ledger_mod
from app.sink.writer import stage_table
from app.storage import resolve


def publish_rows(output_uri: str, table: pa.Table, name: str) -> int:
    location = resolve(output_uri)
    staging = f"{ledger_mod.STAGING_DIR}/{name}"
    location.delete_dir(location.child(staging))
    staged = stage_table(location, staging, "", table, "ts", name)
    for item in staged:
        location.move(location.child(staging, item.path), location.child(item.path))
    location.delete_dir(location.child(staging))
    return len(staged)
