"""``tablecast-ops pipelines``: every test pipeline declared or deployed: age, expiry, owner,
cost, and the deployed ones nobody declares any more.

Test pipelines are declared in the deployment settings (``$TABLECAST_SETTINGS``,
``[test_pipelines.<name>]``; see ``infra/config/test_pipelines.py``). The cost
is an estimate per hour from the instance, broker, volume and VPC endpoint
counts of its configuration and the price table ``infra/prices.toml`` (its date
is printed). What is deployed is what the account's resources say: every
resource of a test pipeline carries the tags ``TestPipeline=true`` and
``Environment=<name>`` (the Resource Groups Tagging API finds them), so a
pipeline whose declaration was removed and whose stacks were not destroyed is
listed as an orphan, with what it runs. Runs from a checkout: it reads
``infra/``'s configuration. ``infra/`` imports ``app/``, so nothing here
imports ``infra/``: the caller passes in :class:`Declarations`, infra's
reading of the settings (:func:`infra.config.pipeline_listing.declarations`
makes it; ``scripts/tablecast_ops.py`` and the tests pass it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import ConfigurationError
from app.ops.processors import JobProcessor

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_resourcegroupstaggingapi import ResourceGroupsTaggingAPIClient

PRICES = Path(__file__).resolve().parents[2] / "infra" / "prices.toml"
HOURS_PER_MONTH = 730  # AWS prices storage per GiB-month of 730 hours
# The tags infra puts on every resource of a test pipeline (infra/config/declared.py, and
# the provider's Environment): how the account's resources name their pipeline.
TEST_PIPELINE_TAG = "TestPipeline"
ENVIRONMENT_TAG = "Environment"
OWNER_TAG = "Owner"
EXPIRES_TAG = "Expires"
PURPOSE_TAG = "Purpose"


class PriceTableError(ConfigurationError):
    """The price table lacks a type a pipeline uses, or is malformed."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"price table {path}: {problem}", path=str(path))


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    """On-demand prices of one region, as of one date."""

    as_of: date
    region: str
    currency: str
    ec2_per_hour: Mapping[str, float]
    msk_broker_per_hour: Mapping[str, float]
    msk_storage_per_gib_month: float
    ebs_per_gib_month: float
    interface_endpoint_per_az_hour: float
    path: Path

    def ec2(self, instance_type: str) -> float:
        return self._price(self.ec2_per_hour, instance_type, "ec2_per_hour")

    def broker(self, instance_type: str) -> float:
        return self._price(self.msk_broker_per_hour, instance_type, "msk_broker_per_hour")

    def _price(self, table: Mapping[str, float], instance_type: str, name: str) -> float:
        if instance_type not in table:
            raise PriceTableError(self.path, f"no price for {instance_type} in [{name}]: add it")
        return table[instance_type]


