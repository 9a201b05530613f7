"""The pipeline on one machine, hit where it hurts: the worker, then the job, killed mid-stream.

One pipeline for the module (:mod:`app.local.pipeline`: tansu, moto, Spark's
master and worker, the job and the archiver from the image's units). Each
test publishes one stream of capture sessions and holds it twice, so that
the kill lands mid-stream and mid-batch however fast or loaded the machine
is (nothing is timed; the stream waits for the job):

1. after its first part, until the job has published a batch of it (in the
   module's first test this waits out the job's cold start);
2. further on, with every session open, until the job runs a newer
   micro-batch (planned in the checkpoint, not committed) and one of its
   tasks has saved its partition's state. Then the service's whole process
   group is killed with SIGKILL and the rest of the stream, every session's
   end included, follows. A batch that is committed before it is seen at
   work is let go: one more message, and the next batch is watched.

The supervisor starts the service again as systemd would (the test waits
for that), the job and the archiver catch up, and ``tablecast verify``
checks the output in S3: no row missing, none twice. The module's pipeline
stands in for the test pipeline ``resync-exp`` of ``infra/settings/testing.toml``
(``make pipeline-demo`` runs the sandbox's, untroubled), and its last test runs
``tablecast-ops test-run -e resync-exp`` against it, end to end.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import handoff
from app.engine.store import STATE_DIR
from app.local.exercise import demo_load
from app.local.pipeline import LocalPipeline, Paths
from app.ops import test_run
from app.ops.cli import ONE_MESSAGE_PER_BATCH_VARIABLE
from app.sink.ledger import Ledger
from app.storage import resolve
from infra.config.stand_in import stand_in
from tests.fixture_processes import owned_by_fixture

# 8 sessions reach all six topic-partitions: 336 messages, and every session
# is still open at the kill (its snapshot, resync and end are on either side).
SESSIONS = 8
UPDATES = 40
FIRST_PART = 60  # messages out when the stream waits for the job's first batch of it
KILL_AT = 160  # messages out when the stream waits for a batch of them to kill
STEP_TIMEOUT_S = 300.0  # how long the job may take to get to a hold before the test gives up
TEST_PIPELINE = "resync-exp"  # declared in infra/settings/testing.toml


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPipeline]:
    # The executors' venv is built once per lock (make pipeline-demo's); the rest is ours.
    paths = Paths(tmp_path_factory.mktemp("pipeline"), Path(".pipeline/image-venv").resolve())
    started = LocalPipeline(paths, stand_in(TEST_PIPELINE), progress=lambda line: None)
    saved = dict(os.environ)
    with _spark_ports_held():
        started.start()
        os.environ.update(started.aws_env())
        try:
            yield started
        finally:
            started.stop()
            os.environ.clear()
            os.environ.update(saved)


@contextmanager
def _spark_ports_held() -> Iterator[None]:
    """The image's fixed Spark ports to this module alone: `make test` runs the pipeline
    demo beside the suite, holding the lock the Makefile names while it has them."""
    name = os.environ.get("TABLECAST_PIPELINE_LOCK")
    if name is None:  # not under make: nothing else of ours takes the ports meanwhile
        yield
        return
    with open(name, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def batches(pipeline: LocalPipeline) -> int:
    return len(Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).numbers())


@dataclass(frozen=True)
class Checkpoint:
    """What the job's checkpoint (on local disk here) says about its micro-batches."""

    path: Path

    def _batches(self, log: str) -> set[int]:
        folder = self.path / log
        # Spark writes each entry to a hidden temporary file, then renames it.
        return {int(n) for n in os.listdir(folder) if n.isdigit()} if folder.is_dir() else set()

    def planned(self) -> int:
        """The last batch planned (``offsets/N``), or -1."""
        return max(self._batches("offsets"), default=-1)

    def committed(self, batch: int) -> bool:
        return batch in self._batches("commits")

    def running(self) -> int:
        """The batch planned and not committed yet, or -1."""
        batch = self.planned()
        return -1 if batch < 0 or self.committed(batch) else batch

    def states(self) -> set[Path]:
        """Every partition's state versions: a task saves one at the end of its range."""
        return set((self.path / STATE_DIR).glob("*/*/*.state"))


def wait_for(
    pipeline: LocalPipeline, condition: Callable[[], bool], what: str, poll_s: float
) -> None:
    assert pipeline.supervisor is not None
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not condition():
        pipeline.supervisor.raise_if_failing()
        if time.monotonic() > deadline:
            pytest.fail(
                f"gave up after {STEP_TIMEOUT_S:.0f} s waiting for {what}; "
                f"see {pipeline.paths.logs}"
            )
        time.sleep(poll_s)


