"""Pausing Python's cyclic garbage collector while the engine works.

The collector runs after every few hundred allocations and walks the
objects of the generations it collects; a partition's state (every
session's table) is millions of tuples and dicts, so it walks them again
and again while a range's rows pile up: measured, a third of the engine's
time on the bench's states. Nothing the engine builds refers to itself, so
reference counting frees all of it without the collector; it is paused
for the duration and resumed as it was.

A Spark worker keeps the states it saved for the next batch (the task's
cache), and PySpark's worker loop runs a full collection after every task:
each walked every cached state again, and re-enabling the collector after
each slice walked each slice's new objects. A task pauses it (``freeze``)
for a whole partition's run instead, collects once at the end and freezes
what survived (``gc.freeze``), so each object is walked once in its life.
Frozen objects are still freed by reference counting when the cache lets
them go; the collection before the freeze keeps any cyclic garbage the run
made out of the frozen set.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """Pause the collector for a unit of work; with ``freeze``, at its end collect once and freeze.

    Only a process that keeps what the work built (a Spark worker and its
    state cache) should freeze: frozen objects stay out of every later
    collection.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            if freeze:
                gc.collect()
                gc.freeze()
            gc.enable()
