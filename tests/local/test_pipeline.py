"""The pipeline on one machine, hit where it hurts: the worker, then the job, killed mid-stream.

One pipeline for the module (``app.local.pipeline``: tansu, moto, Spark's
master and worker, the job and the archiver from the image's units). Each
test publishes sessions at a bounded rate, kills a service's whole process
group with SIGKILL once the job has published part of them, lets the
supervisor start it again as systemd would, waits until the job and the
archiver have caught up, and checks the output in S3 with ``tablecast
verify``. ``make pipeline-demo`` covers the untroubled run.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import handoff
from app.local.demo import positions, publish, verify, wait_until_caught_up
from app.local.pipeline import LocalPipeline, Paths
from app.sink.ledger import Ledger
from app.storage import resolve

RATE = 150.0  # messages per second: the stream lasts about 15 s


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


def publish_slowly(pipeline: LocalPipeline, seed: int) -> threading.Thread:
    def run() -> None:
        publish(pipeline, sessions=12, updates=180, seed=seed, rate=RATE)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def kill_mid_stream(pipeline: LocalPipeline, service: str, seed: int) -> None:
    assert pipeline.supervisor is not None
    before = batches(pipeline)
    restarts = pipeline.supervisor.services[service].starts
    producer = publish_slowly(pipeline, seed)
    deadline = time.monotonic() + 120
    while batches(pipeline) <= before:  # the job has published part of the stream
        assert time.monotonic() < deadline, "no batch published"
        time.sleep(0.5)
    assert not positions(pipeline).caught_up
    pipeline.supervisor.kill(service, signal.SIGKILL)
    producer.join(timeout=300)
    wait_until_caught_up(pipeline, timeout_s=420)
    assert pipeline.supervisor.services[service].starts > restarts  # started again
    ok, report = verify(pipeline)
    assert ok, report
    assert "missing rows:               0" in report and "duplicate rows:             0" in report


def test_the_worker_killed_mid_stream_is_restarted_and_the_output_stays_exact(
    pipeline: LocalPipeline,
) -> None:
    kill_mid_stream(pipeline, "spark-worker", seed=31)


def test_the_job_killed_mid_stream_is_restarted_and_the_output_stays_exact(
    pipeline: LocalPipeline,
) -> None:
    kill_mid_stream(pipeline, "tablecast-job", seed=32)
