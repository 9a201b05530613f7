"""An environment's hand-off: the SSM parameters ``infra/`` writes, read by every tool.

``infra/`` writes ``/tablecast/<env>/<name>`` for each name of
:mod:`app.handoff`; the tools find brokers, buckets, the driver and the
topic policy there, and nowhere else (MSK's bootstrap brokers in particular
come from SSM, not from the MSK API). The deploy tool writes two parameters
back: ``job-wheel-sha256`` and ``job-version``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

import orjson

from app import handoff
from app.errors import ConfigurationError
from app.ops.errors import HandoffError
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint, parse_option

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ssm import SSMClient

E = TypeVar("E", bound=StrEnum)
_LIVE_STATES = ("pending", "running", "stopping", "stopped")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENVIRONMENT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# What run-job accepts as a version (ami/files/bin/run-job); shell-safe too.
VERSION_PATTERN = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$")


def check_environment_name(environment: str) -> str:
    if not _ENVIRONMENT_NAME.match(environment):
        raise ConfigurationError(
            f"environment {environment!r} is not an environment name (lower case, digits, -)"
        )
    return environment


@dataclass(frozen=True, slots=True)
class Handoff:
    """The parameters found under ``/tablecast/<environment>/``, by short name."""

    environment: str
    values: Mapping[str, str]

    def value(self, name: str) -> str:
        """The parameter's value; :class:`HandoffError` when it is missing or empty."""
        found = self.values.get(name, "")
        if not found:
            raise HandoffError(
                self.environment, name, "missing or empty (has infra/ been applied?)"
            )
        return found

    def integer(self, name: str) -> int:
        text = self.value(name)
        if not text.isdigit():
            raise HandoffError(self.environment, name, f"{text!r} is not a whole number")
        return int(text)

    def s3_uri(self, name: str) -> str:
        uri = self.value(name).rstrip("/")
        if not uri.startswith("s3://") or len(uri) <= len("s3://"):
            raise HandoffError(self.environment, name, f"{uri!r} is not an s3:// URI")
        return uri

    @property
    def bootstrap_brokers(self) -> str:
        return self.value(handoff.BOOTSTRAP_BROKERS_IAM)

    def job_kafka(self) -> tuple[KafkaEndpoint, Isolation]:
        """How the job reads Kafka here (``KAFKA_OPTIONAL``; the job's defaults where unset).

        The endpoint of its sign-in (IAM, or TLS or SCRAM on their own brokers), with
        its client settings, and its isolation level: the archiver reads so too.
        """
        auth = self._choice(handoff.KAFKA_AUTH, KafkaAuth, KafkaAuth.IAM)
        isolation = self._choice(handoff.KAFKA_ISOLATION_LEVEL, Isolation, Isolation.READ_COMMITTED)
        try:
            listed = orjson.loads(self.values.get(handoff.KAFKA_OPTIONS) or "[]")
            options = tuple(parse_option(str(option)) for option in listed)
        except (orjson.JSONDecodeError, TypeError, ConfigurationError) as exc:
            raise HandoffError(
                self.environment, handoff.KAFKA_OPTIONS, f"not a JSON list of key=value: {exc}"
            ) from None
        brokers = {
            KafkaAuth.TLS: handoff.BOOTSTRAP_BROKERS_TLS,
            KafkaAuth.SCRAM: handoff.BOOTSTRAP_BROKERS_SASL_SCRAM,
        }.get(auth, handoff.BOOTSTRAP_BROKERS_IAM)
        endpoint = KafkaEndpoint(
            self.value(brokers),
            auth,
            self.region,
            secret_arn=self.value(handoff.KAFKA_SECRET_ARN) if auth is KafkaAuth.SCRAM else "",
            options=options,
        )
        return endpoint, isolation

    def _choice(self, name: str, kind: type[E], default: E) -> E:
        text = self.values.get(name) or default.value
        try:
            return kind(text)
        except ValueError:
            choices = ", ".join(str(member.value) for member in kind)
            raise HandoffError(
                self.environment, name, f"{text!r} is not one of {choices}"
            ) from None

    @property
    def artifacts_uri(self) -> str:
        return self.s3_uri(handoff.ARTIFACTS_URI)

    @property
    def archive_uri(self) -> str:
        return self.s3_uri(handoff.ARCHIVE_URI)

    @property
    def driver_instance_id(self) -> str:
        return self.value(handoff.DRIVER_INSTANCE_ID)

    @property
    def metric_namespace(self) -> str:
        return self.value(handoff.METRIC_NAMESPACE)

    @property
    def jobs(self) -> tuple[str, ...]:
        """The jobs the deployment settings declare (``jobs``); none: the one job."""
        listed = self.values.get(handoff.JOBS, "")
        return tuple(name for name in listed.split(",") if name)

    @property
    def topic_pattern(self) -> str:
        return self.value(handoff.TOPIC_PATTERN)

    @property
    def job_version(self) -> str:
        """The deployed version; ``none`` until the first deploy."""
        return self.value(handoff.JOB_VERSION)

    @property
    def retention_hours(self) -> int:
        return self.integer(handoff.RETENTION_HOURS)

    @property
    def replication_factor(self) -> int:
        return self.integer(handoff.REPLICATION_FACTOR)

    @property
    def region(self) -> str:
        return self.value(handoff.REGION)

    @property
    def archive_lock_days(self) -> int:
        """Days the archiver locks each file for; 0 where the archive is not locked."""
        return (
            self.integer(handoff.ARCHIVE_LOCK_DAYS)
            if self.values.get(handoff.ARCHIVE_LOCK_DAYS)
            else 0
        )


