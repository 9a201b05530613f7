"""The start-up check: output and checkpoint must agree before a run starts.

A deleted, lost or swapped checkpoint beside an output that remains would
make Spark re-read from the earliest offsets (duplicates) or skip offsets
(loss). Instead the job refuses to start, names the checkpoint and says what
to run. The only fresh checkpoint accepted beside a non-empty output is one
that ``tablecast repair`` prepared.

Files a crashed batch made visible before its ledger entry (commit step 6)
are found first, by the pending list it wrote at step 5, and retired unless
the checkpoint is about to redo that very batch (whose step 5 deals with
them); a fresh checkpoint beside an output whose ledger is empty must find
no visible file at all, or the start is refused naming them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets
from app.errors import OutputStateError
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.follower import LedgerFollower
from app.sink.ledger import Ledger, LedgerEntry, retire_unledgered
from app.sink.visible import visible_files
from app.storage import resolve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartPlan:
    """Where a run starts: the checkpoint's position, or a repair's offsets."""

    starting_offsets: Offsets | None  # None: the checkpoint's (or the earliest)
    adopt: dict[str, int]  # session -> the resync snapshot a repair restarts it from


def check_before_start(
    output_uri: str, checkpoint: CheckpointLog, table: LedgerFollower
) -> StartPlan:
    """Where the run starts; :class:`OutputStateError` when output and checkpoint disagree.

    ``table``: the output's Iceberg table (:mod:`app.table.commit`), whose snapshot
    finishes a rewrite that died."""
    location = resolve(output_uri)
    ledger = Ledger(location)
    # Files staged by a run that died are never published; a redo stages anew.
    location.delete_dir(location.child(ledger_mod.STAGING_DIR))
    # A rewrite whose process died shows its blocks twice until someone finishes it.
    rewrite_mod.finish_abandoned(location, snapshot=table.snapshot_rewrite)
    head = ledger.head()
    _retire_pending(ledger, head, checkpoint)
    adopt = ledger.adopted_sessions()
    repair_hint = (
        f"run `tablecast repair --output {output_uri} --checkpoint {checkpoint.uri} "
        "--archive PATH` (or --bootstrap-servers) to realign them"
    )

    if checkpoint.is_fresh():
        if head is None:
            unledgered = visible_files(location)
            if unledgered:
                shown = ", ".join(unledgered[:3]) + (" ..." if len(unledgered) > 3 else "")
                raise _refused(
                    f"output {output_uri} holds {len(unledgered)} data files that no ledger "
                    f"entry covers ({shown}) beside the new checkpoint {checkpoint.uri}: a run "
                    "from the earliest offsets would publish their rows again; delete them (or "
                    "give a new --output) and run again",
                    output_uri,
                    checkpoint.uri,
                )
            log.info(
                "start: checkpoint %s and output %s are both new; reading from the "
                "earliest offsets",
                checkpoint.uri,
                output_uri,
            )
            return StartPlan(None, adopt)
        if head.kind == ledger_mod.REPAIR:
            return _from_repair(head.end, adopt, checkpoint.uri)
        raise _refused(
            f"checkpoint {checkpoint.uri} holds no progress but output {output_uri} holds "
            f"offsets up to {offsets_mod.describe(head.end)} (the checkpoint was deleted, "
            f"lost or swapped); {repair_hint}",
            output_uri,
            checkpoint.uri,
        )

    committed = checkpoint.last_committed()
    if head is None:
        if committed is None:
            log.info(
                "start: output %s is empty and checkpoint %s committed nothing (its first "
                "batch died before publishing)",
                output_uri,
                checkpoint.uri,
            )
            return StartPlan(None, adopt)  # died in its first batch, before publishing
        raise _refused(
            f"output {output_uri} is empty but checkpoint {checkpoint.uri} has committed "
            f"batches up to {committed} (the output was deleted or moved); move the "
            "checkpoint aside to rebuild the output from the earliest offsets",
            output_uri,
            checkpoint.uri,
        )

    query_id = checkpoint.query_id()
    if head.kind == ledger_mod.BATCH and head.checkpoint_id != query_id:
        raise _refused(
            f"checkpoint {checkpoint.uri} (query {query_id}) is not the one that wrote output "
            f"{output_uri} (query {head.checkpoint_id}, {head.checkpoint}); {repair_hint}",
            output_uri,
            checkpoint.uri,
        )
    committed_end = checkpoint.offsets(committed) if committed is not None else None
    planned = checkpoint.last_planned()
    planned_end = checkpoint.offsets(planned) if planned is not None else None
    if head.kind == ledger_mod.REPAIR:
        if committed is None:
            return _from_repair(head.end, adopt, checkpoint.uri)  # the run after it died early
    elif head.end in (committed_end, planned_end):
        # Equal to the planned batch: published, then died before Spark's commit.
        if head.end == committed_end:
            log.info(
                "start: output %s ends at %s, as checkpoint %s's committed batch %s does",
                output_uri,
                offsets_mod.describe(head.end),
                checkpoint.uri,
                committed,
            )
        else:
            log.info(
                "start: output %s ends at %s, as checkpoint %s's planned batch %s does: "
                "published, then the run died before Spark's commit; the redo publishes "
                "nothing",
                output_uri,
                offsets_mod.describe(head.end),
                checkpoint.uri,
                planned,
            )
        return StartPlan(None, adopt)
    raise _refused(
        f"output {output_uri} ends at {offsets_mod.describe(head.end)} but checkpoint "
        f"{checkpoint.uri} committed {offsets_mod.describe(committed_end or {})}; {repair_hint}",
        output_uri,
        checkpoint.uri,
    )


def _retire_pending(ledger: Ledger, head: LedgerEntry | None, checkpoint: CheckpointLog) -> None:
    """Retire the files of a pending list no ledger entry holds, unless a redo will publish it."""
    pending = ledger.pending()
    if pending is None:
        return
    if head is not None and pending.end_key == offsets_mod.fingerprint(head.end):
        return  # a crash after step 7: its files are ledgered; the recognised redo clears it
    planned = None if checkpoint.is_fresh() else checkpoint.last_planned()
    planned_end = checkpoint.offsets(planned) if planned is not None else None
    if planned_end is not None and pending.end_key == offsets_mod.fingerprint(planned_end):
        return  # the checkpoint redoes that batch: its step 5 settles the list
    retire_unledgered(ledger.location, pending, keep=set())
    ledger.clear_pending()


def _from_repair(end: Offsets, adopt: dict[str, int], checkpoint_uri: str) -> StartPlan:
    log.info(
        "start: checkpoint %s begins at the last repair's offsets %s (%d adopted sessions)",
        checkpoint_uri,
        offsets_mod.describe(end),
        len(adopt),
    )
    return StartPlan(end, adopt)


def _refused(message: str, output: str, checkpoint: str) -> OutputStateError:
    # INFO, not WARNING: on a terminal (WARNING and up) the CLI's one error line says it.
    log.info("start refused: %s", message)
    return OutputStateError(message, output=output, checkpoint=checkpoint)
