"""Rewriting published files: new names, the old ones retired through the ledger.

A published object is never written again under its name: on S3 a copy over
a key races readers that read its footer and then its pages (torn reads,
apache/arrow#41310), and locally or on HDFS the file would change under a
reader's open handle. A rewrite (``tablecast correct``, ``replay``,
``repair``) therefore publishes each changed file under a new name,
``part-<block>~<rewrite>.parquet``, then retires the names it replaces:

1. Record the rewrite: ``_tablecast/ledger/rewrites/<key>.json`` lists the
   staged files with their new names and the names to retire.
2. Publish each staged file under its new name (no name that exists is
   written: a crashed attempt's copy is kept), then commit the output's
   Iceberg table one overwrite snapshot (:mod:`app.table.commit`), where the
   output keeps one.
3. Retire the old names.
4. Remove the record.

A crash before step 1 leaves only hidden staging. A crash after it leaves
the record: the next rewrite of the output (:func:`finish_open`, which
every rewriting command runs first) carries out steps 2 to 4 for it, so no
crash leaves a message's rows visible twice after the next run. Between
steps 2 and 3 a plain-listing reader sees the rewritten blocks' messages in
both the old and the new file; it never misses one.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass

import orjson

from app.errors import OutputStateError
from app.sink import ledger as ledger_mod
from app.storage import Location
from app.table import commit as table_commit

log = logging.getLogger(__name__)

REWRITES_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "rewrites")
_MARK = "~"  # not in a Kafka topic's name ([a-zA-Z0-9._-]): the rewrite's part of a name


def block_of(relative: str) -> str:
    """``date=<day>/part-<block>[~<rewrite>].parquet`` -> ``<block>``."""
    name = posixpath.basename(relative).removeprefix("part-").removesuffix(".parquet")
    return name.split(_MARK, 1)[0]


def renamed(relative: str, rewrite: str) -> str:
    """The name a rewrite publishes ``relative``'s content under (same directory, same block)."""
    directory = posixpath.dirname(relative)
    return posixpath.join(directory, f"part-{block_of(relative)}{_MARK}{rewrite}.parquet")


@dataclass(frozen=True)
class Rewrite:
    """Files published under new names, and the names they retire (paths relative)."""

    key: str
    publish: tuple[tuple[str, str], ...]  # (staged path, new visible path)
    retire: tuple[str, ...]
    kind: str = "rewrite"  # replay, correction, repair: the Iceberg snapshot's kind
    note: str = ""  # what was rewritten, for the snapshot's summary

    def to_json(self) -> bytes:
        doc = {"key": self.key, "publish": [list(p) for p in self.publish],
               "retire": list(self.retire), "kind": self.kind, "note": self.note}  # fmt: skip
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes) -> Rewrite:
        doc = orjson.loads(data)
        return cls(
            key=doc["key"],
            publish=tuple((a, b) for a, b in doc["publish"]),
            retire=tuple(doc["retire"]),
            kind=doc.get("kind", "rewrite"),
            note=doc.get("note", ""),
        )


class RewriteSteps:
    """Hooks between the steps (tests inject crashes here; they do nothing by default)."""

    def recorded(self) -> None:
        """After step 1."""

    def published(self) -> None:
        """After step 2."""


def _record_path(location: Location, key: str) -> str:
    return location.child(REWRITES_DIR, f"{key}.json")


def carry_out(location: Location, rewrite: Rewrite, steps: RewriteSteps | None = None) -> None:
    """Steps 1 to 4."""
    steps = steps or RewriteSteps()
    # Step 1
    location.write_bytes_atomic(_record_path(location, rewrite.key), rewrite.to_json())
    steps.recorded()
    _finish(location, rewrite, steps)


def _finish(location: Location, rewrite: Rewrite, steps: RewriteSteps) -> None:
    # Step 2
    for staged, visible in rewrite.publish:
        source, target = location.child(staged), location.child(visible)
        if location.exists(source):
            location.move(source, target)
        elif not location.exists(target):
            raise OutputStateError(
                f"rewrite {rewrite.key} of {location.uri} cannot finish: its staged file "
                f"{staged} is gone and {visible} was never published; the names it would "
                f"retire stay (remove {posixpath.join(REWRITES_DIR, rewrite.key)}.json and "
                "run the recompute again)",
                output=location.uri, rewrite=rewrite.key, path=staged,
            )  # fmt: skip
    # The Iceberg table's one overwrite snapshot (app.table), before any old name goes:
    # its readers see the old files or the new, and never a retired one. Done again
    # when a crashed rewrite is finished (the same content; one more snapshot).
    table_commit.commit_rewrite(location, written=[new for _, new in rewrite.publish],
                                removed=list(rewrite.retire), kind=rewrite.kind,
                                note=rewrite.note or rewrite.key)  # fmt: skip
    steps.published()
    # Step 3
    for relative in rewrite.retire:
        location.delete_file(location.child(relative))
    # Step 4
    location.delete_file(_record_path(location, rewrite.key))


def open_rewrites(location: Location) -> list[Rewrite]:
    directory = location.child(REWRITES_DIR)
    names = sorted(i.base_name for i in location.list_dir(directory)
                   if i.base_name.endswith(".json"))  # fmt: skip
    return [Rewrite.from_json(location.read_bytes(posixpath.join(directory, n))) for n in names]


def finish_open(location: Location) -> list[Rewrite]:
    """Finish every rewrite a crash interrupted (steps 2 to 4); the ones finished."""
    found = open_rewrites(location)
    for rewrite in found:
        log.warning("finishing rewrite %s of %s, interrupted before: %d files to publish, "
                    "%d names to retire", rewrite.key, location.uri, len(rewrite.publish),
                    len(rewrite.retire))  # fmt: skip
        _finish(location, rewrite, RewriteSteps())
    return found
