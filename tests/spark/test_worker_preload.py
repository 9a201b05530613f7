"""Spark's Python workers forked from a daemon that imported their libraries.

The shared local session names ``tablecast_preload`` as Spark's Python daemon
(``app.spark.session.preload_daemon``): a task in a worker forked from it finds
pyarrow, pandas, confluent-kafka and PySpark's worker already imported, by the
daemon (its parent), before the task began; the daemon never imported ``app``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import tablecast_preload

from app.spark.session import DAEMON_MODULE_KEY, PRELOAD_MODULE, preload_daemon

LIBRARIES = ("pyarrow", "pandas", "numpy", "confluent_kafka", "pyspark.worker")


def _probe(_: Iterator[Any]) -> Iterator[tuple[int, int | None, tuple[str, ...], bool, bool]]:
    # At the task's start, before it imports anything of its own.
    import sys as task_sys

    preloaded = task_sys.modules.get("tablecast_preload")
    record = getattr(preloaded, "Preloaded", None)
    present = all(name in task_sys.modules for name in LIBRARIES)
    yield (
        os.getppid(),
        getattr(record, "pid", None),
        tuple(getattr(record, "modules", ())),
        present,
        getattr(record, "app_imported", True),
    )


def test_a_new_python_worker_starts_with_the_libraries_its_daemon_imported(spark: Any) -> None:
    assert spark.sparkContext.getConf().get(DAEMON_MODULE_KEY) == PRELOAD_MODULE
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_probe).collect()
    assert rows
    for parent, preloaded_by, modules, present, app_imported in rows:
        assert preloaded_by == parent, "the preload ran in the daemon the worker was forked from"
        assert set(LIBRARIES) <= set(modules) and present
        assert not app_imported, "the daemon must not import the job's own code"


def test_a_library_that_fails_to_import_is_skipped_and_the_rest_load() -> None:
    assert tablecast_preload.preload(("no_such_library_here", "json")) == ("json",)
    assert tablecast_preload.Preloaded.failed == ("no_such_library_here",)


@pytest.mark.parametrize(
    ("settings", "python", "named"),
    [
        ({"spark.master": "local[2]"}, sys.executable, True),
        ({"spark.master": "local[2]"}, "/other/python", False),
        ({"spark.master": "spark://driver:7077"}, sys.executable, False),
        ({"spark.master": "local[2]", DAEMON_MODULE_KEY: "pyspark.daemon"}, sys.executable, False),
    ],
)
def test_the_daemon_is_named_only_where_the_workers_python_imports_it(
    settings: dict[str, str], python: str, named: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark import SparkConf

    monkeypatch.setenv("PYSPARK_PYTHON", python)
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    assert preload_daemon(conf) is named
    expected = PRELOAD_MODULE if named else settings.get(DAEMON_MODULE_KEY)
    assert conf.get(DAEMON_MODULE_KEY) == expected


def test_a_preload_this_interpreter_cannot_import_is_not_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark import SparkConf

    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf(loadDefaults=False).set("spark.master", "local[2]")
    assert preload_daemon(conf, module="no_such_preload_here") is False
    assert not conf.contains(DAEMON_MODULE_KEY)
