"""The job's compiled parts (``app/contract/_envelope.c``, ``app/engine/_columns.c``).

``make setup`` builds each beside its source; the job's wheel is pure Python, so
a process may have none. Each exports the number of the interface it was built
with, and its Python side uses it only when that is the one it was written for:
a module built from older source (a checkout updated without ``make setup``) is
left unused, not misread.
"""

from __future__ import annotations

INTERFACE = 3  # each C file's INTERFACE, raised with any change to what it takes or gives


def usable(module: object) -> bool:
    """Whether an imported compiled module (None: not built) is of this interface."""
    return getattr(module, "INTERFACE", None) == INTERFACE
