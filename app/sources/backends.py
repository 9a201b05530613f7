"""The one mapping between the job's source settings and the data source's options.

``tablecast run`` builds the options (:func:`archive_options`), Spark hands
them to :class:`app.sources.stream.TablecastSource` as strings, and
:func:`from_options` rebuilds the backend from them on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.errors import ConfigurationError
from app.offsets import Offsets
from app.sources.archive import ArchiveBackend
from app.sources.backend import Backend
from app.sources.stream import starting_offsets_option

ARCHIVE = "archive"


def common_options(
    topic_pattern: str, max_offsets_per_trigger: int, starting: Offsets | None
) -> dict[str, str]:
    options = {
        "topicPattern": topic_pattern,
        "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
    }
    if starting:
        options["startingOffsets"] = starting_offsets_option(starting)
    return options


def archive_options(uri: str) -> dict[str, str]:
    return {"backend": ARCHIVE, "path": uri}


def from_options(options: Mapping[str, str]) -> Backend:
    kind = options.get("backend", ARCHIVE)
    if kind == ARCHIVE:
        return ArchiveBackend(options["path"], options["topicPattern"])
    raise ConfigurationError(f"unknown source backend {kind!r}")
