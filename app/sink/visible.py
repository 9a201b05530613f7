"""The data files a reader of the output sees: dataset and quarantine, no hidden file."""

from __future__ import annotations

import posixpath

from app.engine.writer import QUARANTINE_DIR
from app.sink.ledger import CONTROL_DIR
from app.storage import Location


def visible_files(location: Location) -> list[str]:
    """Every data file a reader sees, dataset and quarantine (paths relative)."""
    out: list[str] = []
    for info in location.list_tree(location.path):
        relative = posixpath.relpath(info.path, location.path)
        parts = relative.split("/")
        if not relative.endswith(".parquet") or any(p.startswith(".") for p in parts):
            continue
        if parts[0] == CONTROL_DIR or any(p.startswith("_") for p in parts if p != QUARANTINE_DIR):
            continue
        out.append(relative)
    return sorted(out)
