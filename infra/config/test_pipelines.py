"""Test pipelines: throwaway environments declared by name in the deployment settings.

A platform team spins one up without editing code. Each is a table under
``[test_pipelines]`` of the settings file (``$TABLECAST_SETTINGS``)::

    [test_pipelines.resync-exp]
    owner = "alice@company.net"          # notified at expiry, and daily after
    purpose = "resync rules on two workers"
    created = 2026-11-23
    expires = 2026-12-07
    spark_worker_count = 2               # the overrides; the rest is the sandbox's shape
    retention_hours = 72
    trigger_interval = "30 seconds"

It has the sandbox's shape (:func:`infra.config.environments.sandbox`) with
those overrides, the ``[sandbox]`` table's account, image and state
backend (which it requires: anyone on the team destroys it from the same
state), the owner added to its alarm endpoints, a VPC range of its own
(:func:`allocate_vpc_cidr`) and none of the sandbox's producer networks (a
peering or a gateway route belongs to one VPC). Its stacks are
``tablecast-<name>-*``, which no other environment's pattern matches.
"""

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

from infra.config.declared import DeclaredPipeline
from infra.config.errors import ConfigError
from infra.config.model import MIN_RETENTION_HOURS, EnvironmentConfig
from infra.config.settings import (
    TEST_PIPELINES_TABLE,
    DeploymentSettings,
    EndpointKind,
    alarm_endpoint,
    read_document,
)

TABLE = TEST_PIPELINES_TABLE
"""The settings file's table of test pipelines, one sub-table per name."""
BASE = "sandbox"
"""Every test pipeline has this environment's shape and settings."""
POOL = ipaddress.IPv4Network("10.96.0.0/11")
"""Test pipelines' VPCs come from here: no fixed environment (10.40-10.49) is in it."""
SLOT_PREFIX = 20
"""Each test pipeline's VPC is a /20 of the pool (subnets of /24)."""
MAX_LIFETIME_DAYS = 90
"""A test pipeline is declared for at most this long; re-declare it to keep it."""
OVERRIDES: Mapping[str, type] = {
    "spark_worker_count": int,
    "spark_worker_instance_type": str,
    "driver_instance_type": str,
    "broker_instance_type": str,
    "retention_hours": int,
    "trigger_interval": str,
    "vpc_cidr": str,
}
"""What a declaration may change of the sandbox's shape."""
_REQUIRED = ("owner", "purpose", "created", "expires")
# AWS tag values: letters, digits, spaces and _ . : / = + - @ only.
_TAG_VALUE = re.compile(r"^[A-Za-z0-9 _.:/=+@-]{1,200}$")


@dataclass(frozen=True, kw_only=True)
class PipelineTable:
    """One ``[test_pipelines.<name>]`` table, read and checked key by key."""

    name: str
    declared: DeclaredPipeline
    overrides: Mapping[str, Any]


def destroy_command(name: str) -> str:
    """The one command that destroys a test pipeline (docs/operations.md, 'Test pipelines')."""
    return f"npx cdktf-cli@0.21.0 destroy 'tablecast-{name}-*'"


def allocate_vpc_cidr(name: str) -> str:
    """The pipeline's /20 of :data:`POOL`, chosen by a hash of its name.

    Deterministic and independent of every other declaration: declaring or
    removing one pipeline never moves another's network. Two names that land
    on the same slot are refused by :func:`check_no_overlap` (give one a
    ``vpc_cidr``).
    """
    slots = list(POOL.subnets(new_prefix=SLOT_PREFIX))
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return str(slots[int.from_bytes(digest[:4], "big") % len(slots)])


def load_test_pipelines(path: Path) -> list[PipelineTable]:
    """Every test pipeline declared in the settings file ``path`` (none without the table)."""
    document = read_document(path)
    tables = document.get(TABLE, {})
    if not isinstance(tables, dict):
        raise ConfigError(environment="*", field=f"{TABLE} (in {path})", problem="must be a table")
    return [parse_pipeline(name, table, source=str(path)) for name, table in tables.items()]


def parse_pipeline(name: str, table: Any, *, source: str) -> PipelineTable:
    """One declaration, every key checked; ``ConfigError`` names the file and the key."""

    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(environment=name, field=f"{key} (in {source})", problem=problem)

    if not isinstance(table, dict):
        raise fail(f"{TABLE}.{name}", "must be a table")
    for key in _REQUIRED:
        if key not in table:
            raise fail(key, "is missing (a test pipeline needs owner, purpose, created, expires)")
    unknown = sorted(set(table) - set(_REQUIRED) - set(OVERRIDES))
    if unknown:
        known = ", ".join([*_REQUIRED, *OVERRIDES])
        raise fail(unknown[0], f"is not a test pipeline setting (known: {known})")
    try:
        owner = alarm_endpoint(str(table["owner"]))
    except ValueError as exc:
        raise fail("owner", str(exc)) from None
    if owner.kind is EndpointKind.TOPIC:
        raise fail("owner", "must be an email address or an https:// URL to subscribe")
    purpose = table["purpose"]
    if not isinstance(purpose, str) or not _TAG_VALUE.match(purpose):
        raise fail("purpose", f"{purpose!r} must be 1-200 of letters, digits, spaces, _.:/=+-@")
    created, expires = table["created"], table["expires"]
    for key, value in (("created", created), ("expires", expires)):
        if type(value) is not date:
            raise fail(key, f"{value!r} is not a date (write it bare: {key} = 2026-12-01)")
    if expires <= created:
        raise fail("expires", f"{expires} is not after created {created}")
    if (expires - created).days > MAX_LIFETIME_DAYS:
        raise fail(
            "expires",
            f"{expires} is {(expires - created).days} days after created {created}: "
            f"at most {MAX_LIFETIME_DAYS} (declare it again to keep it longer)",
        )
    overrides = {key: table[key] for key in OVERRIDES if key in table}
    for key, value in overrides.items():
        wanted = OVERRIDES[key]
        if type(value) is not wanted:
            raise fail(key, f"{value!r} must be {'an integer' if wanted is int else 'a string'}")
    retention = overrides.get("retention_hours")
    if retention is not None and retention < MIN_RETENTION_HOURS:
        raise fail(
            "retention_hours", f"{retention} is under the minimum of {MIN_RETENTION_HOURS} hours"
        )
    declared = DeclaredPipeline(
        owner=owner, purpose=purpose, created=created, expires=expires, source=source
    )
    return PipelineTable(name=name, declared=declared, overrides=overrides)


