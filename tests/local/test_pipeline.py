"""The pipeline on one machine, hit where it hurts: the worker, then the job, killed mid-stream.

One pipeline for the module (``app.local.pipeline``: tansu, moto, Spark's
master and worker, the job and the archiver from the image's units). Each
test publishes one stream of capture sessions and holds it twice, so that
the kill lands mid-stream however fast or loaded the machine is:

1. after its first part, until the job has published a batch of it (in the
   module's first test this waits out the job's cold start);
2. further on, with every session still open, until the job is running a
   newer micro-batch (planned in the checkpoint, not committed): then a
   service's whole process group is killed with SIGKILL and the rest of the
   stream, every session's end included, follows.

The supervisor starts the service again as systemd would; the test waits
until the job and the archiver have caught up and checks the output in S3
with ``tablecast verify``: no row missing, none twice. ``make
pipeline-demo`` covers the untroubled run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app import handoff
from app.local.demo import publish, verify, wait_until_caught_up
from app.local.pipeline import LocalPipeline, Paths
from app.sink.ledger import Ledger
from app.storage import resolve

# 8 sessions reach all six topic-partitions: 336 messages, and every session
# is still open at the kill (its snapshot, resync and end are on either side).
SESSIONS = 8
UPDATES = 40
FIRST_PART = 60  # messages out when the stream waits for the job's first batch of it
KILL_AT = 160  # messages out when the service is killed
STEP_TIMEOUT_S = 300.0  # how long the job may take to get to a hold before the test gives up


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPipeline]:
    # The executors' venv is built once per lock (make pipeline-demo's); the rest is ours.
    paths = Paths(tmp_path_factory.mktemp("pipeline"), Path(".pipeline/image-venv").resolve())
    started = LocalPipeline(paths, progress=lambda line: None)
    saved = dict(os.environ)
    started.start()
    os.environ.update(started.aws_env())
    try:
        yield started
    finally:
        started.stop()
        os.environ.clear()
        os.environ.update(saved)


def batches(pipeline: LocalPipeline) -> int:
    return len(Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).numbers())


def running_batch(checkpoint: Path) -> int | None:
    """The micro-batch Spark has planned (``offsets/N``) and not yet committed (``commits/N``)."""

    def numbers(log: str) -> set[int]:
        folder = checkpoint / log
        # Spark writes each entry to a hidden temporary file and renames it.
        return {int(n) for n in os.listdir(folder) if n.isdigit()} if folder.is_dir() else set()

    planned = numbers("offsets")
    if not planned or max(planned) in numbers("commits"):
        return None
    return max(planned)


def last_planned(checkpoint: Path) -> int:
    folder = checkpoint / "offsets"
    return max((int(n) for n in os.listdir(folder) if n.isdigit()), default=-1)


def wait_for(pipeline: LocalPipeline, condition: Callable[[], bool], what: str,
             poll_s: float) -> None:  # fmt: skip
    assert pipeline.supervisor is not None
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not condition():
        pipeline.supervisor.raise_if_failing()
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {STEP_TIMEOUT_S:.0f} s waiting for {what}; "
                        f"see {pipeline.paths.logs}")  # fmt: skip
        time.sleep(poll_s)


def kill_mid_stream(pipeline: LocalPipeline, service: str, seed: int) -> None:
    supervisor = pipeline.supervisor
    assert supervisor is not None
    starts = supervisor.services[service].starts
    published = batches(pipeline)
    checkpoint = pipeline.paths.checkpoint
    seen: list[int] = []  # the last batch planned when the job had published part of the stream
    killed_at: list[int] = []

    def hold(sent: int, _total: int) -> None:
        # Runs on the producing thread after each message: the stream waits here.
        if sent + 1 == FIRST_PART:
            wait_for(pipeline, lambda: batches(pipeline) > published,
                     "the job to publish a batch of the stream", poll_s=0.5)  # fmt: skip
            seen.append(last_planned(checkpoint))
        elif sent + 1 == KILL_AT:
            # A batch planned after that one holds messages the job has not
            # published; the checkpoint is local, so it can be watched closely.
            wait_for(pipeline, lambda: (running_batch(checkpoint) or -1) > seen[0],
                     "the job to run a batch of the stream's second part", poll_s=0.05)  # fmt: skip
            supervisor.kill(service, signal.SIGKILL)
            killed_at.append(sent + 1)

    report = publish(pipeline, sessions=SESSIONS, updates=UPDATES, seed=seed, progress=hold,
                     progress_every=1)  # fmt: skip
    assert killed_at == [KILL_AT] and report.messages > KILL_AT  # the kill landed mid-stream
    # The restart comes RestartSec after the kill: waited for, not asserted at
    # a moment that could precede it.
    wait_for(pipeline, lambda: supervisor.services[service].starts > starts,
             f"the supervisor to start {service} again", poll_s=0.5)  # fmt: skip
    wait_until_caught_up(pipeline, timeout_s=420)
    ok, verified = verify(pipeline)
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
