"""One test run: deploy the job, publish a chosen load, wait until caught up, verify, report.

The loop ``tablecast-ops test-run -e NAME`` runs against an environment (a
test pipeline on AWS, or the pipeline on one machine standing in for one),
and ``make pipeline-demo`` runs on one machine (``app/local/exercise.py``):

1. deploy: the caller's step (``tablecast-ops deploy``'s, or the local
   pipeline's own at start-up), which returns what it did;
2. publish: capture sessions in the contract's envelope (:mod:`app.ops.produce`)
   over ``<prefix>0..N-1``, at a chosen rate;
3. wait until the job's output (its ledger) and the archiver's archive both
   reach every partition's end offset in Kafka;
4. ``tablecast verify`` compares the output with what the archive implies:
   exact, or the run fails;
5. a report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from app import handoff
from app.contract.offsets import Offsets
from app.contract.schema import TableSchema, parse_schema
from app.errors import ConfigurationError, ExitCode, TablecastError
from app.ops import produce
from app.ops.environment import Handoff
from app.ops.processor_input import declared_input
from app.ops.processors import KEY, RecordedProcessor
from app.sources.kafka_client import KafkaEndpoint
from app.tools.generate import CaptureSpec

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

CATCH_UP_TIMEOUT_S = 600.0
Progress = Callable[[str], None]


class NotCaughtUpError(TablecastError):
    """The job or the archiver did not reach Kafka's end offsets in time."""

    exit_code = ExitCode.CHECK_FAILED


LOAD = CaptureSpec(topics=3, partitions=2, sessions=24, updates=100, resync_every=25)
"""A test run's capture unless told otherwise: resync snapshots in every session."""


@dataclass(frozen=True, kw_only=True)
class Load:
    """What a test run publishes."""

    capture: CaptureSpec = LOAD
    """The sessions, over topics ``<prefix>0`` .. ``<prefix><topics - 1>``, their rows
    following its schema (a declared job's: its deployed document, or its processor's own
    input); its ``start_ms`` is the publishing's."""
    rate: float = 0.0
    """Messages per second over all topics; 0: as fast as the brokers take them."""
    run_id: str = ""
    """Suffix of every session id; empty: the UTC time, so a run never reuses a session."""
    one_message_per_batch: bool = False
    """A record batch per message, for a broker (tansu) that reports ends by batch."""

    @property
    def topic_names(self) -> list[str]:
        return [f"{self.capture.prefix}{index}" for index in range(self.capture.topics)]


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a test run publishes and what it reads back: the environment's hand-off."""

    environment: str
    endpoint: KafkaEndpoint
    topic_pattern: str
    output_uri: str
    archive_uri: str
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """The environment ``tablecast verify`` runs in (AWS credentials, endpoints)."""
    job: str | None = None
    """A declared job's name: its topics of the archive, which every job's topics share,
    are the ones verified. ``None``: the environment's one job, which reads them all."""

    @classmethod
    def of(
        cls,
        found: Handoff,
        endpoint: KafkaEndpoint,
        env: Mapping[str, str] | None = None,
        job: str | None = None,
        processor: JobCode | None = None,
    ) -> Target:
        """The environment's test run as its hand-off names it (a declared job's:
        ``read_job_handoff``), its brokers at ``endpoint``; ``processor``: the job's, which
        ``tablecast verify`` imports from its wheel (as the executors do)."""
        env = dict(os.environ) if env is None else dict(env)
        if processor is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                [str(processor.wheel), *filter(None, [env.get("PYTHONPATH")])]
            )
        return cls(
            environment=found.environment,
            endpoint=endpoint,
            topic_pattern=found.topic_pattern,
            output_uri=found.s3_uri(handoff.OUTPUT_URI),
            archive_uri=found.archive_uri,
            env=env,
            job=job,
        )


@dataclass(frozen=True)
class JobCode:
    """A declared job's processor as deployed: its class and its wheel, fetched and checked."""

    processor: str
    wheel: Path


