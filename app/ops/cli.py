"""``tablecast-ops``: deploy and watch the job, manage topics, produce load, archive Kafka.

Every command that names ``--environment`` reads that environment's hand-off
from SSM Parameter Store (``/tablecast/<env>/``): brokers, buckets, the driver,
the topic policy. The Kafka commands also take ``--bootstrap-servers`` for a
broker outside any environment (a laptop, a test). Failures print one line
and exit non-zero (:mod:`app.ops.errors` lists the codes).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from types import FrameType

from app import handoff
from app.cli import parse_duration_ms, parse_positive
from app.code_version import checkout_commit
from app.errors import ConfigurationError, TablecastError
from app.metrics.publisher import MetricsPublisher, NullPublisher, PublisherKind, make_publisher
from app.ops import deploy, wheel
from app.ops.archive_lock import ArchiveLock
from app.ops.aws import AwsClients
from app.ops.environment import Handoff, find_driver, read_handoff
from app.ops.pipelines import (
    PRICES,
    Declarations,
    list_pipelines,
    load_prices,
    settings_path,
)
from app.ops.pipelines import deployed as deployed_pipelines
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint
from app.tools import generate as gen

DEFAULT_TOPIC_PATTERN = handoff.DEFAULT_TOPIC_PATTERN
_PROJECT = Path(__file__).resolve().parents[2]


def _seconds(text: str) -> float:
    try:
        return parse_duration_ms(text) / 1000
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tablecast-ops", description="Operate a tablecast environment."
    )
    parser.add_argument("--region", help="AWS region of the environment [AWS configuration]")
    commands = parser.add_subparsers(dest="command", required=True)

    deploy = commands.add_parser("deploy", help="build, upload and start a job version")
    _environment(deploy, required=True)
    artifact = deploy.add_mutually_exclusive_group()
    artifact.add_argument("--wheel", type=Path, help="deploy this wheel instead of building one")
    artifact.add_argument("--version", help="re-deploy a version already uploaded (rollback)")
    deploy.add_argument("--project", type=Path, default=_PROJECT, help="the project to build")
    deploy.add_argument(
        "--replace",
        action="store_true",
        help="overwrite a different wheel uploaded under the same version",
    )
    _heartbeat(deploy)

    status = commands.add_parser("status", help="job version, heartbeat, lag, alarms")
    _environment(status, required=True)

    start = commands.add_parser("start", help="start the job's service, wait for a heartbeat")
    _environment(start, required=True)
    _heartbeat(start)
    stop = commands.add_parser("stop", help="stop the job's service (its alarms will fire)")
    _environment(stop, required=True)

    topics = commands.add_parser("topics", help="create or list topics")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True)
    create = topic_commands.add_parser("create", help="create topics for new sources")
    _kafka(create)
    create.add_argument("names", nargs="+", metavar="TOPIC")
    create.add_argument("--partitions", type=parse_positive, default=6)
    create.add_argument(
        "--retention-hours", type=int, help="at least 72 [the environment's retention-hours]"
    )
    create.add_argument(
        "--replication-factor", type=parse_positive, help="[the environment's replication-factor]"
    )
    create.add_argument(
        "--topic-pattern", help="names must match it [the environment's topic-pattern]"
    )
    listing = topic_commands.add_parser("list", help="list topics with their retention")
    _kafka(listing)
    listing.add_argument("--topic-pattern", help="only these [all topics]")

    produce = commands.add_parser("produce", help="publish generated capture sessions")
    _kafka(produce)
    produce.add_argument("--sources", type=parse_positive, default=2, help="topics <prefix>0..N-1")
    produce.add_argument("--prefix", default="sensor-")
    produce.add_argument(
        "--partitions",
        type=parse_positive,
        help="partitions to spread sessions over [the topics' fewest]",
    )
    produce.add_argument("--sessions", type=parse_positive, default=8)
    produce.add_argument("--updates", type=int, default=40, help="updates per session")
    produce.add_argument("--rows-min", type=parse_positive, default=5)
    produce.add_argument("--rows-max", type=parse_positive, default=20)
    produce.add_argument(
        "--resync-every",
        type=int,
        default=0,
        help="a resync snapshot every N messages of a session",
    )
    produce.add_argument(
        "--fault",
        action="append",
        default=[],
        choices=[f.value for f in gen.Fault if f is not gen.Fault.ARCHIVE_HOLE],
    )
    produce.add_argument("--rate", type=float, default=0.0, help="messages per second [no limit]")
    produce.add_argument("--seed", type=int, default=7)
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
        type=int,
        default=0,
        help="commit a transaction every N messages [no transactions]",
    )

    run = commands.add_parser(
        "test-run", help="deploy, publish a load, wait until caught up, verify exactly, report"
    )
    _kafka(run)
    run_artifact = run.add_mutually_exclusive_group()
    run_artifact.add_argument(
        "--wheel", type=Path, help="deploy this wheel instead of building one"
    )
    run_artifact.add_argument("--version", help="deploy a version already uploaded")
    run_artifact.add_argument(
        "--no-deploy",
        action="store_true",
        help="test what is deployed (on a test pipeline's driver, which may not deploy)",
    )
    run.add_argument("--project", type=Path, default=_PROJECT, help="the project to build")
    run.add_argument("--topics", type=parse_positive, default=3, help="topics <prefix>0..N-1 [3]")
    run.add_argument("--prefix", default="sensor-")
    run.add_argument("--partitions", type=parse_positive, default=2, help="per topic [2]")
    run.add_argument("--sessions", type=parse_positive, default=24)
    run.add_argument("--updates", type=int, default=100, help="updates per session [100]")
    run.add_argument("--resync-every", type=int, default=25)
    run.add_argument("--rate", type=float, default=0.0, help="messages per second [no limit]")
    run.add_argument("--seed", type=int, default=7)
    run.add_argument(
        "--timeout", type=_seconds, default=600.0, help="to catch up after publishing [10 minutes]"
    )
    run.add_argument(
        "--one-message-per-batch",
        action="store_true",
        default=os.environ.get(ONE_MESSAGE_PER_BATCH_VARIABLE) == "1",
        help=argparse.SUPPRESS,
    )
    _heartbeat(run)

    pipelines = commands.add_parser(
        "pipelines",
        help="list the test pipelines declared and deployed: age, expiry, owner, cost per "
        "hour, and the deployed ones nobody declares (orphans)",
    )
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

    retire = commands.add_parser(
        "retire-topic",
        help="record a topic as retired at its end: the job reads it to there, then carries "
        "on without it (stop its producers first)",
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
        "--topic-pattern", help="the job's topics [the environment's topic-pattern]"
    )

    archive = commands.add_parser("archive", help="copy Kafka into the raw archive")
    _kafka(archive)
    archive.add_argument("--archive", help="archive URI [the environment's archive-uri]")
    archive.add_argument("--topic-pattern", help="[the environment's topic-pattern]")
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
    archive.add_argument("--max-records", type=parse_positive, default=50_000)
    archive.add_argument(
        "--group-id",
        default="tablecast-archiver",
        help="names the client to the brokers (no offsets are committed) [tablecast-archiver]",
    )
    archive.add_argument(
        "--max-wait",
        type=_seconds,
        default=60.0,
        help="longest a record waits for its file [1 minute]",
    )
    archive.add_argument(
        "--timeout", type=_seconds, default=3600.0, help="a catch-up stops after this [1 hour]"
    )
    archive.add_argument(
        "--metrics",
        choices=[kind.value for kind in PublisherKind],
        default=PublisherKind.NONE.value,
        help="where --follow publishes its heartbeat and lag every minute, with --environment "
        "(the driver's service: cloudwatch) [none]",
    )
    return parser


def _environment(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--environment", "-e", required=required, help="environment name: SSM /tablecast/<env>/"
    )


def _heartbeat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        default=900.0,
        help="how long to wait for the job's heartbeat [15 minutes]",
    )
    parser.add_argument("--poll", type=_seconds, default=20.0, help=argparse.SUPPRESS)


def _kafka(parser: argparse.ArgumentParser) -> None:
    _environment(parser, required=False)
    parser.add_argument(
        "--bootstrap-servers", help="HOST:PORT,... [the environment's bootstrap-brokers-iam]"
    )
    parser.add_argument(
        "--kafka-auth",
        choices=[a.value for a in KafkaAuth],
        help="[iam with the environment's brokers, else none]",
    )


def main(argv: Sequence[str] | None = None, *, declarations: Declarations | None = None) -> int:
    """The operator's command line; ``declarations``: infra's reading of the deployment
    settings (``scripts/tablecast_ops.py`` passes it; the job's wheel has no ``infra/``)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args, declarations)
    except TablecastError as exc:
        print(f"tablecast-ops {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code


def _dispatch(args: argparse.Namespace, declarations: Declarations | None) -> int:
    if args.command == "pipelines":
        return _pipelines(args, declarations)
    commands = {
        "deploy": _deploy,
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


def _deploy(args: argparse.Namespace) -> int:
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
    )
    _say(*report.lines())
    return 0


def _status(args: argparse.Namespace) -> int:
    from app.ops import status

    found = status.read_status(AwsClients.create(args.region), args.environment)
    _say(*found.lines())
    return 0 if found.healthy else 1


def _service(args: argparse.Namespace) -> int:
    from app.ops import metrics, service

    clients = AwsClients.create(args.region)
    found = read_handoff(clients.ssm, args.environment)
    instance = find_driver(clients.ec2, found)
    if args.command == "stop":
        done = service.stop(clients.ssm, clients.ec2, instance)
        _say(f"{service.UNIT} stopped on {instance} (command {done.command_id})")
        return 0
    done = service.start(clients.ssm, clients.ec2, instance)
    _say(f"{service.UNIT} started on {instance}; waiting for a heartbeat")
    heartbeat = metrics.wait_for_heartbeat(
        clients.cloudwatch,
        namespace=found.metric_namespace,
        environment=args.environment,
        after=done.done_at,
        timeout_s=args.heartbeat_timeout,
        poll_s=args.poll,
    )
    _say(f"heartbeat at {heartbeat.timestamp.isoformat(timespec='seconds')}")
    return 0


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
    names = [f"{args.prefix}{index}" for index in range(args.sources)]
    pattern = found.topic_pattern if found else None
    if pattern and not all(re.fullmatch(pattern, name) for name in names):
        print(f"warning: the job's pattern {pattern!r} does not match {names[0]}", file=sys.stderr)
    partitions = args.partitions or produce.topic_partitions(endpoint, names)
    run_id = args.run_id
    if run_id is None:
        run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    spec = produce.LoadSpec(
        capture=gen.CaptureSpec(
            topics=args.sources,
            partitions=partitions,
            sessions=args.sessions,
            rows_min=args.rows_min,
            rows_max=max(args.rows_min, args.rows_max),
            updates=args.updates,
            resync_every=args.resync_every,
            prefix=args.prefix,
            seed=args.seed,
            start_ms=int(time.time() * 1000),
            faults=tuple(gen.Fault(f) for f in args.fault),
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
        group_id=args.group_id,
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
            run = copier.catch_up(timeout_s=args.timeout)
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

    found = _handoff(args)
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


# Shared environments: a test run's load must never reach their topics.
_NOT_FOR_TEST_RUNS = ("dev", "staging", "prod")


def _test_run(args: argparse.Namespace) -> int:
    from app.ops import test_run, topics

    if not args.environment:
        raise ConfigurationError("name the test pipeline with --environment")
    if args.environment in _NOT_FOR_TEST_RUNS:
        raise ConfigurationError(
            f"{args.environment} is a shared environment: test-run publishes generated load and "
            "deploys the working tree, so it runs on the sandbox or a test pipeline only"
        )
    found = _handoff(args)
    assert found is not None
    if args.no_deploy and found.job_version == "none":
        raise ConfigurationError(
            f"{args.environment} runs no job yet: deploy one first (tablecast-ops deploy -e "
            f"{args.environment}), then test it with --no-deploy"
        )
    clients = AwsClients.create(args.region)
    endpoint = _endpoint(args, found)
    load = test_run.Load(
        topics=args.topics,
        prefix=args.prefix,
        partitions=args.partitions,
        sessions=args.sessions,
        updates=args.updates,
        resync_every=args.resync_every,
        rate=args.rate,
        seed=args.seed,
        one_message_per_batch=args.one_message_per_batch,
    )
    # The load's topics, with the environment's retention and replication.
    policy = topics.TopicPolicy(found.retention_hours, found.replication_factor, args.partitions)
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
        test_run.Target.of(found, endpoint),
        load,
        deploy=deploy_job,
        timeout_s=args.timeout,
        progress=_say,
    )
    _say("")
    _say(*report.lines())
    if not report.exact:
        _say(report.verified)
        return 1
    return 0
