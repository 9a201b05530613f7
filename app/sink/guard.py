"""The start-up check: nobody else writing, output and checkpoint agreeing, then the claim.

A deleted, lost or swapped checkpoint beside an output that remains would
make Spark re-read from the earliest offsets (duplicates) or skip offsets
(loss). Instead the job refuses to start, names the checkpoint and says what
to run. The only fresh checkpoint accepted beside a non-empty output is one
that ``tablecast repair`` prepared.

Nothing is changed until the start is found allowed, in this order:

1. Another writer whose lease is still renewed holds the output: refused,
   naming it (:func:`app.sink.fencing.refuse_if_held`).
2. Output and checkpoint disagree: refused, naming the command to run. Files
   a crashed batch made visible before its ledger entry (commit step 6) are
   known by the pending list it wrote at step 5: a fresh checkpoint beside
   an output whose ledger is empty must find no other visible file.
3. Claim the output (:func:`app.sink.fencing.claim`) under the ledger's
   number read before step 1: a writer that claimed it meanwhile (while this
   start watched a holder's lease, or paused) keeps it, and this start is
   refused naming it. From here on a writer that held it before can change
   nothing.
4. Tidy what older writers left (:func:`tidy_older_writers`): their staging
   goes, and their pending lists' files that no ledger entry holds are
   retired, unless the checkpoint is about to redo that very batch (whose
   step 5 deals with them); a rewrite whose process died is finished.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets
from app.errors import OutputStateError
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.fencing import Fence
from app.sink.follower import LedgerFollower
from app.sink.ledger import Ledger, LedgerEntry, WriterInfo, retire_unledgered
from app.sink.visible import visible_files
from app.storage import Location, resolve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartPlan:
    """Where a run starts: the checkpoint's position, or a repair's offsets."""

    starting_offsets: Offsets | None  # None: the checkpoint's (or the earliest)
    adopt: dict[str, int]  # session -> the resync snapshot a repair restarts it from
    # The run's hold on the output (None only where a caller checks without claiming).
    fence: Fence | None = field(default=None, compare=False)


def check_before_start(
    output_uri: str,
    checkpoint: CheckpointLog,
    table: LedgerFollower,
    writer: WriterInfo | None = None,
    notice: Callable[[str], None] | None = None,
    gone: fencing.Holder | None = None,
) -> StartPlan:
    """Where the run starts, with the output claimed for ``writer``; raises
    :class:`OutputStateError`, having changed nothing, when the start is refused.

    ``table``: the output's Iceberg table (:mod:`app.table.commit`), whose snapshot
    finishes a rewrite that died. ``notice``: a line for the operator while a
    previous holder's lease is watched; ``gone``: the holder a check before this one
    found quiet (:func:`app.sink.fencing.refuse_if_held`)."""
    location = resolve(output_uri)
    writer = writer or fencing.new_writer("run", checkpoint.uri)
    # Step 1 (the claim's number first: an entry made while this start checks, or pauses,
    # takes it, and the start is refused rather than taking over a writer it never saw)
    number = fencing.next_number(location)
    fencing.refuse_if_held(location, notice, gone)
    # Step 2
    plan, redo_key = _agreed_start(location, output_uri, checkpoint)
    # Step 3
    fence = fencing.claim(location, writer, number)
    # Step 4
    tidy_older_writers(fence, redo_key, table)
    return StartPlan(plan.starting_offsets, plan.adopt, fence)


def tidy_older_writers(
    fence: Fence, redo_key: str | None, table: LedgerFollower | None = None
) -> None:
    """What writers before ``fence``'s claim left: staging, pending lists, dead rewrites.

    ``redo_key``: the batch the checkpoint is about to redo, whose pending
    lists its own step 5 settles. Runs only while the claim holds.
    """
    fence.check("tidying what earlier writers left")
    location = fence.location
    ledger = fence.ledger
    # Staged files of an older claim are never published: deleting them also fences a
    # stale writer that wakes up in the middle of its publishing (its moves fail).
    for info in location.list_dir(location.child(ledger_mod.STAGING_DIR)):
        name = info.base_name
        if not name.isdigit() or int(name) < fence.claim:
            location.delete_dir(info.path)
    head = ledger.head()
    head_key = offsets_mod.fingerprint(head.end) if head is not None else None
    ledgered: set[str] | None = None
    for pending in ledger.pending_lists():
        if pending.claim >= fence.claim:
            continue
        if pending.end_key == head_key:
            ledger.clear_pending(pending.claim)  # a crash after step 7: its files are ledgered
        elif pending.end_key != redo_key:
            if ledgered is None:
                ledgered = {f for e in ledger.entries() for f in e.files}
            retire_unledgered(location, pending, keep=ledgered)
            ledger.clear_pending(pending.claim)
    fencing.remove_old_leases(fence)
    if table is not None:
        # A rewrite whose process died shows its blocks twice until someone finishes it.
        rewrite_mod.finish_abandoned(location, snapshot=table.snapshot_rewrite)


def _agreed_start(
    location: Location, output_uri: str, checkpoint: CheckpointLog
) -> tuple[StartPlan, str | None]:
    """Step 2 (reads only): the plan, and the key of the batch the checkpoint redoes."""
    ledger = Ledger(location)
    head = ledger.head()
    adopt = ledger.adopted_sessions()
    planned = None if checkpoint.is_fresh() else checkpoint.last_planned()
    planned_end = checkpoint.offsets(planned) if planned is not None else None
    redo_key = offsets_mod.fingerprint(planned_end) if planned_end is not None else None
    repair_hint = (
        f"run `tablecast repair --output {output_uri} --checkpoint {checkpoint.uri} "
        "--archive PATH` (or --bootstrap-servers) to realign them"
    )

    if checkpoint.is_fresh():
        if head is None:
            pending = {f for p in ledger.pending_lists() for f in p.files}
            unledgered = [f for f in visible_files(location) if f not in pending]
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
            return StartPlan(None, adopt), redo_key
        if head.kind == ledger_mod.REPAIR:
            return _from_repair(head.end, adopt, checkpoint.uri), redo_key
        raise _no_progress(head, output_uri, checkpoint.uri)

    committed = checkpoint.last_committed()
    if head is None:
        if committed is None:
            log.info(
                "start: output %s is empty and checkpoint %s committed nothing (its first "
                "batch died before publishing)",
                output_uri,
                checkpoint.uri,
            )
            return StartPlan(None, adopt), redo_key  # died in its first batch
        raise _refused(
            f"output {output_uri} is empty but checkpoint {checkpoint.uri} has committed "
            f"batches up to {committed} (the output was deleted or moved); move the "
            "checkpoint aside to rebuild the output from the earliest offsets",
            output_uri,
            checkpoint.uri,
        )

    query_id = checkpoint.query_id()
    if head.kind == ledger_mod.BATCH and head.checkpoint_id != query_id:
        mistyped = (
            f"if --checkpoint is mistyped, give {head.checkpoint}; otherwise "
            if head.checkpoint and not same_place(head.checkpoint, checkpoint.uri)
            else ""
        )
        raise _refused(
            f"checkpoint {checkpoint.uri} (query {query_id}) is not the one that wrote output "
            f"{output_uri} (query {head.checkpoint_id}, {head.checkpoint}); {mistyped}"
            f"{repair_hint}",
            output_uri,
            checkpoint.uri,
        )
    committed_end = checkpoint.offsets(committed) if committed is not None else None
    if head.kind == ledger_mod.REPAIR:
        if committed is None:
            return _from_repair(head.end, adopt, checkpoint.uri), redo_key  # died early
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
        return StartPlan(None, adopt), redo_key
    raise _refused(
        f"output {output_uri} ends at {offsets_mod.describe(head.end)} but checkpoint "
        f"{checkpoint.uri} committed {offsets_mod.describe(committed_end or {})}; {repair_hint}",
        output_uri,
        checkpoint.uri,
    )


def refuse_missing_checkpoint(output_uri: str, checkpoint_uri: str) -> None:
    """Step 2 for a checkpoint that does not exist, before Spark starts: beside an output
    whose last entry is a batch it is refused as step 2 would refuse it."""
    head = Ledger(resolve(output_uri)).head()
    if head is not None and head.kind == ledger_mod.BATCH:
        raise _no_progress(head, output_uri, checkpoint_uri)


def recorded_checkpoint(output_uri: str) -> str | None:
    """The checkpoint that wrote the output's last batch, as the ledger records it."""
    head = Ledger(resolve(output_uri)).head()
    return head.checkpoint if head is not None and head.kind == ledger_mod.BATCH else None