def job_processor(s3: S3Client, found: Handoff, job: str, directory: Path) -> JobCode | None:
    """The processor a declared job runs (``found`` is its hand-off), its wheel fetched into
    ``directory`` and refused unless its SHA-256 is the recorded one, as run-job refuses it;
    None for the built-in table rebuild."""
    recorded = RecordedProcessor.of(found.values)
    if recorded.processor == handoff.NO_PROCESSOR:
        return None
    if not KEY.match(recorded.wheel):
        raise ConfigurationError(
            f"job {job} of {found.environment} runs processor {recorded.processor}, whose wheel "
            f"no deploy has shipped (processor-wheel {recorded.wheel}): deploy it first "
            f"(tablecast-ops deploy -e {found.environment} --settings FILE)"
        )
    uri = f"{found.artifacts_uri.rstrip('/')}/{recorded.wheel}"
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    wheel = directory / recorded.wheel.rpartition("/")[2]
    wheel.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    with wheel.open("rb") as stream:
        digest = hashlib.file_digest(stream, "sha256").hexdigest()
    if digest != recorded.wheel_sha256:
        raise ConfigurationError(
            f"{uri}: its SHA-256 is {digest}, not job {job}'s processor-wheel-sha256 "
            f"{recorded.wheel_sha256}: ship the processor again (tablecast-ops deploy)"
        )
    return JobCode(recorded.processor, wheel)


def job_load_schema(
    s3: S3Client, found: Handoff, job: str, processor: JobCode | None
) -> TableSchema:
    """The schema a declared job's messages follow: its processor's own input where it
    declares one, else the job's deployed table schema (:func:`job_schema`)."""
    if processor is not None:
        declared = declared_input(processor.wheel, processor.processor)
        if declared is not None:
            return declared
    if found.value(handoff.SCHEMA_SHA256) == handoff.PROCESSOR_INPUT:
        raise ConfigurationError(
            f"job {job} of {found.environment} has no table schema (schema-sha256 "
            f"processor-input), and "
            + (
                f"its processor {processor.processor} declares no input schema"
                if processor is not None
                else "no processor"
            )
            + f": deploy its schema (tablecast-ops deploy -e {found.environment} --schema "
            f"{job}=FILE)"
        )
    return job_schema(s3, found, job)


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
        return (
            f"job at {sum(self.output.values()):,}, archive at "
            f"{sum(self.archive.values()):,} of {total:,} offsets"
        )


@dataclass(frozen=True, kw_only=True)
class OutputSummary:
    """What the output's ledger says was published."""

    batches: int
    rows: int
    files: int


@dataclass(frozen=True, kw_only=True)
class TestRunReport:
    """Every step's outcome."""

    __test__ = False  # not a pytest class

    environment: str
    deployed: str
    produced: produce.ProduceReport
    caught: Positions
    output: OutputSummary
    verified: str
    exact: bool
    elapsed_s: float

    def lines(self) -> list[str]:
        last = self.verified.splitlines()[-1] if self.verified else "no output"
        return [
            f"environment: {self.environment}",
            f"deployed:    {self.deployed}",
            *(f"load:        {line}" for line in self.produced.lines()[:1]),
            f"messages:    {sum(self.caught.kafka.values()):,} in "
            f"{len(self.caught.kafka)} topic-partitions",
            f"output:      {self.output.rows:,} rows in {self.output.files} files from "
            f"{self.output.batches} micro-batch(es)",
            "lag:         0 (every partition's end offset is in the output's ledger "
            "and the archive)",
            f"verify:      {last}",
            f"result:      {'EXACT' if self.exact else 'NOT EXACT (see verify above)'}",
            f"took:        {self.elapsed_s:.0f} s",
        ]


def job_schema(s3: S3Client, found: Handoff, job: str) -> TableSchema:
    """A declared job's table schema as deployed: ``<artifacts>/schemas/<schema-sha256>.toml``
    (``found`` is the job's hand-off), refused unless its SHA-256 is the recorded one."""
    digest = found.value(handoff.SCHEMA_SHA256)
    if digest == handoff.NO_SCHEMA:
        raise ConfigurationError(
            f"job {job} of {found.environment} has no table schema deployed (schema-sha256 "
            f"none): deploy one first (tablecast-ops deploy -e {found.environment} --schema "
            f"{job}=FILE)"
        )
    bucket, _, prefix = found.artifacts_uri.removeprefix("s3://").partition("/")
    key = f"{prefix}/{handoff.SCHEMAS_FOLDER}/{digest}.toml".lstrip("/")
    uri = f"s3://{bucket}/{key}"
    document = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if hashlib.sha256(document).hexdigest() != digest:
        raise ConfigurationError(
            f"{uri}: its SHA-256 is not job {job}'s schema-sha256 {digest}: deploy the job's "
            "schema again"
        )
    return parse_schema(document, uri)


