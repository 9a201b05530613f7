"""The versions infra/ takes from ``versions.toml``, the repository's single source."""

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parents[2] / "versions.toml"


@dataclass(frozen=True, kw_only=True)
class Versions:
    """Versions that must agree between infra/, the AMI and the job."""

    spark: str
    """Spark version; the AMI carries it as the ``SparkVersion`` tag."""
    msk_kafka: str
    """MSK's Kafka version for the cluster and its configuration."""


@cache
def versions(path: Path = VERSIONS_FILE) -> Versions:
    """Read ``versions.toml`` once per process."""
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    return Versions(
        spark=str(data["spark"]["version"]), msk_kafka=str(data["kafka"]["msk_version"])
    )
