"""``python -m tablecast_preload``: the libraries imported, then PySpark's daemon."""

from tablecast_preload import preload

preload()

from pyspark import daemon  # noqa: E402  (after the preload, as the daemon forks its workers)

daemon.manager()
