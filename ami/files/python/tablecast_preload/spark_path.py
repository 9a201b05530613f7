"""PySpark imported from the installed package, not from Spark's zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's source zip
first on the path of every Python process it starts: the daemon and its
workers, and the planner processes a Python data source's query start
runs one after another (look-up, create, plan, the streaming source's
runner). Python compiles a module it imports from a zip anew in each
process (a zip holds no bytecode cache): 0.5 to 1.3 core-seconds a
process. And every task's ``importlib.invalidate_caches()`` (PySpark's
``setup_spark_files``) reads each zip's directory again: 0.2 to 0.3
core-seconds a task for pyspark.zip's 4 MB.

Where ``SPARK_HOME`` is the installed ``pyspark`` package itself (pip's
PySpark locally, and the image's ``/opt/spark``, a link to it), the zips
hold the very modules the package beside them holds, whose bytecode is
cached: :func:`prefer_installed` takes the zips off ``sys.path`` so the
process imports those. A zip of any other Spark is left where it is.

It runs as the interpreter starts, before any PySpark import, from the
``.pth`` file ``python -m tablecast_preload.pth [DIR ...]`` writes
into the venv (``make setup``; the image's ``ami/scripts/node-files.sh``,
which names ``/opt/tablecast/python`` as a DIR to put on the path first).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

_ZIPS = ("pyspark.zip", "py4j-")
PTH_NAME = "tablecast-preload.pth"
# Python runs this line as every process of the venv starts: where the package is
# gone (an image whose /opt/tablecast/python was removed), it does nothing rather
# than print a traceback from each process's start.
PTH_LINE = (
    'import importlib.util; importlib.util.find_spec("tablecast_preload") and '
    '__import__("tablecast_preload.spark_path").spark_path.prefer_installed()'
)


def prefer_installed() -> tuple[str, ...]:
    """Take this install's PySpark and py4j zips off ``sys.path``; returns them."""
    zips = [p for p in sys.path if p.endswith(".zip") and os.path.basename(p).startswith(_ZIPS)]
    if not zips:
        return ()
    rest = [p for p in sys.path if p not in zips]
    pyspark = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if pyspark is None or not pyspark.submodule_search_locations:
        return ()
    package = next(iter(pyspark.submodule_search_locations))
    lib = os.path.join(os.path.realpath(package), "python", "lib")
    has_py4j = importlib.machinery.PathFinder.find_spec("py4j", rest) is not None
    taken = tuple(
        p
        for p in zips
        if os.path.realpath(os.path.dirname(p)) == lib
        and (has_py4j or not os.path.basename(p).startswith("py4j-"))
    )
    sys.path[:] = [p for p in sys.path if p not in taken]
    for entry in taken:  # a finder left cached would read its zip again at each invalidation
        sys.path_importer_cache.pop(entry, None)
    return taken
