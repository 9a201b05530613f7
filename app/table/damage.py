"""What in an output cannot be read, and the command that mends it.

Every command that reads published files (``verify``, ``repair``'s plan,
``replay`` and ``correct`` rewriting a compacted day, ``compact``) reads
them through :func:`read_published`: a file that is not whole Parquet (cut
short by a disk, altered by hand) stops the command with a
:class:`~app.errors.DamagedOutputError` (exit 8) naming the file and the
``tablecast replay`` that writes its rows again. Replay chooses its ranges
by the records' timestamps, which producers set to the message's ``ts``
(CONTRACT.md section 1), and a data file's day is its rows' ``ts`` (a
quarantine file's, its records' timestamps): so the file's day, as a
window, recomputes every block the file holds, and a replay does not need
to read the damaged file to replace it.

The output's Iceberg table follows the ledger (:mod:`app.table.commit`):
one that cannot be loaded, or whose current snapshot does not hold exactly
the visible data files, is mended by ``tablecast table --rebuild``, which
makes it again from the ledger and the visible files
(:mod:`app.table.check`); a data file the table holds that is gone is
mended by the replay of its day.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from app.engine.writer import file_day
from app.errors import DamagedOutputError
from app.storage import Location, refusal

# What pyarrow raises for a file that is not whole Parquet: a cut footer, a bad magic
# number, a page that does not decode.
UNREADABLE = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError)


def read_published(
    location: Location,
    relative: str,
    *,
    columns: Sequence[str] | None = None,
    schema: pa.Schema | None = None,
    archive: str | None = None,
) -> pa.Table:
    """One published file's own columns (a ``date=<day>/`` file's without the day, a
    ``<day>/`` file's with its ``date`` column), or a
    :class:`DamagedOutputError` naming it and what mends it."""
    path = location.child(relative)
    with location.refusing(path, "read"):
        try:
            return pq.read_table(
                path,
                filesystem=location.fs,
                columns=None if columns is None else list(columns),
                schema=schema,
                partitioning=None,
            )
        except FileNotFoundError:
            raise
        except UNREADABLE as exc:
            if isinstance(exc, OSError) and refusal(exc) is not None:
                raise
            raise damaged_file(location, relative, exc, archive=archive) from None


def damaged_file(
    location: Location, relative: str, cause: BaseException, *, archive: str | None = None
) -> DamagedOutputError:
    """The one line for a published file that cannot be read."""
    detail = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    command = replay_command(location, relative, archive)
    return DamagedOutputError(
        f"output file {location.shown(location.child(relative))} cannot be read ({detail[:200]}): "
        f"run `{command}` to write its rows again",
        output=location.uri,
        path=location.shown(location.child(relative)),
        command=command,
    )


def replay_command(location: Location, relative: str, archive: str | None) -> str:
    """``tablecast replay`` over the day of ``relative``: it recomputes every block the file
    holds (module docstring)."""
    day = file_day(relative)
    since = "SINCE" if day is None else f"{day.isoformat()}T00:00:00Z"
    until = "UNTIL" if day is None else f"{(day + timedelta(days=1)).isoformat()}T00:00:00Z"
    return (
        f"tablecast replay --archive {archive or 'ARCHIVE'} --output {location.uri} "
        f"--since {since} --until {until}"
    )


def first_names(paths: Sequence[str], shown: int = 3) -> str:
    names = [posixpath.basename(p) for p in sorted(paths)[:shown]]
    return ", ".join(names) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
