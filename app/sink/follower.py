"""What follows the output's ledger: its Iceberg table, as the sink calls it.

The sink commits the table after each ledger entry and finishes, with the
table's snapshot, a rewrite whose process died; the live job's sink also
removes the table's files that no snapshot references any more. :mod:`app.table.commit`
does both; the table's package builds on the sink's (the ledger, the
rewrites), never the other way, so the sink's caller passes the table in
(:func:`app.spark.job.run` passes :mod:`app.table.commit`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from app.sink.rewrite import Rewrite
from app.storage import Location


class LedgerFollower(Protocol):
    """The output's table, kept in step with the ledger (:mod:`app.table.commit`)."""

    def catch_up(self, location: Location) -> int:
        """Commit every ledger entry the table does not hold yet; how many snapshots."""
        ...

    def snapshot_rewrite(self, location: Location, rewrite: Rewrite) -> None:
        """A rewrite's overwrite snapshot (a :class:`app.sink.rewrite.TableSnapshot`)."""
        ...


class TableUpkeep(LedgerFollower, Protocol):
    """The live job's table: it also removes what no snapshot references any more
    (:class:`app.table.live.LiveTable`)."""

    def tidy(
        self, location: Location, before: Callable[[], None], deleted: Callable[[int], None]
    ) -> int:
        """Delete the table's files unreferenced for the grace (``before()`` first, the
        fence; ``deleted(n)`` after each); how many."""
        ...