def pipeline_config(
    table: PipelineTable, settings: Mapping[str, DeploymentSettings]
) -> EnvironmentConfig:
    """The pipeline's environment: the sandbox's shape and settings, with its overrides."""
    from infra.config.environments import ENVIRONMENTS

    source = table.declared.source
    if table.name in ENVIRONMENTS:
        raise ConfigError(
            environment=table.name,
            field=f"{TABLE}.{table.name} (in {source})",
            problem="is the name of a fixed environment: choose another",
        )
    base_settings = settings.get(BASE)
    if base_settings is None:
        raise ConfigError(
            environment=table.name,
            field=f"deployment settings (in {source})",
            problem=f"a test pipeline takes the [{BASE}] table's account and image: add one",
        )
    if base_settings.state_backend is None:
        raise ConfigError(
            environment=table.name,
            field=f"state_backend (in {source})",
            problem=f"a test pipeline keeps its Terraform state in S3, so that its team, not "
            f"one checkout, can change and destroy it: give the [{BASE}] table a "
            "state_backend",
        )
    deployment = replace(
        base_settings,
        alarm_endpoints=(*base_settings.alarm_endpoints, table.declared.owner),
        # A route back through a peering or a gateway belongs to the sandbox's VPC.
        producer_networks=(),
        source=source,
    )
    base = ENVIRONMENTS[BASE](deployment)
    values: dict[str, Any] = {"vpc_cidr": allocate_vpc_cidr(table.name), **table.overrides}
    return replace(base, name=table.name, test_pipeline=table.declared, **values)


def check_no_overlap(
    pipelines: Sequence[EnvironmentConfig], environments: Sequence[EnvironmentConfig]
) -> None:
    """Refuse, in one line, a test pipeline whose VPC overlaps another's or an environment's,
    or whose stacks another's ``tablecast-<name>-*`` would match."""
    check_stack_patterns(pipelines, environments)
    seen: list[EnvironmentConfig] = list(environments)
    for config in pipelines:
        network = ipaddress.IPv4Network(config.vpc_cidr)
        for other in seen:
            if network.overlaps(ipaddress.IPv4Network(other.vpc_cidr)):
                kind = "test pipeline" if other.test_pipeline is not None else "environment"
                source = config.test_pipeline.source if config.test_pipeline else "<code>"
                raise ConfigError(
                    environment=config.name,
                    field=f"vpc_cidr (in {source})",
                    problem=f"{config.vpc_cidr} overlaps {kind} {other.name!r}'s "
                    f"{other.vpc_cidr}: give one of them another vpc_cidr (a /20 of {POOL})",
                )
        seen.append(config)


def check_stack_patterns(
    pipelines: Sequence[EnvironmentConfig], environments: Sequence[EnvironmentConfig]
) -> None:
    """Refuse a test pipeline named ``<other>-...`` for any environment or test pipeline
    ``<other>``: the documented ``deploy 'tablecast-<other>-*'`` and ``destroy
    'tablecast-<other>-*'`` would take its stacks too (``prod-x`` under ``prod``)."""
    from infra.config.environments import ENVIRONMENTS

    names = {*ENVIRONMENTS, *(c.name for c in environments), *(c.name for c in pipelines)}
    for config in pipelines:
        for other in sorted(names - {config.name}):
            if config.name.startswith(f"{other}-"):
                source = config.test_pipeline.source if config.test_pipeline else "<code>"
                raise ConfigError(
                    environment=config.name,
                    field=f"{TABLE}.{config.name} (in {source})",
                    problem=f"starts with {other!r} and '-': {destroy_command(other)} would "
                    "destroy its stacks too; choose a name that does not",
                )


def pipeline_configs(
    path: Path,
    settings: Mapping[str, DeploymentSettings],
    environments: Sequence[EnvironmentConfig] = (),
) -> list[EnvironmentConfig]:
    """Every test pipeline declared in ``path``, checked against ``environments`` and each other."""
    configs = [pipeline_config(table, settings) for table in load_test_pipelines(path)]
    check_no_overlap(configs, environments)
    return configs