def find_driver(ec2: EC2Client, found: Handoff) -> str:
    """The driver's instance id: the live instance tagged ``tablecast-<env>-driver``.

    A rolled driver is a new instance; the hand-off's ``driver-instance-id``
    names it only once the handoff stack is applied again, so the tag is asked
    first and the hand-off is the answer only when no tagged instance lives.
    """
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "tag:Name", "Values": [handoff.driver_name(found.environment)]},
            {"Name": "instance-state-name", "Values": list(_LIVE_STATES)},
        ]
    )
    instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    if not instances:
        return found.driver_instance_id
    newest = max(instances, key=lambda instance: instance["LaunchTime"])
    return newest["InstanceId"]


def read_handoff(ssm: SSMClient, environment: str) -> Handoff:
    """Every parameter under ``/tablecast/<environment>/`` (one paginated read)."""
    check_environment_name(environment)
    path = handoff.parameter_name(environment, "")
    values: dict[str, str] = {}
    pages = ssm.get_paginator("get_parameters_by_path").paginate(
        Path=path, Recursive=False, WithDecryption=True
    )
    for page in pages:
        for parameter in page["Parameters"]:
            values[parameter["Name"][len(path) :]] = parameter["Value"]
    if not values:
        raise HandoffError(environment, "*", "no parameters at all: is the environment deployed?")
    return Handoff(environment, values)


def write_job_version(ssm: SSMClient, environment: str, version: str, sha256: str) -> None:
    """Record ``version`` as the job's version, and its wheel's SHA-256.

    run-job installs that version on (re)start, and only a wheel of exactly
    this hash. The hash is written first: a run-job starting in between finds
    the old version with the new hash and refuses it, rather than installing
    the new version unchecked.
    """
    if not VERSION_PATTERN.match(version):
        raise HandoffError(environment, handoff.JOB_VERSION, f"{version!r} is not a version")
    if not _SHA256.match(sha256):
        raise HandoffError(environment, handoff.JOB_WHEEL_SHA256, f"{sha256!r} is not a SHA-256")
    write_handoff(
        ssm, environment, {handoff.JOB_WHEEL_SHA256: sha256, handoff.JOB_VERSION: version}
    )


def write_handoff(ssm: SSMClient, environment: str, values: Mapping[str, str]) -> None:
    """``/tablecast/<environment>/<name>`` for each name and value, in their order."""
    for name, value in values.items():
        ssm.put_parameter(
            Name=handoff.parameter_name(environment, name),
            Value=value,
            Type="String",
            Overwrite=True,
        )


def read_job_handoff(ssm: SSMClient, found: Handoff, job: str) -> Handoff:
    """A declared job's hand-off: its parameters (``/tablecast/<env>/jobs/<job>/``, JOB_ALL)
    over the environment's, as run-job reads them: its topics, output and checkpoint take
    the environment's place, and the environment's explicit ``topics`` (the one job's) go."""
    values = {name: value for name, value in found.values.items() if name != handoff.TOPICS}
    own = job_parameters(ssm, found.environment, job)
    missing = [name for name in handoff.JOB_ALL if not own.get(name)]
    if missing:
        raise HandoffError(
            found.environment,
            f"{handoff.JOBS}/{job}/{missing[0]}",
            "missing or empty (has infra/ been applied since the job was declared?)",
        )
    return Handoff(found.environment, values | own)


def job_parameters(ssm: SSMClient, environment: str, job: str) -> dict[str, str]:
    """The parameters under ``/tablecast/<env>/jobs/<job>/``, by short name, whichever exist."""
    path = handoff.job_parameter_name(environment, job, "")
    pages = ssm.get_paginator("get_parameters_by_path").paginate(
        Path=path, Recursive=False, WithDecryption=True
    )
    return {
        parameter["Name"][len(path) :]: parameter["Value"]
        for page in pages
        for parameter in page["Parameters"]
    }
