"""Deployment settings: what an operator owns per environment, read from a TOML file.

``infra/config/environments.py`` says what each environment *is* (its shape:
zones, sizes, retention). What ties it to one AWS account and one team (the
account, who is paged, where Terraform keeps its state, which image the nodes
run, which networks may produce) is the operator's, and lives outside the
code in a file named by ``$TABLECAST_SETTINGS``, one table per environment::

    [prod]
    account_id = "111122223333"
    alarm_endpoints = ["oncall@company.net", "arn:aws:sns:eu-west-1:111122223333:pager"]
    spark_image_id = "ami-0123456789abcdef0"
    state_backend = { bucket = "company-terraform-state" }

``infra/settings/testing.toml`` holds throwaway values for the tests and for
``make synth`` on a fresh clone; its account ``000000000000`` makes any plan
against a real account fail (the provider's ``allowed_account_ids``).
"""

import ipaddress
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from infra.config.errors import ConfigError
from infra.config.jobs import JobSettings, parse_jobs

SETTINGS_VARIABLE = "TABLECAST_SETTINGS"
"""Environment variable naming the operator's settings file."""
TESTING_SETTINGS = Path(__file__).resolve().parents[1] / "settings" / "testing.toml"
"""Throwaway settings for tests and CI: never deployable (account ``000000000000``)."""
TEST_PIPELINES_TABLE = "test_pipelines"
"""The table that declares test pipelines rather than an environment's settings."""
HOW_TO_SUPPLY = (
    f"set {SETTINGS_VARIABLE} to a TOML file with a [{{environment}}] table "
    "(account_id, alarm_endpoints, state_backend, spark_image_id; see docs/infra.md, "
    "'Deployment settings')"
)

