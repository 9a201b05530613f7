"""Spark's Python workers forked from a daemon that imported their libraries.

The shared local session names ``tablecast_preload`` as Spark's Python daemon
(``app.spark.session.preload_daemon``): a task in a worker forked from it finds
pyarrow, pandas, confluent-kafka and PySpark's worker already imported, by the
daemon (its parent), before the task began; the daemon never imported ``app``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
import tablecast_preload
from tablecast_preload import spark_path

from app.spark.session import DAEMON_MODULE_KEY, PRELOAD_MODULE, preload_daemon

LIBRARIES = ("pyarrow", "pandas", "numpy", "confluent_kafka", "pyspark.worker")


@dataclass(frozen=True)
class _Worker:
    parent: int
    preloaded_by: int | None
    modules: tuple[str, ...]
    present: bool
    app_imported: bool
    pyspark_file: str
    zips_read: tuple[str, ...]  # zips whose directory each task's invalidate_caches reads
    frozen: int  # objects the cyclic collector skips (gc.get_freeze_count)


def _probe(_: Iterator[Any]) -> Iterator[_Worker]:
    # At the task's start, before it imports anything of its own.
    import gc
    import sys as task_sys

    import pyspark

    preloaded = task_sys.modules.get("tablecast_preload")
    record = getattr(preloaded, "Preloaded", None)
    yield _Worker(
        parent=os.getppid(),
        preloaded_by=getattr(record, "pid", None),
        modules=tuple(getattr(record, "modules", ())),
        present=all(name in task_sys.modules for name in LIBRARIES),
        app_imported=getattr(record, "app_imported", True),
        pyspark_file=str(pyspark.__file__),
        zips_read=tuple(
            path
            for path, finder in task_sys.path_importer_cache.items()
            if path.endswith(".zip") and finder is not None
        ),
        frozen=gc.get_freeze_count(),
    )


def test_a_new_python_worker_starts_with_the_libraries_its_daemon_imported(spark: Any) -> None:
    assert spark.sparkContext.getConf().get(DAEMON_MODULE_KEY) == PRELOAD_MODULE
    workers = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_probe).collect()
    assert workers
    for worker in workers:
        assert worker.preloaded_by == worker.parent, "the preload ran in the worker's daemon"
        assert set(LIBRARIES) <= set(worker.modules) and worker.present
        assert not worker.app_imported, "the daemon must not import the job's own code"
        # PySpark from the installed package (bytecode cached), and no zip of Spark's
        # left for each task to read again.
        assert worker.pyspark_file == pyspark.__file__
        sparks = [z for z in worker.zips_read if "pyspark" in z or "py4j" in z]
        assert not sparks
        # The daemon froze what it imported: PySpark's gc.collect() after each task
        # passes over the libraries' objects.
        assert worker.frozen > 0


def _imported_from(pythonpath: list[Path]) -> list[str]:
    """Where a new process of this venv, with ``pythonpath`` first, imports PySpark from."""
    probe = "import sys, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
    probe += "; print(*[p for p in sys.path if p.endswith('.zip')], sep='\\n')"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))},
    )
    return done.stdout.splitlines()


def test_a_process_given_sparks_own_zips_imports_pyspark_from_the_installed_package() -> None:
    # As Spark starts its planners, daemon and workers: its zips first on PYTHONPATH.
    zips = sorted((Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))
    assert [z.name for z in zips] == ["py4j-0.10.9.9-src.zip", "pyspark.zip"]
    pyspark_file, py4j_file, *on_path = _imported_from(zips)
    assert pyspark_file == pyspark.__file__ and ".zip" not in py4j_file
    assert not set(map(str, zips)) & set(on_path)


def test_a_zip_of_another_spark_stays_where_spark_put_it(tmp_path: Path) -> None:
    other = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    shutil.copy(Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip", other)
    pyspark_file, _, *on_path = _imported_from([other])
    assert pyspark_file == str(other / "pyspark" / "__init__.py")
    assert str(other) in on_path


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


def test_the_venvs_start_up_line_is_silent_where_the_package_is_gone(tmp_path: Path) -> None:
    # -S: no site, so no editable install either; tablecast_preload cannot be imported.
    done = subprocess.run(
        [sys.executable, "-S", "-c", spark_path.PTH_LINE],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