def load_prices(path: Path = PRICES) -> PriceTable:
    """The price table; :class:`PriceTableError` naming what is missing or wrong."""
    try:
        doc: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PriceTableError(path, str(exc)) from None
    try:
        storage = doc["storage_per_gib_month"]
        table = PriceTable(
            as_of=doc["as_of"],
            region=str(doc["region"]),
            currency=str(doc["currency"]),
            ec2_per_hour={k: float(v) for k, v in doc["ec2_per_hour"].items()},
            msk_broker_per_hour={k: float(v) for k, v in doc["msk_broker_per_hour"].items()},
            msk_storage_per_gib_month=float(storage["msk"]),
            ebs_per_gib_month=float(storage["ebs_gp3"]),
            interface_endpoint_per_az_hour=float(doc["vpc"]["interface_endpoint_per_az_hour"]),
            path=path,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PriceTableError(path, f"malformed ({exc!r})") from None
    if type(table.as_of) is not date:
        raise PriceTableError(path, f"as_of {table.as_of!r} is not a date")
    return table


@dataclass(frozen=True, kw_only=True)
class Footprint:
    """What a pipeline's configuration runs and stores on: the terms of its cost."""

    region: str
    driver_instance_type: str
    worker_instance_type: str
    worker_count: int
    broker_instance_type: str
    broker_count: int
    broker_volume_gib: int
    """Each broker's storage."""
    node_volume_gib: int
    """Each node's EBS volumes together: its root and its Spark data volume."""
    interface_endpoint_zones: int
    """Interface endpoints times the zones each sits in: what PrivateLink bills by the hour."""


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """One test pipeline the deployment settings declare, as infra configures it."""

    name: str
    owner: str
    purpose: str
    created: date
    expires: date
    footprint: Footprint


@dataclass(frozen=True, kw_only=True)
class Declarations:
    """infra's reading of a settings file: the test pipelines it declares, and (for the
    deploy) an environment's jobs' processors."""

    read: Callable[[Path], Sequence[Declaration]]
    """Every test pipeline the settings file declares; :class:`ConfigurationError` if invalid."""
    destroy_command: Callable[[str], str]
    """The one command that destroys the named test pipeline."""
    settings_variable: str
    """The environment variable that names the deployment settings."""
    job_processors: Callable[[Path, str], Sequence[JobProcessor]] | None = None
    """Each job the settings file declares in the named environment, its processor and
    integrity class; :class:`ConfigurationError` if the file is invalid."""


def hourly_cost(footprint: Footprint, prices: PriceTable) -> float:
    """Estimated on-demand cost per hour: nodes, brokers, their storage, VPC endpoints."""
    if footprint.region != prices.region:
        raise PriceTableError(
            prices.path, f"prices are for {prices.region}, not {footprint.region}"
        )
    nodes = footprint.worker_count + 1
    compute = prices.ec2(footprint.driver_instance_type) + footprint.worker_count * prices.ec2(
        footprint.worker_instance_type
    )
    brokers = footprint.broker_count * prices.broker(footprint.broker_instance_type)
    msk_gib = footprint.broker_count * footprint.broker_volume_gib
    ebs_gib = nodes * footprint.node_volume_gib
    storage = (
        msk_gib * prices.msk_storage_per_gib_month + ebs_gib * prices.ebs_per_gib_month
    ) / HOURS_PER_MONTH
    endpoints = footprint.interface_endpoint_zones * prices.interface_endpoint_per_az_hour
    return compute + brokers + storage + endpoints


@dataclass(frozen=True, kw_only=True)
class Deployed:
    """A test pipeline as the account's resources show it, by their tags."""

    name: str
    resources: int
    services: tuple[str, ...]
    """The services its resources belong to (``ec2``, ``kafka``, ``s3``, ...)."""
    owner: str
    expires: str
    purpose: str


# What a test pipeline runs and pays for by the hour: what "deployed" counts. (The
# tagging API also lists what is gone but still tagged a while, such as KMS keys
# pending deletion; terminated instances are dropped by their state.)
RUNNING_TYPES = (
    "ec2:instance",
    "ec2:volume",
    "ec2:vpc",
    "ec2:vpc-endpoint",
    "ec2:natgateway",
    "kafka:cluster",
)
_GONE = ("shutting-down", "terminated")


def deployed_pipelines(
    tagging: ResourceGroupsTaggingAPIClient, ec2: EC2Client
) -> dict[str, Deployed]:
    """Every test pipeline with running resources in the account and region, by name."""
    found: dict[str, list[dict[str, str]]] = {}
    services: dict[str, set[str]] = {}
    pages = tagging.get_paginator("get_resources").paginate(
        TagFilters=[{"Key": TEST_PIPELINE_TAG, "Values": ["true"]}],
        ResourceTypeFilters=list(RUNNING_TYPES),
    )
    mappings = [resource for page in pages for resource in page["ResourceTagMappingList"]]
    gone = _gone_instances(
        ec2,
        [m["ResourceARN"].rsplit("/", 1)[1] for m in mappings if ":instance/" in m["ResourceARN"]],
    )
    for resource in mappings:
        if resource["ResourceARN"].rsplit("/", 1)[1] in gone:
            continue
        tags = {tag["Key"]: tag["Value"] for tag in resource.get("Tags", [])}
        name = tags.get(ENVIRONMENT_TAG, "?")
        found.setdefault(name, []).append(tags)
        services.setdefault(name, set()).add(resource["ResourceARN"].split(":")[2])
    return {
        name: Deployed(
            name=name,
            resources=len(tagged),
            services=tuple(sorted(services[name])),
            owner=_most(tagged, OWNER_TAG),
            expires=_most(tagged, EXPIRES_TAG),
            purpose=_most(tagged, PURPOSE_TAG),
        )
        for name, tagged in found.items()
    }


def _gone_instances(ec2: EC2Client, instance_ids: Sequence[str]) -> set[str]:
    if not instance_ids:
        return set()
    pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=list(instance_ids))
    return {
        instance["InstanceId"]
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] in _GONE
    }


