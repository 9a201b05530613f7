"""Pausing Python's cyclic garbage collector while the engine works.

The collector runs after every few hundred allocations and walks the
objects of the generations it collects; a partition's state (every
session's table) is millions of tuples and dicts, so it walks them again
and again while a range's rows pile up: measured, a third of the engine's
time on the bench's states. Nothing the engine builds refers to itself, so
reference counting frees all of it without the collector; it is paused
for the duration and resumed as it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
