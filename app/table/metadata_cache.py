"""A pyiceberg transaction's metadata, computed once per staged state.

pyiceberg 0.12's ``Transaction.table_metadata`` replays every staged update
over the table's metadata and deep-copies the result at each read, and one
append reads it about twenty times (the snapshot producer's checks, its
summary, the manifests' specs): a batch's table commit deep-copied the whole
metadata, every kept snapshot's summary with it, about twenty times, half of
the commit's time (docs/design.md, "A year of batches"). What a read returns
is a function of the table's metadata object and the tuple of staged
updates, and pyiceberg replaces both (never changes them in place) when
either changes, so the result is kept per pair of identities, as
apache/iceberg-python#3302 (approved, never merged) and #3784 do it upstream.
Each entry holds its two inputs, so their identities cannot be reused while
it is kept.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.table import Transaction
    from pyiceberg.table.metadata import TableMetadata

_KEPT = "_tablecast_metadata"  # the transaction's (metadata, updates, result)
_installing = threading.Lock()
_installed: list[bool] = [False]


def install() -> None:
    """Make ``Transaction.table_metadata`` keep its result per staged state (once a process)."""
    with _installing:
        if _installed[0]:
            return
        from pyiceberg.table import Transaction
        from pyiceberg.table.update import update_table_metadata

        def table_metadata(self: Transaction) -> TableMetadata:
            base: Any = self._table.metadata
            updates: Any = self._updates
            held = self.__dict__.get(_KEPT)
            if held is not None and held[0] is base and held[1] is updates:
                return held[2]  # type: ignore[no-any-return]
            metadata = update_table_metadata(base, updates)
            self.__dict__[_KEPT] = (base, updates, metadata)
            return metadata

        Transaction.table_metadata = property(table_metadata)  # type: ignore[method-assign,assignment]
        _installed[0] = True
