"""The job on a Spark standalone cluster whose workers do not have the job's package.

A master and a worker start from PySpark's launcher on loopback
(:mod:`app.local.spark_cluster`). The executors' interpreter sees the job's
dependencies but not ``app``, as on the AMI's worker nodes, which hold
``requirements.lock`` only. The job must ship its own code: through the
wheel that ``run-job`` passes with ``--py-files``, or by itself when started
with ``tablecast run --master spark://...`` from a checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.local.processes import poll_until
from app.local.spark_cluster import StandaloneCluster, spark_home, start_cluster
from app.ops.wheel import build_wheel
from app.tools import generate as gen
from tests.spark.helpers import assert_exact, run_argv, write_capture

PROJECT = Path(__file__).resolve().parents[2]
RUN_JOB = PROJECT / "ami" / "files" / "bin" / "run-job"
DRIVER_PY = PROJECT / "ami" / "files" / "bin" / "tablecast-driver.py"
SPEC = gen.CaptureSpec(topics=2, partitions=2, sessions=8, updates=40, records_per_file=80, seed=12)


def executor_python(root: Path) -> str:
    """An interpreter with the job's dependencies and without its package."""
    venv.create(root, with_pip=False)
    site = Path(sysconfig.get_paths(vars={"base": str(root), "platbase": str(root)})["purelib"])
    # A path listed in a .pth file is on sys.path, but its own .pth files (the
    # editable install of `app`) are not run: the dependencies come, the package not.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(root / "bin" / "python")
    probe = subprocess.run(
        [python, "-c", "import pyarrow, orjson, pyspark, app"],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    assert "No module named 'app'" in probe.stderr, probe.stderr
    return python


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    root = tmp_path_factory.mktemp("cluster")
    # One interpreter without the job's package for every Python worker, the
    # driver's included (Spark runs the data source's planning in them).
    started = start_cluster(root, executor_python(root / "worker-venv"), sys.executable)
    try:
        yield started
    finally:
        started.stop_all()


def applications(cluster: StandaloneCluster) -> set[str]:
    """The applications the worker launched executors for (its work directories)."""
    return {p.name for p in (cluster.root / "work").glob("app-*")}


def assert_ran_on_the_worker(cluster: StandaloneCluster, before: set[str]) -> None:
    """The run was one application on the cluster, and the worker's executors ran its tasks."""
    [app_id] = applications(cluster) - before
    logs = "".join(p.read_text() for p in (cluster.root / "work" / app_id).glob("*/stderr"))
    assert "Finished task" in logs, "no task ran in the worker's executors"
    # The master hears of the driver's end on its own RPC thread, which may come after the
    # driver's process has exited (seen once in CI on a loaded machine): wait for it, bounded.
    assert poll_until(lambda: app_id in cluster.status().completed_apps, timeout_s=30), (
        f"the master never listed {app_id} as completed: {cluster.status()}"
    )


def run_job_submit_options(wheel: Path, master_url: str) -> list[str]:
    """The spark-submit options of run-job's own command line, its variables filled in."""
    text = RUN_JOB.read_text(encoding="utf-8").replace("\\\n", " ")
    line = text[text.index('"${SPARK_HOME}/bin/spark-submit"') :].split("\n")[0]
    words = shlex.split(line)[1 : shlex.split(line).index("${DRIVER_PY}")]
    values = {
        "${py_files}": str(wheel),
        "${TABLECAST_ENV}": "test",
        "${app_name}": "tablecast-test",  # one job: the environment's name
        "spark://${TABLECAST_DRIVER_HOST}:${MASTER_PORT}": master_url,
    }
    # ${spark_conf[@]}: empty, as run-job leaves it where the image's preloading daemon is
    # not installed (this worker's venv has none).
    filled = [
        values.get(word, re.sub(r"^tablecast-\$\{TABLECAST_ENV\}$", "tablecast-test", word))
        for word in words
        if word != "${spark_conf[@]}"
    ]
    assert not [w for w in filled if "${" in w], filled
    return filled


def test_run_jobs_submit_line_ships_the_installed_wheel(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    write_capture(tmp_path / "archive", SPEC)
    wheel = build_wheel(PROJECT, tmp_path / "wheels")
    py_files = wheel.path.with_name(f"tablecast-{wheel.version}.zip")  # as run-job copies it
    shutil.copyfile(wheel.path, py_files)
    options = run_job_submit_options(py_files, cluster.master_url)
    assert options[options.index("--py-files") + 1] == str(py_files)
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        *options,
        str(DRIVER_PY),
        *run_argv(tmp_path),
        "--max-offsets-per-trigger",
        "100",
    ]
    before = applications(cluster)
    done = subprocess.run(
        command,
        env=cluster.env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch 1:" in done.stdout  # several micro-batches
    assert_exact(tmp_path / "archive", tmp_path / "out")
    assert_ran_on_the_worker(cluster, before)


def test_a_run_from_a_checkout_ships_its_own_code(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    write_capture(tmp_path / "archive", SPEC)
    env = {**cluster.env(), "PYSPARK_PYTHON": _executor_interpreter(cluster)}
    command = [
        sys.executable,
        "-m",
        "app",
        *run_argv(tmp_path),
        "--master",
        cluster.master_url,
    ]
    before = applications(cluster)
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert_exact(tmp_path / "archive", tmp_path / "out")
    assert_ran_on_the_worker(cluster, before)


def test_a_cluster_run_without_the_executors_interpreter_is_refused(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    env = {k: v for k, v in cluster.env().items() if k != "PYSPARK_PYTHON"}
    archive = tmp_path / "archive"
    archive.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "run",
            "--master",
            cluster.master_url,
            "--archive",
            str(archive),
            "--output",
            str(tmp_path / "o"),
            "--checkpoint",
            str(tmp_path / "c"),
        ],
        env=env,
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 64
    assert done.stderr.strip().splitlines() == [
        f"tablecast run: --master {cluster.master_url}: set PYSPARK_PYTHON to the Python "
        "interpreter of the cluster's workers (on the image: /opt/tablecast/venv/bin/python)"
    ]


def _executor_interpreter(cluster: StandaloneCluster) -> str:
    for line in (cluster.conf_dir / "spark-defaults.conf").read_text().splitlines():
        if line.startswith("spark.pyspark.python "):
            return line.split()[1]
    raise AssertionError("no spark.pyspark.python in the cluster's defaults")


def test_the_executors_never_had_the_package(cluster: StandaloneCluster) -> None:
    python = _executor_interpreter(cluster)
    probe = subprocess.run(
        [python, "-c", "import app"],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(python),
        check=False,
    )
    assert probe.returncode != 0 and "No module named 'app'" in probe.stderr