_ACCOUNT = re.compile(r"^\d{12}$")
_IMAGE = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
_ZONE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$")
_TOPIC_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:sns:[a-z]{2}(-[a-z]+)+-\d:\d{12}:[A-Za-z0-9_-]{1,256}$"
)
_ROLE_OR_ROOT_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:(root|role/[\w+=,.@/-]{1,512})$")
_EMAIL = re.compile(r"^[^@\s]+@([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+)$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KEY_PREFIX = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
_NETWORK_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_ROUTE_TARGET = re.compile(r"^(pcx|tgw)-[0-9a-f]{8,17}$")
# RFC 2606 and RFC 6761: names that can never reach a person.
_RESERVED_TLDS = frozenset({"example", "invalid", "localhost", "test", "local"})
_RESERVED_DOMAINS = frozenset({"example.com", "example.net", "example.org"})


class EndpointKind(StrEnum):
    """How the alarm topic reaches a person."""

    EMAIL = "email"
    """An SNS email subscription (confirmed by its owner before it receives anything)."""
    HTTPS = "https"
    """An SNS HTTPS subscription, e.g. an incident tool's integration URL."""
    TOPIC = "sns-topic"
    """An existing SNS topic (a pager's or the account's): alarms also publish to it."""


@dataclass(frozen=True, kw_only=True)
class AlarmEndpoint:
    """One place the environment's alarms go."""

    kind: EndpointKind
    address: str
    """The email address, the HTTPS URL or the topic ARN."""


@dataclass(frozen=True, kw_only=True)
class StateBackend:
    """Where Terraform keeps this environment's state: S3 with S3's own lock file."""

    bucket: str
    """An existing, versioned, encrypted bucket."""
    region: str | None = None
    """The bucket's region; the environment's when unset."""
    key_prefix: str = "tablecast"
    """State of stack ``<component>`` is ``<key_prefix>/<env>/<component>.tfstate``."""


@dataclass(frozen=True, kw_only=True)
class ProducerNetwork:
    """A private network whose producers may reach the brokers (Kafka over TLS with IAM)."""

    name: str
    """Short name, in resource names: 1-31 of ``a-z0-9-``."""
    cidr: str
    """The producers' private IPv4 range; must not overlap the environment's VPC."""
    via: str
    """How packets come back: an accepted VPC peering (``pcx-...``) or a transit gateway
    (``tgw-...``, which the network stack attaches to the broker subnets)."""


@dataclass(frozen=True, kw_only=True)
class DeploymentSettings:
    """The operator's settings of one environment."""

    account_id: str
    """The only AWS account the stacks may be applied to (the provider refuses others)."""
    spark_image_id: str
    """The Spark node image (``ami-...``, built by ami/). Changing it replaces no node by
    itself: nodes are rolled one at a time (docs/infra.md, 'Rolling the nodes')."""
    alarm_endpoints: tuple[AlarmEndpoint, ...] = ()
    """Where alarms go; at least one for a shared environment."""
    state_backend: StateBackend | None = None
    """Remote state; required for a shared environment, absent for a throwaway one."""
    producer_networks: tuple[ProducerNetwork, ...] = ()
    """Networks whose producers reach the brokers, besides the Spark nodes."""
    topic_admin_principals: tuple[str, ...] = ()
    """IAM roles (or account roots) that may assume the topic-administration role;
    the environment's own account root when empty (then IAM policies decide)."""
    spark_zone: str | None = None
    """The zone of the Spark nodes, one of the environment's broker zones (its first when
    unset). Every broker zone has a Spark subnet ready: moving Spark after losing its
    zone changes this setting and no broker (docs/infra.md, 'What a failure costs')."""
    jobs: tuple[JobSettings, ...] = ()
    """The environment's jobs by name (``[<env>.jobs.<name>]``, infra/config/jobs.py); none:
    the one job of an environment without jobs."""
    source: str = "<code>"
    """The file these came from, for messages."""


def alarm_endpoint(text: str) -> AlarmEndpoint:
    """Parse one endpoint: an email address, an ``https://`` URL or an SNS topic ARN.

    Raises ``ValueError`` saying why ``text`` reaches nobody.
    """
    if text.startswith("arn:"):
        if not _TOPIC_ARN.match(text):
            raise ValueError(f"{text!r} is not an SNS topic ARN")
        return AlarmEndpoint(kind=EndpointKind.TOPIC, address=text)
    if text.startswith(("https://", "http://")):
        parts = urlsplit(text)
        if parts.scheme != "https":
            raise ValueError(f"{text!r}: alarms are sent over HTTPS only")
        host = parts.hostname or ""
        _refuse_reserved(text, host)
        return AlarmEndpoint(kind=EndpointKind.HTTPS, address=text)
    match = _EMAIL.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an email address, an https:// URL or an SNS topic ARN")
    _refuse_reserved(text, match.group(1))
    return AlarmEndpoint(kind=EndpointKind.EMAIL, address=text)


def reserved_domain(host: str) -> bool:
    """Whether ``host`` is a documentation or reserved name no mail or request ever reaches."""
    labels = host.lower().rstrip(".").split(".")
    if not labels or labels[-1] in _RESERVED_TLDS:
        return True
    if len(labels) >= 2 and ".".join(labels[-2:]) in _RESERVED_DOMAINS:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not address.is_global


def _refuse_reserved(text: str, host: str) -> None:
    if reserved_domain(host):
        raise ValueError(f"{text!r} is a reserved or example domain: it reaches nobody")


def load_settings(path: Path) -> dict[str, DeploymentSettings]:
    """Every environment's settings in ``path``, by environment name.

    Raises ``ConfigError`` naming the file, the environment and the key that is wrong.
    """
    document = read_document(path)
    return {
        name: parse_settings(name, table, source=str(path))
        for name, table in document.items()
        # Test pipelines are declared under their own table (infra/config/test_pipelines.py).
        if isinstance(table, dict) and name != TEST_PIPELINES_TABLE
    }


def read_document(path: Path) -> dict[str, Any]:
    """The settings file as TOML; ``ConfigError`` when it is missing or not TOML."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(
            environment="*", field=SETTINGS_VARIABLE, problem=f"{path} does not exist"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            environment="*", field=SETTINGS_VARIABLE, problem=f"{path} is not TOML: {exc}"
        ) from None


def parse_settings(
    environment: str, table: Mapping[str, Any], *, source: str
) -> DeploymentSettings:
    """One environment's table, checked key by key."""
    reader = _Reader(environment, table, source)
    settings = DeploymentSettings(
        account_id=reader.text("account_id", _ACCOUNT, "is not a 12-digit AWS account id"),
        spark_image_id=reader.text("spark_image_id", _IMAGE, "is not an image id (ami-...)"),
        alarm_endpoints=reader.endpoints(),
        state_backend=reader.backend(),
        producer_networks=reader.networks(),
        topic_admin_principals=reader.principals(),
        spark_zone=reader.optional_text("spark_zone", _ZONE, "is not an availability zone name"),
        jobs=parse_jobs(environment, table.get("jobs", {}), source=source),
        source=source,
    )
    reader.no_unknown_keys()
    return settings


class _Reader:
    """Reads one table's keys, raising ``ConfigError`` with the file and key."""

    KNOWN = frozenset(
        {
            "account_id",
            "spark_image_id",
            "alarm_endpoints",
            "state_backend",
            "producer_networks",
            "topic_admin_principals",
            "spark_zone",
            "jobs",
        }
    )

    def __init__(self, environment: str, table: Mapping[str, Any], source: str) -> None:
        self.environment = environment
        self.table = table
        self.source = source

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(
            environment=self.environment, field=f"{key} (in {self.source})", problem=problem
        )

    def text(self, key: str, pattern: re.Pattern[str], problem: str) -> str:
        value = self.table.get(key)
        if value is None:
            raise self.fail(key, "is missing")
        if not isinstance(value, str) or not pattern.match(value):
            raise self.fail(key, f"{value!r} {problem}")
        return value

    def optional_text(self, key: str, pattern: re.Pattern[str], problem: str) -> str | None:
        return None if self.table.get(key) is None else self.text(key, pattern, problem)

    def strings(self, key: str) -> list[str]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(key, "must be a list of strings")
        return list(value)

    def endpoints(self) -> tuple[AlarmEndpoint, ...]:
        found = []
        for text in self.strings("alarm_endpoints"):
            try:
                found.append(alarm_endpoint(text))
            except ValueError as exc:
                raise self.fail("alarm_endpoints", str(exc)) from None
        return tuple(found)

    def backend(self) -> StateBackend | None:
        value = self.table.get("state_backend")
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) - {"bucket", "region", "key_prefix"}:
            raise self.fail("state_backend", "must be a table of bucket, region, key_prefix")
        bucket = value.get("bucket")
        if not isinstance(bucket, str) or not _BUCKET.match(bucket):
            raise self.fail("state_backend", f"bucket {bucket!r} is not an S3 bucket name")
        region = value.get("region")
        if region is not None and not isinstance(region, str):
            raise self.fail("state_backend", "region must be a string")
        prefix = value.get("key_prefix", "tablecast")
        if not isinstance(prefix, str) or not re.fullmatch(
            r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", prefix
        ):
            raise self.fail("state_backend", f"key_prefix {prefix!r} is not an S3 key prefix")
        return StateBackend(bucket=bucket, region=region, key_prefix=prefix)

    def networks(self) -> tuple[ProducerNetwork, ...]:
        value = self.table.get("producer_networks", [])
        if not isinstance(value, list):
            raise self.fail("producer_networks", "must be a list of tables")
        networks = []
        for entry in value:
            if not isinstance(entry, dict) or set(entry) != {"name", "cidr", "via"}:
                raise self.fail("producer_networks", "each needs exactly name, cidr and via")
            name, cidr, via = entry["name"], entry["cidr"], entry["via"]
            if not isinstance(name, str) or not _NETWORK_NAME.match(name):
                raise self.fail("producer_networks", f"name {name!r} is not 1-31 of a-z0-9-")
            if not isinstance(via, str) or not _ROUTE_TARGET.match(via):
                raise self.fail(
                    "producer_networks", f"{name}: via {via!r} is not a pcx-... or tgw-... id"
                )
            if not isinstance(cidr, str):
                raise self.fail("producer_networks", f"{name}: cidr must be a string")
            networks.append(ProducerNetwork(name=name, cidr=cidr, via=via))
        return tuple(networks)

    def principals(self) -> tuple[str, ...]:
        principals = self.strings("topic_admin_principals")
        for arn in principals:
            if not _ROLE_OR_ROOT_ARN.match(arn):
                raise self.fail("topic_admin_principals", f"{arn!r} is not an IAM role or root ARN")
        return tuple(principals)

    def no_unknown_keys(self) -> None:
        unknown = sorted(set(self.table) - self.KNOWN)
        if unknown:
            raise self.fail(
                unknown[0], f"is not a setting (known: {', '.join(sorted(self.KNOWN))})"
            )
