"""``tablecast run``: every option checked, then the job on Spark with its progress."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from app import handoff
from app.durations import parse_duration_ms
from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError
from app.metrics.publisher import PublisherKind
from app.sources import archive
from app.sources.kafka_client import Isolation
from app.sources.starting import TIME_NEEDS_KAFKA, StartingPosition, StartKind
from app.spark.session import spark_session
from app.storage import resolve

from . import options

if TYPE_CHECKING:
    from app.metrics.consumer_group import GroupCommitter
    from app.spark.job import Source


def run(args: argparse.Namespace) -> int:
    from app.metrics.listener import MetricsListener
    from app.metrics.progress import Console, ProgressDisplay
    from app.metrics.publisher import make_publisher
    from app.sink import crash_points, fencing, guard
    from app.spark import job, planning
    from app.table import catalog as table_catalog

    # Test seam: a test that starts `tablecast run` as a process names the commit step
    # to die at, or the trigger to stop at, in the environment (app.sink.crash_points);
    # unset, the run dies nowhere.
    crash_points.install_from_environment()
    planning.install_stop(crash_points.PlanningStop.from_environment())

    starting = _starting(args)  # first: a time with the archive alone is that, not a typo
    source = _source(args)
    config = job.JobConfig(
        source=source,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=job.Trigger.parse(args.trigger),
        integrity=IntegrityMode(args.integrity),
        topic_pattern=options.topics_of(args),
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        min_offsets_per_trigger=args.min_offsets_per_trigger or 0,
        max_trigger_delay_s=options.seconds(args, "max_trigger_delay"),
        starting_position=starting,
        session_timeout_ms=parse_duration_ms(args.session_timeout, "--session-timeout"),
        trace=frozenset(args.trace),
        table=options.table_settings(args),
        schema=options.schema(args),
        schema_document=args.schema or "(default)",
        writer_lease_s=options.writer_lease(args),
    )
    # A processor that cannot load costs no JVM start.
    processor = options.processor(args)
    config = dataclasses.replace(config, processor=processor.name)
    from app.sink import processors

    # A processor or schema the output cannot take costs no JVM start (the job checks
    # again, and records them).
    processors.check(resolve(config.output), processor, config.schema_document)
    console = Console()
    publisher = make_publisher(
        PublisherKind(args.metrics),
        environment=args.environment,
        region=args.region,
        write=console.line,
        job=args.job,
    )
    committer = _group_committer(args)  # a refused group costs no JVM start
    location = resolve(args.output)
    # A job holding the output refuses this one before a JVM starts; so does a
    # checkpoint that is not there beside an output that holds batches (a typo?).
    gone = fencing.refuse_if_held(location, console.line)
    if options.missing_locally(args.checkpoint):
        guard.refuse_missing_checkpoint(args.output, args.checkpoint)
    spark = spark_session(
        args.master,
        notice=console.line,
        while_launching=lambda: table_catalog.import_modules(location),
        data_sources=True,
    )
    display = ProgressDisplay(
        console, to_the_end=config.trigger.kind is job.TriggerKind.AVAILABLE_NOW
    )
    listener = MetricsListener(publisher, [display.on_metrics] + ([committer] if committer else []))
    finished = False
    try:
        job.run(
            spark,
            config,
            display.on_report,
            processor=processor,
            listener=listener,
            notice=console.line,
            gone=gone,
        )
        finished = True
    finally:
        stats = publisher.close()  # bounded: what CloudWatch does not take in time is dropped
        display.finish(publisher.description, stats, finished=finished)
        if committer is not None:
            group = committer.close()
            console.line(
                f"consumer group {committer.group}: {group.committed} of {group.requested} "
                f"commits acknowledged, {group.failed} failed"
            )
    return 0


def _source(args: argparse.Namespace) -> Source:
    """The job's source: Kafka, the archive, or both; every option of it checked."""
    from app.spark import job

    if not args.archive and not args.bootstrap_servers:
        raise ConfigurationError(
            "give --bootstrap-servers (Kafka), --archive (the raw archive), or both (Kafka, "
            "and the archive for the offsets Kafka no longer holds)"
        )
    for given, name in (
        (args.kafka_client_rack, "--kafka-client-rack"),
        (args.kafka_option, "--kafka-option"),
        (args.kafka_secret_arn, "--kafka-secret-arn"),
    ):
        if given and not args.bootstrap_servers:
            raise ConfigurationError(f"{name} needs --bootstrap-servers")
    if args.archive:
        archive.require_root(args.archive)  # a typo stops here, before anything is created
    if not args.bootstrap_servers:
        return job.ArchiveSource(args.archive)
    timeout_s = options.kafka_timeout(args)
    kafka = job.KafkaSource(
        options.endpoint(args), timeout_s, Isolation(args.kafka_isolation_level)
    )
    kafka.endpoint.config()  # IAM without its signer or region fails here, before Spark
    # Both: Kafka, and the archive for the offsets Kafka no longer holds.
    return job.TieredSource(kafka, job.ArchiveSource(args.archive)) if args.archive else kafka


def _starting(args: argparse.Namespace) -> StartingPosition:
    """``--starting-offsets``; a time needs Kafka (the archive has no index by time)."""
    starting = StartingPosition.parse(args.starting_offsets)
    if starting.kind is StartKind.TIMESTAMP and not args.bootstrap_servers:
        raise ConfigurationError(TIME_NEEDS_KAFKA)
    return starting


def _group_committer(args: argparse.Namespace) -> GroupCommitter | None:
    """``--consumer-group``: the observer that commits offsets, or None."""
    if args.consumer_group is None:
        return None
    if not args.bootstrap_servers:
        raise ConfigurationError("--consumer-group needs a Kafka source (--bootstrap-servers)")
    if not args.consumer_group.startswith(handoff.CONSUMER_GROUP_PREFIX):
        # The nodes' IAM role may describe and alter only these groups (infra/).
        raise ConfigurationError(
            f"--consumer-group {args.consumer_group!r} must start with "
            f"{handoff.CONSUMER_GROUP_PREFIX!r} "
            "(the only groups the cluster's IAM role may commit to)"
        )
    from app.metrics.consumer_group import GroupCommitter

    return GroupCommitter(args.consumer_group, options.endpoint(args).config())