def _most(tagged: Sequence[Mapping[str, str]], key: str) -> str:
    values = [tags[key] for tags in tagged if key in tags]
    return max(set(values), key=values.count) if values else "?"


def deployed(region: str | None) -> dict[str, Deployed]:
    """What the account runs of test pipelines, with the caller's credentials."""
    import boto3

    session = boto3.session.Session(region_name=region)
    return deployed_pipelines(session.client("resourcegroupstaggingapi"), session.client("ec2"))


@dataclass(frozen=True, kw_only=True)
class PipelineRow:
    """One declared test pipeline as the listing shows it."""

    name: str
    owner: str
    purpose: str
    created: date
    expires: date
    age_days: int
    hourly_cost: float
    deployed: Deployed | None = None

    def expiry(self, today: date) -> str:
        days = (self.expires - today).days
        if days > 0:
            return f"{self.expires} (in {days} d)"
        return f"{self.expires} (EXPIRED {-days} d ago)" if days else f"{self.expires} (today)"


@dataclass(frozen=True, kw_only=True)
class PipelineListing:
    rows: Sequence[PipelineRow]
    today: date
    prices: PriceTable
    settings: Path
    orphans: Sequence[Deployed] = ()
    """Deployed test pipelines the settings do not declare."""
    looked_up: bool = True
    """Whether the account was asked what is deployed (not with ``--declared-only``)."""

    def _deployed(self, row: PipelineRow) -> str:
        if not self.looked_up:
            return "not asked"
        return f"{row.deployed.resources} resources" if row.deployed else "no"

    def lines(self) -> list[str]:
        if not self.rows and not self.orphans:
            return [f"no test pipelines declared in {self.settings}"]
        header = (
            "name",
            "owner",
            "age",
            "expires",
            f"{self.prices.currency}/h",
            "deployed",
            "purpose",
        )
        table = [header] + [
            (
                row.name,
                row.owner,
                f"{row.age_days} d",
                row.expiry(self.today),
                f"{row.hourly_cost:.2f}",
                self._deployed(row),
                row.purpose,
            )
            for row in self.rows
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
        out = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False))
            + "  "
            + line[-1]
            for line in table
        ]
        total = sum(row.hourly_cost for row in self.rows)
        out.append(
            f"{len(self.rows)} test pipeline(s), about {total:.2f} {self.prices.currency}/h "
            f"together (on-demand, {self.prices.region}, prices as of {self.prices.as_of}, "
            f"{self.prices.path.name})"
        )
        out += [
            f"ORPHAN {orphan.name}: deployed, not declared in {self.settings.name}: "
            f"{orphan.resources} resources ({', '.join(orphan.services)}), owner "
            f"{orphan.owner}, expired {orphan.expires}"
            for orphan in self.orphans
        ]
        return out

    @property
    def expired(self) -> list[str]:
        return [row.name for row in self.rows if row.expires <= self.today]


def list_pipelines(
    settings: Path,
    declarations: Declarations,
    *,
    today: date,
    prices: PriceTable,
    deployed: Mapping[str, Deployed] | None = None,
) -> PipelineListing:
    """Every test pipeline ``settings`` declares, oldest first, with what of it is deployed;
    then the deployed ones it does not declare. ``deployed``: None when not asked."""
    found = deployed or {}
    rows = [
        PipelineRow(
            name=declared.name,
            owner=declared.owner,
            purpose=declared.purpose,
            created=declared.created,
            expires=declared.expires,
            age_days=max(0, (today - declared.created).days),
            hourly_cost=hourly_cost(declared.footprint, prices),
            deployed=found.get(declared.name),
        )
        for declared in declarations.read(settings)
    ]
    rows.sort(key=lambda row: (row.created, row.name))
    declared_names = {row.name for row in rows}
    return PipelineListing(
        rows=rows,
        today=today,
        prices=prices,
        settings=settings,
        orphans=[found[name] for name in sorted(found) if name not in declared_names],
        looked_up=deployed is not None,
    )


def settings_path(given: Path | None, environ: Mapping[str, str], variable: str) -> Path:
    """``--settings``, else the file ``$variable`` names; one line when neither is there."""
    if given is not None:
        return given
    named = environ.get(variable, "").strip()
    if not named:
        raise ConfigurationError(f"name the deployment settings with --settings or {variable}")
    return Path(named)
