"""Spark's Python daemon with the workers' heavy libraries already imported.

Spark forks every Python worker of an executor from one daemon process, the
module ``spark.python.daemon.module`` names, run as ``python -m``. Run as that
module (``__main__``), this package imports the third-party libraries every
tablecast task imports (:data:`MODULES`) and then runs PySpark's own daemon,
so a worker forked from it starts with them loaded instead of spending 0.7 to
1.3 s (3 to 12 s on a loaded machine) importing them before its first record.

It never imports ``app``: each worker imports the job's code from the files
the driver ships (``app.spark.code``), and a copy loaded here would shadow
them. It opens no socket and makes no Kafka client before the fork (a
client's librdkafka threads do not survive it). A library that fails to
import is skipped; the worker imports it itself and fails there, in the
task's own error, so the daemon always starts.

The image installs it into ``/opt/tablecast/python``, on the venv's path
through a ``.pth``; an install of the checkout carries it beside ``app``, for
local runs (the wheel ``tablecast-ops deploy`` builds holds ``app`` only).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

# What a tablecast task imports, measured with ``python -X importtime``:
# PySpark's worker (pyspark.sql, which every forked worker imports first),
# pandas and numpy (PySpark's Arrow path and pyarrow's first conversion),
# pyarrow's modules the source, engine and sink use, confluent-kafka
# (librdkafka, loaded; no client), orjson and msgspec, and MSK's IAM signer (botocore),
# which every new consumer on MSK imports to sign in.
MODULES = (
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.pandas_compat",
    "orjson",
    "msgspec",
    "confluent_kafka",
    "confluent_kafka.admin",
    "aws_msk_iam_sasl_signer",
    "pyspark.worker",
)


class Preloaded:
    """What :func:`preload` did in this process (a forked worker inherits it)."""

    pid: int | None = None  # the process that ran it: the daemon, for a forked worker
    modules: tuple[str, ...] = ()  # those that imported
    failed: tuple[str, ...] = ()  # those that did not (the worker imports them itself)
    app_imported: bool = False  # whether the job's own code got in (it must not)


def preload(modules: tuple[str, ...] = MODULES) -> tuple[str, ...]:
    """Import ``modules``, skipping any that fails; returns those that imported."""
    done: list[str] = []
    failed: list[str] = []
    for name in modules:
        try:
            # The daemon's standard output carries its port to Spark: nothing else.
            with contextlib.redirect_stdout(sys.stderr):
                importlib.import_module(name)
        except Exception:  # a worker would meet the same failure in its own task
            failed.append(name)
        else:
            done.append(name)
    Preloaded.pid = os.getpid()
    Preloaded.modules = tuple(done)
    Preloaded.failed = tuple(failed)
    Preloaded.app_imported = "app" in sys.modules
    if failed:
        print(f"tablecast_preload: not preloaded: {', '.join(failed)}", file=sys.stderr)
    return Preloaded.modules
