"""``make pipeline-demo``: bring the pipeline up, feed it, check it, tear it down.

1. Everything comes up (:class:`app.local.pipeline.LocalPipeline`).
2. The load generator publishes capture sessions, with periodic resync
   snapshots, to the topics.
3. Until the job's output (its ledger) and the archiver's raw archive both
   reach every partition's end offset, progress is printed.
4. ``tablecast verify`` compares the output in S3 with what the archive in
   S3 implies; ``tablecast-ops status`` reads the environment back.
5. A summary, then everything stops. Exit 0, or non-zero with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app import handoff
from app.contract.offsets import Offsets
from app.local.pipeline import ENVIRONMENT, PARTITIONS, TOPICS, LocalPipeline, Paths, PipelineError
from app.ops import produce
from app.sources.kafka_client import KafkaEndpoint
from app.tools.generate import CaptureSpec

SESSIONS = 24
UPDATES = 100
RESYNC_EVERY = 25
CATCH_UP_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Positions:
    """How far Kafka, the job and the archiver are, per topic-partition."""

    kafka: Offsets
    output: Offsets
    archive: Offsets

    @property
    def caught_up(self) -> bool:
        return bool(self.kafka) and all(
            self.output.get(tp, 0) == end and self.archive.get(tp, 0) == end
            for tp, end in self.kafka.items()
        )

    def line(self) -> str:
        total = sum(self.kafka.values())
        return (f"job at {sum(self.output.values()):,}, archive at "
                f"{sum(self.archive.values()):,} of {total:,} offsets")  # fmt: skip


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
    """The load generator: sessions with resync snapshots over the pipeline's topics.

    ``progress`` holds the stream while it runs (see :func:`app.ops.produce.publish`).
    """
    assert pipeline.kafka is not None
    spec = produce.LoadSpec(
        capture=CaptureSpec(
            topics=len(TOPICS), partitions=PARTITIONS, sessions=sessions, updates=updates,
            resync_every=RESYNC_EVERY, prefix="sensor-", seed=seed,
            start_ms=int(time.time() * 1000),
        ),
        run_id=run_id or datetime.now(UTC).strftime("%H%M%S%f"),
        rate=rate,
        # tansu answers ListOffsets with the last batch's first offset + 1.
        one_message_per_batch=True,
    )  # fmt: skip
    return produce.publish(KafkaEndpoint(pipeline.kafka.address), spec, progress=progress,
                           progress_every=progress_every)  # fmt: skip


def positions(pipeline: LocalPipeline) -> Positions:
    from app.sink.ledger import Ledger
    from app.sources import archive
    from app.sources.kafka import KafkaBackend
    from app.storage import resolve

    assert pipeline.kafka is not None
    pattern = pipeline.values[handoff.TOPIC_PATTERN]
    bounds = KafkaBackend(KafkaEndpoint(pipeline.kafka.address), pattern).bounds()
    head = Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).head()
    index = archive.scan(resolve(pipeline.values[handoff.ARCHIVE_URI]), pattern)
    return Positions(
        {tp: b.latest for tp, b in bounds.items()},
        {} if head is None else dict(head.end),
        {tp: index.latest(tp) for tp in index.files},
    )


def wait_until_caught_up(
    pipeline: LocalPipeline, timeout_s: float = CATCH_UP_TIMEOUT_S
) -> Positions:
    """Until the job and the archiver reach every partition's end; progress on the way."""
    deadline = time.monotonic() + timeout_s
    last_line = ""
    while True:
        found = positions(pipeline)
        if found.caught_up:
            return found
        line = found.line()
        if line != last_line:
            pipeline.progress(f"      waiting: {line}")
            last_line = line
        if pipeline.supervisor is not None:
            pipeline.supervisor.raise_if_failing()
        if time.monotonic() > deadline:
            raise PipelineError(
                f"not caught up after {timeout_s:.0f} s ({line}); see {pipeline.paths.logs}"
            )
        time.sleep(2)


def verify(pipeline: LocalPipeline) -> tuple[bool, str]:
    """``tablecast verify`` on the archive and the output in S3."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "verify", "--archive", pipeline.values[handoff.ARCHIVE_URI],
         "--output", pipeline.values[handoff.OUTPUT_URI]],
        env=pipeline.service_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def demo(root: Path) -> int:
    pipeline = LocalPipeline(Paths(root.resolve()), progress=lambda line: print(line, flush=True))
    started = time.monotonic()
    pipeline.start()
    os.environ.update(pipeline.aws_env())  # this process reads S3 (moto) too
    try:
        print("[demo] publishing capture sessions ...", flush=True)
        report = publish(pipeline)
        for line in report.lines():
            print(f"      {line}")
        print("[demo] waiting until the job and the archiver have caught up ...", flush=True)
        caught = wait_until_caught_up(pipeline)
        print("[demo] tablecast verify ...", flush=True)
        ok, verified = verify(pipeline)
        status = pipeline.ops(["status", "--environment", ENVIRONMENT], check=False)
        summary(pipeline, caught, verified, status, time.monotonic() - started)
        if not ok:
            print("pipeline demo: the output is NOT what the archive implies (see above)",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    finally:
        print("[demo] stopping everything ...", flush=True)
        pipeline.stop()


def summary(pipeline: LocalPipeline, caught: Positions, verified: str, status: str,
            elapsed_s: float) -> None:  # fmt: skip
    from app.sink import ledger as ledger_mod
    from app.sink.ledger import Ledger
    from app.storage import resolve

    entries = Ledger(resolve(pipeline.values[handoff.OUTPUT_URI])).entries()
    batches = [e for e in entries if e.kind == ledger_mod.BATCH]
    rows = sum(e.rows for e in batches)
    files = sum(len(e.files) for e in batches)
    print("\n=== pipeline demo summary")
    print(f"messages:  {sum(caught.kafka.values()):,} in {len(caught.kafka)} topic-partitions "
          f"({len(TOPICS)} topics)")  # fmt: skip
    print(f"output:    {rows:,} rows in {files} files from {len(batches)} micro-batch(es), "
          f"{pipeline.values[handoff.OUTPUT_URI]}")  # fmt: skip
    print(f"archive:   {pipeline.values[handoff.ARCHIVE_URI]}, caught up with Kafka")
    print("lag:       0 (every partition's end offset is in the output's ledger)")
    print("verify:    " + verified.splitlines()[-1] if verified else "verify: no output")
    print("tablecast-ops status:")
    for line in status.strip().splitlines():
        print(f"  {line}")
    print(f"logs:      {pipeline.paths.logs} (one file per process)")
    print(f"took:      {elapsed_s:.0f} s")