def kill_mid_stream(pipeline: LocalPipeline, service: str, seed: int) -> None:
    supervisor = pipeline.supervisor
    assert supervisor is not None
    starts = supervisor.services[service].starts
    published = batches(pipeline)
    checkpoint = Checkpoint(pipeline.paths.checkpoint)
    watched: list[int] = []  # batches the kill is not to land in: planned before, or let go
    killed_at: list[int] = []

    def hold(sent: int, _total: int) -> None:
        # Runs on the producing thread after each message: the stream waits here.
        out = sent + 1
        if out == FIRST_PART:
            wait_for(
                pipeline,
                lambda: batches(pipeline) > published,
                "the job to publish a batch of the stream",
                poll_s=0.5,
            )
            watched.append(checkpoint.planned())
        elif out >= KILL_AT and not killed_at:
            # A batch planned since reads messages the job has not published.
            wait_for(
                pipeline,
                lambda: checkpoint.running() > watched[-1],
                "the job to run a batch of the stream's second part",
                poll_s=0.05,
            )
            batch = checkpoint.running()
            if batch >= 0:
                before = checkpoint.states()

                def at_work() -> bool:
                    # Not just planned: once a task has saved its partition's state,
                    # the kill cuts into the batch's work or into its commit.
                    return bool(checkpoint.states() - before) or checkpoint.committed(batch)

                wait_for(pipeline, at_work, "the batch's tasks", poll_s=0.02)
            if batch < 0 or checkpoint.committed(batch):
                # It ran through unseen: let one more message out and watch the next.
                watched.append(checkpoint.planned())
                return
            supervisor.kill(service, signal.SIGKILL)
            killed_at.append(out)

    load = demo_load(sessions=SESSIONS, updates=UPDATES, seed=seed)
    report = test_run.publish(pipeline.target(), load, progress=hold, progress_every=1)
    assert killed_at, "no batch of the stream's second part was seen at work"
    assert report.messages > killed_at[0]  # the kill landed mid-stream
    # The restart comes RestartSec after the kill: waited for, not asserted at
    # a moment that could precede it.
    wait_for(
        pipeline,
        lambda: supervisor.services[service].starts > starts,
        f"the supervisor to start {service} again",
        poll_s=0.5,
    )
    restarted = supervisor.pid(service)
    assert restarted is not None
    owned_by_fixture(restarted)  # the module's pipeline stops it, as it stopped the first
    test_run.wait_until_caught_up(
        pipeline.target(),
        timeout_s=420,
        progress=pipeline.progress,
        check=pipeline.raise_if_failing,
        where=str(pipeline.paths.logs),
    )
    ok, verified = test_run.verify(pipeline.target())
    assert ok, verified
    assert "missing rows:               0" in verified, verified
    assert "duplicate rows:             0" in verified, verified


def test_the_worker_killed_mid_stream_is_restarted_and_the_output_stays_exact(
    pipeline: LocalPipeline,
) -> None:
    kill_mid_stream(pipeline, "spark-worker", seed=31)


def test_the_job_killed_mid_stream_is_restarted_and_the_output_stays_exact(
    pipeline: LocalPipeline,
) -> None:
    kill_mid_stream(pipeline, "tablecast-job", seed=32)


def test_test_run_deploys_publishes_waits_until_caught_up_and_verifies_exactly(
    pipeline: LocalPipeline,
) -> None:
    """``tablecast-ops test-run`` as an operator runs it, against the pipeline standing in
    for the test pipeline: the deploy's Run Command restarts the job (run-job installs the
    version again), then the loop of ``make pipeline-demo``."""
    assert pipeline.agent is not None and pipeline.supervisor is not None
    (wheel,) = (pipeline.paths.root / "dist").glob("tablecast-*.whl")
    before = len(Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).entries())
    env = {**pipeline.service_env(), ONE_MESSAGE_PER_BATCH_VARIABLE: "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.ops",
            "test-run",
            "-e",
            TEST_PIPELINE,
            "--wheel",
            str(wheel),
            "--topic-count",
            "2",
            "--partitions",
            "2",
            "--sessions",
            "6",
            "--updates",
            "20",
            "--resync-every",
            "8",
            "--heartbeat-timeout",
            "5 minutes",
            "--poll",
            "2s",
            "--timeout",
            "7 minutes",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    for service in ("tablecast-job", "tablecast-archiver"):
        restarted = pipeline.supervisor.pid(service)
        if restarted is not None:
            owned_by_fixture(restarted)  # the module's pipeline stops it
    assert done.returncode == 0, done.stdout + done.stderr
    report = dict(line.split(":", 1) for line in done.stdout.splitlines()[-9:] if ":" in line)
    assert report["environment"].strip() == TEST_PIPELINE
    assert report["result"].strip() == "EXACT"
    assert report["verify"].strip().startswith("OK"), done.stdout
    assert report["deployed"].strip().startswith("tablecast ")
    assert "heartbeat at" in report["deployed"]
    # The deploy's Run Command restarted the job and the archiver here, as on a node.
    assert pipeline.agent.restarted == ["tablecast-job", "tablecast-archiver"]
    assert "of 6 sessions" in report["load"]
    assert len(Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).entries()) > before
