"""The pipeline on one machine exercised: a load published, caught up, verified.

``make pipeline-demo``: the loop of ``tablecast-ops test-run``
(:mod:`app.ops.test_run`) pointed at the pipeline on this machine
(:meth:`app.local.pipeline.LocalPipeline.target`; the tests drive its pieces
one by one): bring the pipeline up, feed it, check it, tear it down.

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

import dataclasses
import os
import sys
import time
from pathlib import Path

from app import handoff
from app.local.pipeline import PARTITIONS, TOPICS, LocalPipeline, Paths, say
from app.local.stand_in import StandIn
from app.ops import test_run

SESSIONS = 24
UPDATES = 100
RESYNC_EVERY = 25

__all__ = ["demo", "demo_load"]


def demo_load(*, sessions: int = SESSIONS, updates: int = UPDATES, seed: int = 7) -> test_run.Load:
    """Sessions with resync snapshots over the pipeline's topics."""
    return test_run.Load(
        capture=dataclasses.replace(
            test_run.LOAD,
            topics=len(TOPICS),
            prefix="sensor-",
            partitions=PARTITIONS,
            sessions=sessions,
            updates=updates,
            resync_every=RESYNC_EVERY,
            seed=seed,
        ),
        # tansu answers ListOffsets with the last batch's first offset + 1.
        one_message_per_batch=True,
    )


def demo(root: Path, stand_in: StandIn) -> int:
    """The test-run loop (:func:`app.ops.test_run.run`) on the pipeline it brings up."""
    pipeline = LocalPipeline(Paths(root.resolve()), stand_in, progress=say)
    started = time.monotonic()
    pipeline.start()
    os.environ.update(pipeline.aws_env())  # this process reads S3 (moto) too
    try:
        report = test_run.run(
            pipeline.target(),
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