def publish(
    target: Target,
    load: Load,
    *,
    progress: Callable[[int, int], None] | None = None,
    progress_every: int = 1000,
) -> produce.ProduceReport:
    """The load, as :func:`app.ops.produce.publish` sends it (``progress`` holds the stream)."""
    spec = produce.LoadSpec(
        capture=dataclasses.replace(load.capture, start_ms=int(time.time() * 1000)),
        run_id=load.run_id or datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"),
        rate=load.rate,
        one_message_per_batch=load.one_message_per_batch,
    )
    return produce.publish(target.endpoint, spec, progress=progress, progress_every=progress_every)


def positions(target: Target) -> Positions:
    from app.sink.ledger import Ledger
    from app.sources import archive
    from app.sources.kafka import KafkaBackend
    from app.storage import resolve

    bounds = KafkaBackend(target.endpoint, target.topic_pattern).bounds()
    head = Ledger(resolve(target.output_uri)).head()
    index = archive.scan(resolve(target.archive_uri), target.topic_pattern)
    return Positions(
        {tp: b.latest for tp, b in bounds.items()},
        {} if head is None else dict(head.end),
        {tp: index.latest(tp) for tp in index.files},
    )


def wait_until_caught_up(
    target: Target,
    *,
    timeout_s: float = CATCH_UP_TIMEOUT_S,
    progress: Progress = lambda line: None,
    check: Callable[[], None] = lambda: None,
    where: str = "the job's and the archiver's logs",
) -> Positions:
    """Until the job and the archiver reach every partition's end; progress on the way.

    ``check`` runs at every poll (the local pipeline raises there when a
    service keeps failing).
    """
    deadline = time.monotonic() + timeout_s
    last_line = ""
    while True:
        found = positions(target)
        if found.caught_up:
            return found
        line = found.line()
        if line != last_line:
            progress(f"      waiting: {line}")
            last_line = line
        check()
        if time.monotonic() > deadline:
            raise NotCaughtUpError(f"not caught up after {timeout_s:.0f} s ({line}); see {where}")
        time.sleep(2)


def verify(target: Target) -> tuple[bool, str]:
    """``tablecast verify`` of the output against the archive."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "verify",
            "--archive",
            target.archive_uri,
            "--output",
            target.output_uri,
            *(["--topic-pattern", target.topic_pattern] if target.job is not None else []),
        ],
        env=dict(target.env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def output_summary(output_uri: str) -> OutputSummary:
    from app.sink import ledger as ledger_mod
    from app.sink.ledger import Ledger
    from app.storage import resolve

    entries = Ledger(resolve(output_uri)).entries()
    batches = [e for e in entries if e.kind == ledger_mod.BATCH]
    return OutputSummary(
        batches=len(batches),
        rows=sum(e.rows for e in batches),
        files=sum(len(e.files) for e in batches),
    )


def run(
    target: Target,
    load: Load,
    *,
    deploy: Callable[[], str],
    timeout_s: float = CATCH_UP_TIMEOUT_S,
    progress: Progress = lambda line: None,
    check: Callable[[], None] = lambda: None,
    where: str = "the job's and the archiver's logs",
) -> TestRunReport:
    """The whole loop; the report says whether the output is exact."""
    started = time.monotonic()
    progress("[test-run] deploying the job ...")
    deployed = deploy()
    progress(f"      {deployed}")
    progress(
        f"[test-run] publishing {load.capture.sessions} sessions to {load.capture.topics} "
        "topics ..."
    )
    produced = publish(target, load)
    for line in produced.lines():
        progress(f"      {line}")
    progress("[test-run] waiting until the job and the archiver have caught up ...")
    caught = wait_until_caught_up(
        target, timeout_s=timeout_s, progress=progress, check=check, where=where
    )
    progress("[test-run] tablecast verify ...")
    exact, verified = verify(target)
    return TestRunReport(
        environment=target.environment + (f", job {target.job}" if target.job is not None else ""),
        deployed=deployed,
        produced=produced,
        caught=caught,
        output=output_summary(target.output_uri),
        verified=verified,
        exact=exact,
        elapsed_s=time.monotonic() - started,
    )
