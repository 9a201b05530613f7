"""Compaction history as an older tablecast wrote it, and what a command reads of it."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import orjson
import pyarrow.fs as pafs
import pytest

from app.storage import Location
from app.table import compact as table_compact

FIRST_EARLIER_DAY = date(2001, 1, 1)  # before any row of the tests' captures


def flat_path(location: Location, record: table_compact.CompactionRecord) -> str:
    """Where an older tablecast wrote ``record``: ``compactions/<digest>.json``."""
    digest = posixpath.basename(record.output).removeprefix("part-compact-")
    return location.child(table_compact.RECORDS_DIR, digest.replace(".parquet", ".json"))


def write_flat(location: Location, record: table_compact.CompactionRecord) -> str:
    path = flat_path(location, record)
    location.write_bytes_atomic(path, record.to_json())
    return path


def flatten(location: Location) -> list[str]:
    """Every day's records moved back to the flat layout, the same bytes: an output as an
    older tablecast left it. The flat paths."""
    paths = []
    for record in table_compact.records(location):
        paths.append(write_flat(location, record))
    location.delete_dir(location.child(table_compact.DAYS_DIR))
    return sorted(paths)


def earlier_days(location: Location, days: int, inputs: int = 1_440) -> list[str]:
    """A compaction record for each of ``days`` days before the captures' (their files
    merged and since gone), written flat as an older tablecast wrote them. Their days."""
    written = []
    for number in range(days):
        day = (FIRST_EARLIER_DAY + timedelta(days=number)).isoformat()
        names = tuple(f"{day}/part-sensor-0-0-{number:08d}{i:08d}.parquet" for i in range(inputs))
        group = table_compact.Group(date.fromisoformat(day), names, 0)
        write_flat(
            location,
            table_compact.CompactionRecord(day, names, group.output, inputs, f"{day}T20:00:00"),
        )
        written.append(day)
    return written


@dataclass
class Reads:
    """The paths of the compaction history a command read, listed or asked about."""

    paths: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # of ``paths``: the files read
    days: dict[str, str] = field(default_factory=dict)  # a record read -> its day

    def of_days(self, days: list[str]) -> list[str]:
        """Of these paths, those naming one of ``days`` (a record's folder, a record's
        input or output) or a record of them in the flat layout."""
        return [
            p
            for p in self.paths
            if any(f"{d}/" in p or f"/{d}" in p for d in days) or self.days.get(p) in days
        ]

    def records(self) -> list[str]:
        """The records (and pending lists) read."""
        return [p for p in self.read if p.endswith(".json")]


@contextmanager
def counting_reads(location: Location) -> Iterator[Reads]:
    """Every read, listing and existence check of a real local :class:`Location` under
    the compaction history, or of a file one of its records names, recorded."""
    reads = Reads()
    history = location.child(table_compact.RECORDS_DIR)
    cls = type(location)
    read_bytes, list_dir, exists = cls.read_bytes, cls.list_dir, cls.exists

    def wanted(path: str) -> bool:
        return path.startswith(history) or "part-compact-" in path or "/20" in path

    def counted_read(self: Location, path: str) -> bytes:
        data = read_bytes(self, path)
        if wanted(path):
            reads.paths.append(path)
            reads.read.append(path)
            found = orjson.loads(data) if path.startswith(history) else None
            if isinstance(found, dict) and "day" in found:  # a record (flat: its day inside)
                reads.days[path] = found["day"]
        return data

    def counted_list(self: Location, path: str) -> list[pafs.FileInfo]:
        if path.startswith(history):
            reads.paths.append(path)
        return list_dir(self, path)

    def counted_exists(self: Location, path: str) -> bool:
        if wanted(path):
            reads.paths.append(path)
        return exists(self, path)

    patches: dict[str, Any] = {
        "read_bytes": counted_read,
        "list_dir": counted_list,
        "exists": counted_exists,
    }
    with pytest.MonkeyPatch.context() as patched:
        for name, replacement in patches.items():
            patched.setattr(cls, name, replacement)
        yield reads
