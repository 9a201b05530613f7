"""``tablecast-ops``: deploy and watch the job, manage topics, produce load, archive Kafka.

Every command that names ``--environment`` reads that environment's hand-off
from SSM Parameter Store (``/tablecast/<env>/``): brokers, buckets, the driver,
the topic policy. The Kafka commands also take ``--bootstrap-servers`` for a
broker outside any environment (a laptop, a test). Failures print one line
and exit with a code of the one table, :class:`app.errors.ExitCode`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from app import handoff, storage
from app.cli.capture import Shape, add_capture_options, capture_spec
from app.cli.outcome import outcome
from app.cli.parsing import (
    CommandParser,
    add_command,
    add_version,
    epilog,
    hidden_alias,
    natural,
    positive,
    rate,
)
from app.code_version import checkout_commit, job_version
from app.contract.schema import DEFAULT_SCHEMA
from app.durations import parse_duration_ms
from app.errors import ConfigurationError
from app.metrics.publisher import MetricsPublisher, NullPublisher, PublisherKind, make_publisher
from app.ops import deploy, test_run, wheel
from app.ops.archive_lock import ArchiveLock
from app.ops.aws import AwsClients
from app.ops.environment import Handoff, find_driver, read_handoff, read_job_handoff
from app.ops.pipelines import (
    PRICES,
    Declarations,
    list_pipelines,
    load_prices,
    settings_path,
)
from app.ops.pipelines import deployed as deployed_pipelines
from app.ops.processors import JobProcessor
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint
from app.tools import generate as gen

if TYPE_CHECKING:
    from app.ops.test_run import JobCode

DEFAULT_TOPIC_PATTERN = handoff.DEFAULT_TOPIC_PATTERN
_PROJECT = Path(__file__).resolve().parents[2]


def _seconds(text: str) -> float:
    try:
        return parse_duration_ms(text) / 1000
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="tablecast-ops",
        description="Operate a tablecast environment: deploy and watch the job, manage "
        "topics, publish load, archive Kafka. Commands that take --environment read its "
        "settings from SSM (/tablecast/<env>/).",
        epilog=epilog(
            [
                "tablecast-ops status -e dev --region eu-west-1",
                "tablecast-ops deploy -e dev",
                "tablecast-ops produce --bootstrap-servers 127.0.0.1:9092 --sessions 6",
            ]
        ),
    )
    add_version(parser, lambda: job_version().describe())
    # Before the subcommand, as this tool once took it; after it, as every command does.
    parser.add_argument("--region", default=None, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    deploy = add_command(
        commands,
        "deploy",
        summary="build, upload and start a job version",
        description="Build the job's wheel (or take --wheel), upload it with its SHA-256, "
        "record it as the environment's job version, restart the job on the driver and wait "
        "for a heartbeat from the new run. --version deploys one already uploaded (rollback). "
        "Where the deployment settings declare jobs, every job's service is restarted and "
        "each job's heartbeat awaited; --schema stores a job's table schema first, and the "
        "settings' processors (their wheels beside ours) and integrity classes are recorded "
        "for each job.",
        examples=[
            "tablecast-ops deploy -e dev",
            "tablecast-ops deploy -e dev --version 1.4.0",
            "tablecast-ops deploy -e dev --schema lab=schemas/lab.toml",
            "tablecast-ops deploy -e dev --settings settings.toml",
        ],
    )
    _environment(deploy, required=True)
    artifact = deploy.add_mutually_exclusive_group()
    artifact.add_argument(
        "--wheel", type=Path, help="deploy this wheel instead of building one [build one]"
    )
    artifact.add_argument(
        "--version",
        help="re-deploy a version already uploaded (rollback) [the wheel built or given]",
    )
    deploy.add_argument(
        "--project", type=Path, default=_PROJECT, help="the project to build [this checkout]"
    )
    deploy.add_argument(
        "--replace",
        action="store_true",
        help="overwrite a different wheel uploaded under the same version",
    )
    deploy.add_argument(
        "--schema",
        action="append",
        default=[],
        metavar="JOB=FILE",
        help="a declared job's table schema document, stored beside the wheels as "
        "schemas/<sha256>.toml and recorded as its schema-sha256; repeatable [the recorded ones]",
    )
    deploy.add_argument(
        "--settings",
        type=Path,
        help="deployment settings whose jobs' processor, processor_wheel and integrity to "
        "ship (from a checkout) [$TABLECAST_SETTINGS; without it: the recorded ones]",
    )
    _heartbeat(deploy)

    status = add_command(
        commands,
        "status",
        summary="job version, heartbeat, lag, alarms",
        description="Print the environment's job version, its last heartbeat, lag and "
        "violations, and its alarms. Exit 0 when healthy (a heartbeat in the last 3 hours, "
        "no alarm firing), 1 otherwise.",
        examples=[
            "tablecast-ops status -e dev --region eu-west-1",
            "tablecast-ops status -e dev --job lab",
        ],
    )
    _environment(status, required=True)
    _job(status)

    start = add_command(
        commands,
        "start",
        summary="start the job's service, wait for a heartbeat",
        description="Start the job's service on the driver and wait for its first heartbeat.",
        examples=["tablecast-ops start -e dev", "tablecast-ops start -e dev --job lab"],
    )
    _environment(start, required=True)
    _job(start)
    _heartbeat(start)
    stop = add_command(
        commands,
        "stop",
        summary="stop the job's service (its alarms will fire)",
        description="Stop the job's service on the driver; it resumes from its checkpoint "
        "when started again.",
        examples=["tablecast-ops stop -e dev", "tablecast-ops stop -e dev --job lab"],
    )
    _environment(stop, required=True)
    _job(stop)

    topics = add_command(
        commands,
        "topics",
        summary="create or list topics",
        description="Create topics with the environment's policy (retention, replication, "
        "name pattern), or list them with their retention.",
        examples=[
            "tablecast-ops topics create -e dev sensor-17 sensor-18",
            "tablecast-ops topics list --bootstrap-servers 127.0.0.1:9092",
        ],
    )
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = add_command(
        topic_commands,
        "create",
        summary="create topics for new sources",
        description="Create topics; each must match the job's pattern and get at least 72 "
        "hours of retention. Topics that exist are listed, not changed.",
        examples=["tablecast-ops topics create -e dev sensor-17"],
    )
    _kafka(create)
    create.add_argument("names", nargs="+", metavar="TOPIC", help="the topics to create")
    create.add_argument("--partitions", type=positive, default=6, help="partitions per topic [6]")
    create.add_argument(
        "--retention-hours", type=int, help="at least 72 [the environment's retention-hours]"
    )
    create.add_argument(
        "--replication-factor", type=positive, help="[the environment's replication-factor]"
    )
    create.add_argument(
        "--topic-pattern",
        metavar="REGEX",
        help="names must match it [the environment's topic-pattern]",
    )
    listing = add_command(
        topic_commands,
        "list",
        summary="list topics with their retention",
        description="List the topics with their partitions and retention.",
        examples=["tablecast-ops topics list -e dev"],
    )
    _kafka(listing)
    listing.add_argument("--topic-pattern", metavar="REGEX", help="only these [all topics]")

    produce = add_command(
        commands,
        "produce",
        summary="publish generated capture sessions",
        description="Publish generated capture sessions (the load `tablecast generate` writes "
        "to an archive) to topics <prefix>0 to <prefix>N-1, in order, with faults if asked.",
        examples=[
            "tablecast-ops produce -e sandbox --sessions 6 --updates 20 --resync-every 8",
            "tablecast-ops produce --bootstrap-servers 127.0.0.1:9092 --topic-count 3 --rate 50",
        ],
    )
    _kafka(produce)
    faults = [f for f in gen.Fault if f is not gen.Fault.ARCHIVE_HOLE]
    add_capture_options(
        produce,
        gen.CaptureSpec(),
        shapes=(Shape.FAULTS,),
        faults=faults,
        topics_alias="--sources",
        partitions_default="the topics' fewest",
    )
    produce.add_argument("--rate", type=rate, default=0.0, help="messages per second [no limit]")
    produce.add_argument(
        "--run-id", default=None, help="suffix of session ids; '' keeps the generator's [UTC time]"
    )
    produce.add_argument(
        "--one-message-per-batch",
        action="store_true",
        default=os.environ.get(ONE_MESSAGE_PER_BATCH_VARIABLE) == "1",
        help="a record batch per message, for a broker that reports a partition's end from its "
        f"last batch's first offset, as tansu does [{ONE_MESSAGE_PER_BATCH_VARIABLE}=1]",
    )
    produce.add_argument(
        "--transaction-size",
        type=natural,
        default=0,
        metavar="N",
        help="commit a transaction every N messages [0: no transactions]",
    )

    run = add_command(
        commands,
        "test-run",
        summary="deploy, publish a load, wait until caught up, verify exactly, report",
        description="On the sandbox or a test pipeline: deploy the working tree, publish a "
        "generated load, wait until the job has caught up and verify its output exactly. "
        "Exit 0 when exact, 1 otherwise.",
        examples=[
            "tablecast-ops test-run -e resync-exp --sessions 48 --resync-every 10",
            "tablecast-ops test-run -e resync-exp --job lab",
        ],
    )
    _kafka(run)
    run_artifact = run.add_mutually_exclusive_group()
    run_artifact.add_argument(
        "--wheel", type=Path, help="deploy this wheel instead of building one [build one]"
    )
    run_artifact.add_argument(
        "--version", help="deploy a version already uploaded [the wheel built or given]"
    )
    run_artifact.add_argument(
        "--no-deploy",
        action="store_true",
        help="test what is deployed (on a test pipeline's driver, which may not deploy)",
    )
    run.add_argument(
        "--project", type=Path, default=_PROJECT, help="the project to build [this checkout]"
    )
    add_capture_options(
        run,
        test_run.LOAD,
        prefix_default=f"{test_run.LOAD.prefix}; with --job, the literal start of the job's "
        "topic-pattern",
    )
    run.add_argument("--rate", type=rate, default=0.0, help="messages per second [no limit]")
    _catch_up_timeout(run, 600.0, "to catch up after publishing [10 minutes]")
    run.add_argument(
        "--one-message-per-batch",
        action="store_true",
        default=os.environ.get(ONE_MESSAGE_PER_BATCH_VARIABLE) == "1",
        help=argparse.SUPPRESS,
    )
    _heartbeat(run)
    _job(run)

    pipelines = add_command(
        commands,
        "pipelines",
        summary="list the test pipelines declared and deployed: age, expiry, owner, cost per "
        "hour, and the deployed ones nobody declares (orphans)",
        description="List the test pipelines the deployment settings declare and those the "
        "account runs, with age, expiry, owner and cost per hour; expired ones are named with "
        "their destroy command, and deployed ones nobody declares (orphans) make it exit 1.",
        examples=["tablecast-ops pipelines", "tablecast-ops pipelines --declared-only"],
    )
    _region(pipelines)
    pipelines.add_argument(
        "--settings", type=Path, help="deployment settings [$TABLECAST_SETTINGS]"
    )
    pipelines.add_argument("--prices", type=Path, help="price table [infra/prices.toml]")
    pipelines.add_argument("--today", type=date.fromisoformat, help=argparse.SUPPRESS)
    pipelines.add_argument(
        "--declared-only",
        action="store_true",
        help="read the settings only, not what the account runs (no AWS credentials needed)",
    )

    retire = add_command(
        commands,
        "retire-topic",
        summary="record a topic as retired at its end: the job reads it to there, then "
        "carries on without it (stop its producers first)",
        description="Record a topic as retired at its current end offsets: the job reads it "
        "to there, then carries on without it, and its deletion is no data loss. Stop the "
        "topic's producers first.",
        examples=[
            "tablecast-ops retire-topic -e dev --topic sensor-17",
            "tablecast-ops retire-topic -e dev --job lab --topic sensor-lab-3",
        ],
    )
    _kafka(retire)
    retire.add_argument("--topic", required=True, help="the topic to retire")
    retire.add_argument("--output", help="the job's output URI [the environment's output-uri]")
    retire.add_argument(
        "--checkpoint",
        default="",
        help="where the job's state is [the checkpoint the output's last batch names]",
    )
    retire.add_argument(
        "--topic-pattern",
        metavar="REGEX",
        help="the job's topics [the environment's topic-pattern]",
    )
    _job(retire)

    archive = add_command(
        commands,
        "archive",
        summary="copy Kafka into the raw archive",
        description="Copy Kafka's records into the raw archive: catch up, then exit, or "
        "--follow as a service until SIGTERM. One archiver per archive.",
        examples=[
            "tablecast-ops archive -e dev --follow",
            "tablecast-ops archive --bootstrap-servers 127.0.0.1:9092 --archive /tmp/archive",
        ],
    )
    _kafka(archive)
    archive.add_argument("--archive", help="archive URI [the environment's archive-uri]")
    archive.add_argument(
        "--topic-pattern", metavar="REGEX", help="[the environment's topic-pattern]"
    )
    archive.add_argument(
        "--kafka-isolation-level",
        choices=[i.value for i in Isolation],
        help="[the job's: the environment's kafka-isolation-level, else read_committed]",
    )
    archive.add_argument(
        "--follow",
        action="store_true",
        help="run until SIGTERM, as a service [catch up, then exit]",
    )
    archive.add_argument(
        "--max-records",
        type=positive,
        default=50_000,
        metavar="N",
        help="records per archive file at most [50000]",
    )
    archive.add_argument(
        "--consumer-group",
        default="tablecast-archiver",
        metavar="NAME",
        help="the group id that names the client to the brokers (no offsets are committed) "
        "[tablecast-archiver]",
    )
    hidden_alias(archive, "--group-id", "consumer_group")
    archive.add_argument(
        "--max-wait",
        type=_seconds,
        default=60.0,
        metavar="DURATION",
        help="longest a record waits for its file [1 minute]",
    )
    _catch_up_timeout(archive, 3600.0, "without --follow: a catch-up stops after this [1 hour]")
    archive.add_argument(
        "--metrics",
        choices=[kind.value for kind in PublisherKind],
        default=PublisherKind.NONE.value,
        help="where --follow publishes its heartbeat and lag every minute, with --environment "
        "(the driver's service: cloudwatch) [none]",
    )
    # Refused in one line (_archive): the archive is every job's.
    archive.add_argument("--job", default=None, help=argparse.SUPPRESS)
    return parser


def _catch_up_timeout(parser: argparse.ArgumentParser, default_s: float, text: str) -> None:
    parser.add_argument(
        "--catch-up-timeout", type=_seconds, default=default_s, metavar="DURATION", help=text
    )
    hidden_alias(parser, "--timeout", "catch_up_timeout", type=_seconds)


def _region(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a --region given before the subcommand is kept when none follows it.
    parser.add_argument(
        "--region",
        default=argparse.SUPPRESS,
        help="AWS region of the environment [AWS_REGION, else the AWS configuration's]",
    )


def _environment(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--environment",
        "-e",
        required=required,
        help="environment name: its settings are SSM's /tablecast/<env>/"
        + ("" if required else " [none: name the brokers]"),
    )
    _region(parser)


def _job(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job",
        metavar="NAME",
        default=None,
        help="one of the jobs the deployment settings declare (SSM jobs) [the one job]",
    )


def _heartbeat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        default=900.0,
        metavar="DURATION",
        help="how long to wait for the job's heartbeat [15 minutes]",
    )
    parser.add_argument("--poll", type=_seconds, default=20.0, help=argparse.SUPPRESS)


def _kafka(parser: argparse.ArgumentParser) -> None:
    _environment(parser, required=False)
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT,...",
        help="the brokers [the environment's bootstrap-brokers-iam]",
    )
    parser.add_argument(
        "--kafka-auth",
        choices=[a.value for a in KafkaAuth],
        help="none, iam, tls or scram [iam with the environment's brokers, else none]",
    )


def main(argv: Sequence[str] | None = None, *, declarations: Declarations | None = None) -> int:
    """The operator's command line; ``declarations``: infra's reading of the deployment
    settings (``scripts/tablecast_ops.py`` passes it; the job's wheel has no ``infra/``)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    # boto3 reads AWS_DEFAULT_REGION only; `tablecast` reads AWS_REGION too, and so does this.
    args.region = args.region or os.environ.get("AWS_REGION") or None

    def command() -> int:
        for dest, option, schemes in _PATHS:
            if getattr(args, dest, None):
                storage.require_scheme(option, getattr(args, dest), schemes)
        return _dispatch(args, declarations)

    return outcome(f"tablecast-ops {args.command}", command)


# The path options and the schemes each takes (as `tablecast`'s).
_PATHS = (
    ("archive", "--archive", (storage.LOCAL, storage.S3)),
    ("output", "--output", (storage.LOCAL, storage.S3)),
    ("checkpoint", "--checkpoint", (storage.LOCAL, storage.HDFS)),
)


def _dispatch(args: argparse.Namespace, declarations: Declarations | None) -> int:
    if args.command == "pipelines":
        return _pipelines(args, declarations)
    if args.command == "deploy":
        return _deploy(args, declarations)
    commands = {
        "status": _status,
        "start": _service,
        "stop": _service,
        "topics": _topics,
        "produce": _produce,
        "archive": _archive,
        "test-run": _test_run,
        "retire-topic": _retire_topic,
    }
    return commands[args.command](args)


def _say(*lines: str) -> None:
    for line in lines:
        print(line, flush=True)


def _wheel(args: argparse.Namespace, say: Callable[[str], None]) -> wheel.Wheel | None:
    """The wheel ``--wheel`` names, or one built from ``--project``; none for ``--version``."""
    if args.version is not None:
        return None
    if args.wheel is not None:
        return wheel.read_wheel(args.wheel)
    say(f"building the wheel of {args.project}")
    return wheel.build_wheel(args.project, args.project / "dist")


def _commit(args: argparse.Namespace, built: wheel.Wheel | None) -> str:
    """The checkout's commit a built wheel came from (recorded with its upload)."""
    return (checkout_commit(args.project) or "") if built is not None else ""


def _deploy(args: argparse.Namespace, declarations: Declarations | None) -> int:
    schemas = _schemas(args.schema)  # a bad form costs no build
    job_processors = _job_processors(args, declarations)  # an invalid one too
    built = _wheel(args, _say)
    if built is not None:
        _say(f"wheel {built.name} sha256 {built.sha256}")
    report = deploy.deploy(
        AwsClients.create(args.region),
        args.environment,
        wheel=built,
        version=args.version,
        replace=args.replace,
        commit=_commit(args, built),
        heartbeat_timeout_s=args.heartbeat_timeout,
        poll_s=args.poll,
        progress=_say,
        schemas=schemas,
        job_processors=job_processors,
    )
    _say(*report.lines())
    return 0


def _job_processors(
    args: argparse.Namespace, declarations: Declarations | None
) -> list[JobProcessor] | None:
    """The processors the deployment settings give the environment's jobs; None where no
    settings are named (the deploy leaves the recorded ones)."""
    if declarations is None or declarations.job_processors is None:
        if args.settings is not None:
            raise ConfigurationError(
                "deploy --settings reads infra's configuration: run it from a checkout "
                "(scripts/tablecast_ops.py)"
            )
        return None  # on a node: the job's wheel holds no infra/
    named = args.settings or os.environ.get(declarations.settings_variable, "").strip()
    if not named:
        return None
    return list(declarations.job_processors(Path(named), args.environment))


def _schemas(given: list[str]) -> dict[str, Path]:
    """``--schema JOB=FILE``, by job."""
    found: dict[str, Path] = {}
    for text in given:
        job, equals, file = text.partition("=")
        if not (equals and job and file):
            raise ConfigurationError(f"--schema {text!r}: give JOB=FILE")
        if job in found:
            raise ConfigurationError(f"--schema {text!r}: job {job} has a schema already")
        found[job] = Path(file)
    return found


def _status(args: argparse.Namespace) -> int:
    from app.ops import status

    clients = AwsClients.create(args.region)
    _job_unit(read_handoff(clients.ssm, args.environment), args.job)
    found = status.read_status(clients, args.environment, args.job)
    _say(*found.lines())
    return 0 if found.healthy else 1


def _service(args: argparse.Namespace) -> int:
    from app.ops import metrics, service

    clients = AwsClients.create(args.region)
    found = read_handoff(clients.ssm, args.environment)
    unit = _job_unit(found, args.job)
    instance = find_driver(clients.ec2, found)
    if args.command == "stop":
        done = service.stop(clients.ssm, clients.ec2, instance, unit=unit)
        _say(f"{unit} stopped on {instance} (command {done.command_id})")
        return 0
    done = service.start(clients.ssm, clients.ec2, instance, unit=unit)
    _say(f"{unit} started on {instance}; waiting for a heartbeat")
    heartbeat = metrics.wait_for_heartbeat(
        clients.cloudwatch,
        namespace=found.metric_namespace,
        environment=args.environment,
        after=done.done_at,
        timeout_s=args.heartbeat_timeout,
        poll_s=args.poll,
        job=args.job,
    )
    _say(f"heartbeat at {heartbeat.timestamp.isoformat(timespec='seconds')}")
    return 0


def _job_unit(found: Handoff, job: str | None) -> str:
    """The service of ``--job`` (a declared job's), or of the environment's one job."""
    declared = ", ".join(found.jobs)
    if job is None and found.jobs:
        raise ConfigurationError(
            f"environment {found.environment} declares jobs ({declared}): name one with --job"
        )
    if job is not None and job not in found.jobs:
        raise ConfigurationError(
            f"--job {job}: environment {found.environment} declares "
            + (f"jobs {declared} only" if found.jobs else "no jobs (it runs its one job)")
        )
    return handoff.job_unit(job)


def _job_handoff(args: argparse.Namespace, found: Handoff | None) -> Handoff | None:
    """``--job``'s hand-off over its environment's (``read_job_handoff``), the job checked as
    status, start and stop check it; without --job, the environment's."""
    if found is None:
        if args.job is not None:
            raise ConfigurationError(
                f"--job {args.job}: name its --environment (a job's settings are its environment's)"
            )
        return None
    _job_unit(found, args.job)
    if args.job is None:
        return found
    return read_job_handoff(AwsClients.create(args.region).ssm, found, args.job)


def _handoff(args: argparse.Namespace) -> Handoff | None:
    if not args.environment:
        return None
    found = read_handoff(AwsClients.create(args.region).ssm, args.environment)
    # pyarrow's S3 filesystem (the archive) takes its region from the environment.
    os.environ.setdefault("AWS_REGION", found.region)
    return found


def _endpoint(args: argparse.Namespace, found: Handoff | None) -> KafkaEndpoint:
    if args.bootstrap_servers:
        auth = KafkaAuth(args.kafka_auth or KafkaAuth.NONE)
        return KafkaEndpoint(args.bootstrap_servers, auth, found.region if found else "")
    if found is None:
        raise ConfigurationError("name --environment or --bootstrap-servers")
    # The environment's brokers take IAM; the pipeline on one machine (a plaintext
    # broker) says otherwise with the same variable as run-job.
    auth = KafkaAuth(args.kafka_auth or os.environ.get(KAFKA_AUTH_VARIABLE) or KafkaAuth.IAM)
    return KafkaEndpoint(found.bootstrap_brokers, auth, found.region)


KAFKA_AUTH_VARIABLE = "TABLECAST_KAFKA_AUTH"
# Set by the pipeline on one machine's env.sh: its broker is tansu.
ONE_MESSAGE_PER_BATCH_VARIABLE = "TABLECAST_ONE_MESSAGE_PER_BATCH"


def _topic_pattern(args: argparse.Namespace, found: Handoff | None) -> str | None:
    if args.topic_pattern:
        return str(args.topic_pattern)
    return found.topic_pattern if found else None


def _topics(args: argparse.Namespace) -> int:
    from app.ops import topics

    found = _handoff(args)
    admin = topics.Topics(_endpoint(args, found))
    if args.topics_command == "list":
        for info in admin.list_topics(_topic_pattern(args, found)):
            _say(info.line())
        return 0
    retention = args.retention_hours or (found.retention_hours if found else None)
    replication = args.replication_factor or (found.replication_factor if found else None)
    if retention is None or replication is None:
        raise ConfigurationError(
            "without --environment, name --retention-hours and --replication-factor"
        )
    policy = topics.TopicPolicy(retention, replication, args.partitions)
    result = admin.create(args.names, policy, topic_pattern=_topic_pattern(args, found))
    for info in result.created:
        _say(f"created {info.line()}")
    for info in result.existing:
        _say(f"exists  {info.line()}")
    return 0


def _produce(args: argparse.Namespace) -> int:
    from app.ops import produce

    found = _handoff(args)
    endpoint = _endpoint(args, found)
    names = [f"{args.prefix}{index}" for index in range(args.topic_count)]
    pattern = found.topic_pattern if found else None
    if pattern and not all(re.fullmatch(pattern, name) for name in names):
        print(f"warning: the job's pattern {pattern!r} does not match {names[0]}", file=sys.stderr)
    partitions = args.partitions or produce.topic_partitions(endpoint, names)
    run_id = args.run_id
    if run_id is None:
        run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    spec = produce.LoadSpec(
        capture=capture_spec(
            args, gen.CaptureSpec(), partitions=partitions, start_ms=int(time.time() * 1000)
        ),
        rate=args.rate,
        run_id=run_id,
        transaction_size=args.transaction_size,
        one_message_per_batch=args.one_message_per_batch,
    )
    report = produce.publish(endpoint, spec)
    _say(*report.lines())
    return 0


def _archive(args: argparse.Namespace) -> int:
    from app.ops import archiver

    if args.job is not None:
        raise ConfigurationError(
            f"--job {args.job}: archive takes no job: one archiver copies every job's topics "
            "(within the environment's topic-pattern) into the environment's one archive; "
            "run it without --job"
        )
    found = _handoff(args)
    endpoint, isolation = _endpoint(args, found), Isolation.READ_COMMITTED
    if found is not None:
        # The environment's: it archives what the job reads, signed in as the job is
        # (unless told otherwise).
        job_endpoint, isolation = found.job_kafka()
        if not (args.bootstrap_servers or args.kafka_auth or os.environ.get(KAFKA_AUTH_VARIABLE)):
            endpoint = job_endpoint
    uri = args.archive or (found.archive_uri if found else None)
    if uri is None:
        raise ConfigurationError("without --environment, name --archive")
    config = archiver.ArchiverConfig(
        archive_uri=uri,
        topic_pattern=_topic_pattern(args, found) or DEFAULT_TOPIC_PATTERN,
        max_records=args.max_records,
        max_wait_s=args.max_wait,
        group_id=args.consumer_group,
        isolation=Isolation(args.kafka_isolation_level or isolation),
    )

    def written(file: archiver.WrittenFile) -> None:
        _say(f"wrote {file.path} ({file.records:,} records)")

    publisher = _archiver_publisher(args, found)
    lock = None
    if found is not None and found.archive_lock_days:
        lock = ArchiveLock.of(AwsClients.create(found.region).s3, found.archive_lock_days, uri)
    with (
        contextlib.closing(publisher),
        archiver.Archiver(
            endpoint, config, on_file=written, publisher=publisher, lock=lock
        ) as copier,
    ):
        if not args.follow:
            run = copier.catch_up(timeout_s=args.catch_up_timeout)
        else:
            stop = threading.Event()

            def request_stop(signum: int, _frame: FrameType | None) -> None:
                _say(f"signal {signum}: writing what is buffered, then stopping")
                stop.set()

            signal.signal(signal.SIGTERM, request_stop)
            signal.signal(signal.SIGINT, request_stop)
            run = copier.follow(stop)
    _say(run.lines()[0])
    return 0


def _archiver_publisher(args: argparse.Namespace, found: Handoff | None) -> MetricsPublisher:
    """Where a following archiver's heartbeat and lag go: the environment's namespace."""
    kind = PublisherKind(args.metrics)
    if kind is PublisherKind.NONE:
        return NullPublisher()
    if found is None or not args.follow:
        raise ConfigurationError("--metrics publishes with --environment and --follow only")
    return make_publisher(kind, environment=found.environment, region=found.region)


def _retire_topic(args: argparse.Namespace) -> int:
    from app.ops import retire

    found = _job_handoff(args, _handoff(args))
    endpoint = _endpoint(args, found)
    if found is not None and not (
        args.bootstrap_servers or args.kafka_auth or os.environ.get(KAFKA_AUTH_VARIABLE)
    ):
        endpoint, _ = found.job_kafka()  # signed in as the job is
    output = args.output or (found.s3_uri(handoff.OUTPUT_URI) if found else None)
    if output is None:
        raise ConfigurationError("without --environment, name --output")
    done = retire.retire_topic(
        endpoint,
        output,
        args.topic,
        topic_pattern=_topic_pattern(args, found) or DEFAULT_TOPIC_PATTERN,
        checkpoint=args.checkpoint,
    )
    _say(*done.lines())
    return 0


def _pipelines(args: argparse.Namespace, declarations: Declarations | None) -> int:
    if declarations is None:
        # The job's wheel (on a node) holds app/ only.
        raise ConfigurationError(
            "pipelines reads infra/'s configuration: run it from a checkout "
            "(scripts/tablecast_ops.py)"
        )
    settings = settings_path(args.settings, os.environ, declarations.settings_variable)
    listing = list_pipelines(
        settings,
        declarations,
        today=args.today or datetime.now(UTC).date(),
        prices=load_prices(args.prices or PRICES),
        deployed=None if args.declared_only else deployed_pipelines(args.region),
    )
    for line in listing.lines():
        _say(line)
    for name in listing.expired:
        _say(f"expired: {name}; destroy it with {declarations.destroy_command(name)}")
    for orphan in listing.orphans:
        _say(
            f"orphan: {orphan.name}; declare it again in {settings} (its state is in the "
            f"state backend) and destroy it with {declarations.destroy_command(orphan.name)}"
        )
    return 1 if listing.orphans else 0


def _literal_start(pattern: str) -> str:
    """The literal characters a topic pattern starts with (``^sensor-lab-.+``: ``sensor-lab-``)."""
    found = re.match(r"\^([A-Za-z0-9_-]*)", pattern)
    return found.group(1) if found else ""


# Shared environments: a test run's load must never reach their topics.
_NOT_FOR_TEST_RUNS = ("dev", "staging", "prod")


def _test_run(args: argparse.Namespace) -> int:
    if not args.environment:
        raise ConfigurationError("name the test pipeline with --environment")
    if args.environment in _NOT_FOR_TEST_RUNS:
        raise ConfigurationError(
            f"{args.environment} is a shared environment: test-run publishes generated load and "
            "deploys the working tree, so it runs on the sandbox or a test pipeline only"
        )
    found = _job_handoff(args, _handoff(args))
    assert found is not None
    if args.no_deploy and found.job_version == "none":
        raise ConfigurationError(
            f"{args.environment} runs no job yet: deploy one first (tablecast-ops deploy -e "
            f"{args.environment}), then test it with --no-deploy"
        )
    clients = AwsClients.create(args.region)
    with tempfile.TemporaryDirectory(prefix="tablecast-test-run-") as directory:
        # A processor job's wheel, fetched and checked before anything is published.
        code = (
            test_run.job_processor(clients.s3, found, args.job, Path(directory))
            if args.job
            else None
        )
        return _test_run_load(args, found, clients, code)


def _test_run_load(
    args: argparse.Namespace, found: Handoff, clients: AwsClients, code: JobCode | None
) -> int:
    from app.ops import topics

    endpoint = _endpoint(args, found)
    load = test_run.Load(
        capture=capture_spec(
            args,
            test_run.LOAD,
            prefix=args.prefix or (_literal_start(found.topic_pattern) if args.job else None),
            schema=test_run.job_load_schema(clients.s3, found, args.job, code)
            if args.job
            else DEFAULT_SCHEMA,
        ),
        rate=args.rate,
        one_message_per_batch=args.one_message_per_batch,
    )
    # The load's topics, with the environment's retention and replication.
    policy = topics.TopicPolicy(
        found.retention_hours, found.replication_factor, load.capture.partitions
    )
    topics.Topics(endpoint).create(load.topic_names, policy, topic_pattern=found.topic_pattern)

    def deploy_job() -> str:
        if args.no_deploy:
            return f"tablecast {found.job_version}, as deployed (--no-deploy)"
        built = _wheel(args, lambda line: None)
        report = deploy.deploy(
            clients,
            args.environment,
            wheel=built,
            version=args.version,
            # A test pipeline runs the working tree: its wheel replaces one of the same version.
            replace=True,
            commit=_commit(args, built),
            heartbeat_timeout_s=args.heartbeat_timeout,
            poll_s=args.poll,
        )
        return (
            f"tablecast {report.version} ({report.artifact_uri}), heartbeat at "
            f"{report.heartbeat.timestamp.isoformat(timespec='seconds')}"
        )

    report = test_run.run(
        test_run.Target.of(found, endpoint, job=args.job, processor=code),
        load,
        deploy=deploy_job,
        timeout_s=args.catch_up_timeout,
        progress=_say,
    )
    _say("")
    _say(*report.lines())
    if not report.exact:
        _say(report.verified)
        return 1
    return 0
