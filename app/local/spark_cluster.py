"""A Spark standalone driver and worker on loopback, started as the AMI's services start them.

The image's ``spark-master.service`` and ``spark-worker.service`` run
``spark-class org.apache.spark.deploy.master.Master`` and ``...Worker`` in
the foreground; here the same classes run from PySpark's own launcher
(``$SPARK_HOME/bin/spark-class`` inside the pyspark package), bound to
127.0.0.1, each with its log file. A ``spark-defaults.conf`` in the
cluster's configuration directory names the executors' interpreter, as the
image's template does: on the AMI's workers it holds the locked
dependencies and not the job's package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import ExitCode, TablecastError
from app.local.processes import LOOPBACK, free_port, poll_until, start_logged, stop_group


class ClusterError(TablecastError):
    """The local Spark cluster did not come up."""

    exit_code = ExitCode.CHECK_FAILED


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (bin/, jars/), found without
    importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ClusterError("no pyspark in this Python: run `make setup`")
    return Path(spec.origin).parent


@dataclass(frozen=True)
class MasterStatus:
    status: str  # ALIVE once the master leads
    alive_workers: int
    active_apps: tuple[str, ...]
    completed_apps: tuple[str, ...]


@dataclass
class StandaloneCluster:
    """A running master and worker, and how to reach them."""

    root: Path  # configuration, work and log directories
    master_port: int
    master_ui_port: int
    worker_ui_port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"spark-{name}.log"

    def env(self) -> dict[str, str]:
        """The environment of a spark-submit against this cluster (as on the driver node)."""
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": LOOPBACK,
        }

    def start_master(self) -> None:
        self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_ui_port),
            ],
        )

    def start_worker(self, cores: int = 2, memory: str = "2g") -> None:
        work = self.root / "work"
        work.mkdir(parents=True, exist_ok=True)
        self._start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                LOOPBACK,
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                str(self.worker_ui_port),
                "--work-dir",
                str(work),
                self.master_url,
            ],
        )

    def _start(self, name: str, arguments: list[str]) -> None:
        # The JVM and its children (the executors): one group to stop.
        argv = [str(spark_home() / "bin" / "spark-class"), *arguments]
        self.processes[name] = start_logged(argv, self.log(name), env=self.env())

    def stop(self, name: str) -> None:
        """Stop one service and every process it started (executors included)."""
        process = self.processes.pop(name, None)
        if process is not None:
            stop_group(process, timeout_s=15)

    def stop_all(self) -> None:
        for name in ("worker", "master"):
            self.stop(name)

    def status(self) -> MasterStatus:
        """The master's own view (its web UI's JSON): status, workers, applications."""
        return master_status(self.master_ui_port)

    def wait_until_ready(self, workers: int = 1, timeout_s: float = 90.0) -> None:
        """Until the master is alive with ``workers`` alive workers registered."""

        def exited() -> bool:
            return any(process.poll() is not None for process in self.processes.values())

        if poll_until(
            lambda: master_ready(self.master_ui_port, workers), timeout_s=timeout_s, gave_up=exited
        ):
            return
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise ClusterError(
                    f"the Spark {name} exited with {process.returncode}; see {self.log(name)}"
                )
        raise ClusterError(
            f"the Spark master at {self.master_url} had no {workers} worker(s) alive "
            f"within {timeout_s:.0f} s; see {self.log('master')} and {self.log('worker')}"
        )


def master_status(ui_port: int) -> MasterStatus:
    """A master's own view (its web UI's JSON on ``ui_port``): status, workers, applications."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as response:
        doc: dict[str, Any] = json.load(response)
    return MasterStatus(
        status=str(doc.get("status")),
        alive_workers=sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE"),
        active_apps=tuple(str(a["id"]) for a in doc.get("activeapps", [])),
        completed_apps=tuple(str(a["id"]) for a in doc.get("completedapps", [])),
    )


def master_ready(ui_port: int, workers: int = 1) -> bool:
    """Whether the master on ``ui_port`` leads with ``workers`` alive workers registered."""
    try:
        status = master_status(ui_port)
    except (OSError, ValueError):  # not up yet; while starting, the UI may answer a page, not JSON
        return False
    return status.status == "ALIVE" and status.alive_workers >= workers


def start_cluster(
    root: Path, executor_python: str, driver_python: str, cores: int = 2, memory: str = "2g"
) -> StandaloneCluster:
    """Start a master and one worker under ``root``; wait until the worker registered."""
    cluster = StandaloneCluster(root, free_port(), free_port(), free_port())
    cluster.conf_dir.mkdir(parents=True, exist_ok=True)
    (cluster.conf_dir / "spark-defaults.conf").write_text(
        "# As the image's spark-defaults.conf.tmpl: the interpreters of executors and driver.\n"
        f"spark.master                  {cluster.master_url}\n"
        f"spark.pyspark.python          {executor_python}\n"
        f"spark.pyspark.driver.python   {driver_python}\n"
        f"spark.local.dir               {root / 'local'}\n"
        "spark.ui.showConsoleProgress  false\n",
        encoding="utf-8",
    )
    try:
        cluster.start_master()
        cluster.start_worker(cores, memory)
        cluster.wait_until_ready()
    except BaseException:
        cluster.stop_all()
        raise
    return cluster