def same_place(one: str, other: str) -> bool:
    """Whether two checkpoint URIs name the same place (a local path relative or not)."""

    def place(uri: str) -> str:
        uri = uri.rstrip("/")
        if uri.startswith("file://") or "://" not in uri:
            return os.path.abspath(uri.removeprefix("file://"))
        return uri

    return place(one) == place(other)


def _no_progress(head: LedgerEntry, output_uri: str, checkpoint_uri: str) -> OutputStateError:
    """A checkpoint without progress beside an output a batch was published to: a
    mistyped path (the ledger names another checkpoint) or a lost checkpoint. Only the
    second needs a repair, which removes output rows: the line says which is which."""
    held = offsets_mod.describe(head.end)
    repair = (
        f"`tablecast repair --output {output_uri} --checkpoint {checkpoint_uri} --archive PATH` "
        "(or --bootstrap-servers)"
    )
    if head.checkpoint and not same_place(head.checkpoint, checkpoint_uri):
        message = (
            f"checkpoint {checkpoint_uri} holds no progress, but output {output_uri} holds "
            f"offsets up to {held}, written with checkpoint {head.checkpoint}: if --checkpoint "
            f"is mistyped, run again with --checkpoint {head.checkpoint}; only if that "
            f"checkpoint is lost, run {repair}"
        )
    else:
        message = (
            f"checkpoint {checkpoint_uri} holds no progress but output {output_uri} holds "
            f"offsets up to {held}, written with this checkpoint: it was deleted or lost; "
            f"run {repair} to realign them"
        )
    return _refused(message, output_uri, checkpoint_uri)


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
