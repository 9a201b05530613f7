"""The pipeline on one machine exercised: a load published, caught up, verified.

The pieces of ``tablecast-ops test-run`` (:mod:`app.ops.test_run`) pointed
at the pipeline on this machine (the tests drive them one by one), and
``make pipeline-demo``, the whole loop: bring the pipeline up, feed it,
check it, tear it down.

1. Everything comes up (:class:`app.local.pipeline.LocalPipeline`), the
   working tree's wheel deployed as the image's units run it.
2. The test-run loop of ``tablecast-ops test-run`` (:func:`app.ops.test_run.run`):
   capture sessions with periodic resync snapshots published to the topics,
   a wait until the job's output (its ledger) and the archiver's raw archive
   both reach every partition's end offset, ``tablecast verify`` of the
   output in S3 against what the archive in S3 implies, a report.
3. ``tablecast-ops status`` reads the environment back; everything stops.
   Exit 0, or non-zero with the reason.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from app import handoff
from app.local.pipeline import PARTITIONS, TOPICS, LocalPipeline, Paths, say
from app.local.stand_in import StandIn
from app.ops import produce, test_run
from app.ops.environment import Handoff
from app.ops.test_run import Positions
from app.sources.kafka_client import KafkaEndpoint

SESSIONS = 24
UPDATES = 100
RESYNC_EVERY = 25
CATCH_UP_TIMEOUT_S = test_run.CATCH_UP_TIMEOUT_S

__all__ = ["Positions", "demo", "local_target", "publish", "verify", "wait_until_caught_up"]


def local_target(pipeline: LocalPipeline) -> test_run.Target:
    """The pipeline on this machine as a test run sees it: its hand-off, tansu, moto."""
    assert pipeline.kafka is not None
    found = Handoff(pipeline.environment, pipeline.values)
    return test_run.Target.of(found, KafkaEndpoint(pipeline.kafka.address), pipeline.service_env())


def demo_load(
    *,
    sessions: int = SESSIONS,
    updates: int = UPDATES,
    seed: int = 7,
    run_id: str = "",
    rate: float = 0.0,
) -> test_run.Load:
    """Sessions with resync snapshots over the pipeline's topics."""
    return test_run.Load(
        topics=len(TOPICS),
        prefix="sensor-",
        partitions=PARTITIONS,
        sessions=sessions,
        updates=updates,
        resync_every=RESYNC_EVERY,
        rate=rate,
        seed=seed,
        run_id=run_id,
        # tansu answers ListOffsets with the last batch's first offset + 1.
        one_message_per_batch=True,
    )


def publish(
    pipeline: LocalPipeline,
    *,
    sessions: int = SESSIONS,
    updates: int = UPDATES,
    seed: int = 7,
    run_id: str = "",
    rate: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    progress_every: int = 1000,
) -> produce.ProduceReport:
    """The load generator (``progress`` holds the stream while it runs)."""
    load = demo_load(sessions=sessions, updates=updates, seed=seed, run_id=run_id, rate=rate)
    return test_run.publish(
        local_target(pipeline), load, progress=progress, progress_every=progress_every
    )


def wait_until_caught_up(
    pipeline: LocalPipeline, timeout_s: float = CATCH_UP_TIMEOUT_S
) -> Positions:
    """Until the job and the archiver reach every partition's end; progress on the way."""
    return test_run.wait_until_caught_up(
        local_target(pipeline),
        timeout_s=timeout_s,
        progress=pipeline.progress,
        check=pipeline.raise_if_failing,
        where=str(pipeline.paths.logs),
    )


def verify(pipeline: LocalPipeline) -> tuple[bool, str]:
    """``tablecast verify`` on the archive and the output in S3."""
    return test_run.verify(local_target(pipeline))


def demo(root: Path, stand_in: StandIn) -> int:
    """The test-run loop (:func:`app.ops.test_run.run`) on the pipeline it brings up."""
    pipeline = LocalPipeline(Paths(root.resolve()), stand_in, progress=say)
    started = time.monotonic()
    pipeline.start()
    os.environ.update(pipeline.aws_env())  # this process reads S3 (moto) too
    try:
        report = test_run.run(
            local_target(pipeline),
            demo_load(),
            # The pipeline deployed the working tree's wheel as it came up.
            deploy=lambda: (
                f"tablecast {pipeline.values[handoff.JOB_VERSION]} "
                "(the working tree's wheel, deployed as the pipeline came up)"
            ),
            progress=pipeline.progress,
            check=pipeline.raise_if_failing,
            where=str(pipeline.paths.logs),
        )
        status = pipeline.ops(["status", "--environment", pipeline.environment], check=False)
        print("\n=== pipeline demo summary")
        for line in report.lines():
            print(line)
        print("tablecast-ops status:")
        for line in status.strip().splitlines():
            print(f"  {line}")
        print(f"logs:        {pipeline.paths.logs} (one file per process)")
        print(f"in all:      {time.monotonic() - started:.0f} s")
        if not report.exact:
            print(
                "pipeline demo: the output is NOT what the archive implies (see above)",
                file=sys.stderr,
            )
            return 1
        return 0
    finally:
        print("[demo] stopping everything ...", flush=True)
        pipeline.stop()
