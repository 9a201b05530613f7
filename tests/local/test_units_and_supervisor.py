"""The image's units read for one machine, and the supervisor that runs them as systemd would."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.errors import ConfigurationError
from app.local.image import StagedImage, stage
from app.local.supervisor import SupervisedServiceError, Supervisor
from app.local.units import ServiceSpec, read_unit, render

NODE = {"TABLECAST_DRIVER_HOST": "127.0.0.1", "SPARK_LOCAL_IP": "127.0.0.1", "TABLECAST_ENV": "t"}
PATHS = {
    "/opt/spark": "/x/spark",
    "/opt/tablecast/bin": "/x/bin",
    "/data": "/x/data",
    "/opt/tablecast/venv": "/x/venv",
}


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> StagedImage:
    return stage(tmp_path_factory.mktemp("image") / "root")


def test_the_images_units_render_with_this_machines_paths(image: StagedImage) -> None:
    units = image.units
    master = render("spark-master", NODE, PATHS, units=units)
    assert master.argv == (
        "/x/spark/bin/spark-class",
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        "7077",
        "--webui-port",
        "8080",
    )
    worker = render("spark-worker", NODE, PATHS, units=units)
    assert worker.argv[-3:] == ("--work-dir", "/x/data/spark/work", "spark://127.0.0.1:7077")
    job = render("tablecast-job", NODE, PATHS, restart_sec_cap=5, units=units)
    assert job.argv == ("/x/bin/run-job",)
    assert (job.restart_on_failure, job.restart_sec) == (True, 5)
    archiver = render("tablecast-archiver", NODE, PATHS, units=units)
    assert archiver.argv[:4] == ("/x/venv/bin/python", "-m", "app.ops", "archive")
    assert "t" in archiver.argv and read_unit("tablecast-archiver", units)["RestartSec"] == "30"
    # It publishes its heartbeat and lag; it restarts a bounded number of times, and never
    # after data loss or beside a second archiver (exit 3).
    assert archiver.argv[-2:] == ("--metrics", "cloudwatch")
    assert (archiver.start_limit_burst, archiver.start_limit_interval_s) == (10, 1800.0)
    assert archiver.restart_prevent_codes == {3}
    # The job's service retries until its first deploy: no limit.
    assert (job.start_limit_burst, job.restart_prevent_codes) == (0, frozenset())


def test_a_unit_needing_a_variable_this_machine_lacks_is_refused(image: StagedImage) -> None:
    with pytest.raises(ConfigurationError, match=r"spark-worker\.service needs SPARK_LOCAL_IP"):
        render("spark-worker", {"TABLECAST_DRIVER_HOST": "127.0.0.1"}, PATHS, units=image.units)
    with pytest.raises(ConfigurationError, match="no unit"):
        read_unit("no-such-unit", image.units)


def spec(name: str, script: str, restart: bool = True) -> ServiceSpec:
    return ServiceSpec(
        name, (sys.executable, "-c", script), restart, restart_sec=0.3, stop_timeout_s=2
    )


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_failed_or_killed_service_is_started_again_a_clean_exit_is_not(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs", poll_s=0.05)
    try:
        crashing = supervisor.start(spec("crashing", "import sys; print('up'); sys.exit(3)"), {})
        done = supervisor.start(spec("done", "print('once')"), {})
        steady = supervisor.start(spec("steady", "import time; time.sleep(60)"), {})
        wait_for(lambda: crashing.starts >= 3)
        assert crashing.failures[:2] == [3, 3]
        wait_for(lambda: done.process is None)
        time.sleep(0.5)
        assert (done.starts, done.failures) == (1, [])
        first = supervisor.pid("steady")
        supervisor.kill("steady", signal.SIGKILL)
        wait_for(lambda: steady.starts == 2 and supervisor.running("steady"))
        assert supervisor.pid("steady") != first and steady.failures == [-9]
        assert (tmp_path / "logs" / "crashing.log").read_text().count("up") >= 3
    finally:
        supervisor.stop_all()
    assert not supervisor.running("steady")


def test_a_service_past_its_start_limit_or_with_a_preventing_code_stays_failed(
    tmp_path: Path,
) -> None:
    supervisor = Supervisor(tmp_path / "logs", poll_s=0.05)
    limited = ServiceSpec(
        "limited",
        (sys.executable, "-c", "import sys; sys.exit(1)"),
        True,
        restart_sec=0.05,
        stop_timeout_s=2,
        start_limit_burst=3,
        start_limit_interval_s=60,
    )
    lost = ServiceSpec(
        "lost",
        (sys.executable, "-c", "import sys; sys.exit(3)"),
        True,
        restart_sec=0.05,
        stop_timeout_s=2,
        restart_prevent_codes=frozenset({3}),
    )
    try:
        first = supervisor.start(limited, {})
        second = supervisor.start(lost, {})
        wait_for(lambda: first.gave_up and second.gave_up)
        time.sleep(0.5)
        assert (first.starts, first.failures) == (3, [1, 1, 1])
        assert (second.starts, second.failures) == (1, [3])
        with pytest.raises(SupervisedServiceError, match="limited failed 3 times"):
            supervisor.raise_if_failing()
    finally:
        supervisor.stop_all()
