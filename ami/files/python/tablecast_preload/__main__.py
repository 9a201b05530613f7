"""``python -m tablecast_preload``: the libraries imported, then PySpark's daemon."""

import gc

from tablecast_preload import preload

preload()

from pyspark import daemon  # noqa: E402  (after the preload, as the daemon forks its workers)

# What the daemon holds now (the libraries' objects, about 80,000) is
# never garbage: frozen, the cyclic collector leaves it alone in every worker
# forked from here (PySpark's worker loop runs gc.collect() after each task), and
# the workers share its pages instead of writing to them (the documented use of
# gc.freeze: gc.disable early, freeze right before fork).
gc.freeze()
daemon.manager()
