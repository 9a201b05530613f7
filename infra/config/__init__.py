"""Typed, validated configuration of each environment."""

from infra.config.addressing import SubnetPlan, plan_subnets
from infra.config.environments import ENVIRONMENTS
from infra.config.errors import ConfigError
from infra.config.model import MIN_RETENTION_HOURS, EnvironmentConfig
from infra.config.settings import (
    AlarmEndpoint,
    DeploymentSettings,
    EndpointKind,
    ProducerNetwork,
    StateBackend,
)
from infra.config.versions import Versions, versions

__all__ = [
    "ENVIRONMENTS",
    "MIN_RETENTION_HOURS",
    "AlarmEndpoint",
    "ConfigError",
    "DeploymentSettings",
    "EndpointKind",
    "EnvironmentConfig",
    "ProducerNetwork",
    "StateBackend",
    "SubnetPlan",
    "Versions",
    "plan_subnets",
    "versions",
]
