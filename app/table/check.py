"""``verify``'s check of the output's Iceberg table: it loads, and its current snapshot holds
exactly the visible data files (:mod:`app.table.damage` says what mends it when not)."""

from __future__ import annotations

from app.errors import DamagedOutputError, TablecastError, one_line
from app.sink import rewrite as rewrite_mod
from app.sink.ledger import Ledger
from app.sink.visible import visible_files
from app.storage import Location
from app.table.catalog import (
    TABLE_DIR,
    config_for,
    damaged_table,
    load_table,
    table_exists,
    threads_released,
)
from app.table.commit import data_files, data_path
from app.table.damage import first_names, replay_command


def check_table(location: Location, *, archive: str | None = None) -> str | None:
    """That the output's Iceberg table loads and its current snapshot holds exactly the
    visible data files; a description of it, None when the output keeps no table or holds
    nothing yet. Files a batch or a rewrite is publishing (its pending list, an open
    rewrite's names) are left out of the comparison: the table takes them at its end; the
    description names those published that it does not hold yet. A live job that wrote a
    ledger entry meanwhile makes it look again (a few times)."""
    ledger = Ledger(location)
    for _ in range(_LOOKS - 1):
        before = ledger.numbers()
        try:
            return _check_table(location, archive)
        except DamagedOutputError:
            if ledger.numbers() == before:
                raise
    return _check_table(location, archive)


_LOOKS = 3


def _check_table(location: Location, archive: str | None) -> str | None:
    config = config_for(location)
    ledger = Ledger(location)
    if config is None or ledger.head() is None:  # no batch published yet: no table either
        return None
    try:
        with location.refusing(location.child(TABLE_DIR), "read"), threads_released():
            if not table_exists(location, config):
                raise damaged_table(location, f"({config.table}) is missing from its catalog")
            table = load_table(location, config)
            held = {f.file_path for f in data_files(table)}
    except TablecastError:
        raise
    except Exception as exc:  # its metadata, or a manifest its snapshot names, lost or damaged
        detail = one_line(exc, limit=200)
        raise damaged_table(location, f"({config.table}) cannot be loaded: {detail}") from None
    busy = {f for pending in ledger.pending_lists() for f in pending.files}
    for found in rewrite_mod.open_rewrites(location):
        busy |= set(found.retire) | {new for _, new in found.publish}
    shown = [f for f in visible_files(location) if not f.startswith("_quarantine/")]
    # Published, but their table commit is still to come: a live job's in flight, or those of
    # a job that stopped between its ledger entry and its table commit (its next start
    # commits them), which readers of the table do not see until then.
    waiting = {data_path(location, f) for f in shown if f in busy} - held
    visible = {data_path(location, f) for f in shown if f not in busy}
    held -= {data_path(location, f) for f in busy}
    extra, missing = sorted(held - visible), sorted(visible - held)
    if extra:  # a data file lost: its rows are what is missing, the table is right
        relative = extra[0][len(data_path(location, "")) :]
        command = replay_command(location, relative, archive)
        raise DamagedOutputError(
            f"output file {location.shown(location.child(relative))} is gone, while the "
            f"Iceberg table holds it ({len(extra)} such files: {first_names(extra)}): run "
            f"`{command}` to write its rows again",
            output=location.uri,
            path=location.shown(location.child(relative)),
            command=command,
        )
    if missing:
        raise damaged_table(
            location,
            f"lacks {len(missing)} of the output's visible data files ({first_names(missing)})",
        )
    described = f"{config.table}: its current snapshot holds the {len(held):,} visible data files"
    if waiting:
        described += (
            f"; {len(waiting):,} more, published, are not in it yet "
            f"({first_names(sorted(waiting))}): the job's next batch or start commits them"
        )
    return described
