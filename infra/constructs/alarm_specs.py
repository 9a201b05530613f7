"""Alarms as data: one ``AlarmSpec`` per alarm, turned into resources by ``TopicAlarms``.

Every spec says what happens when its metric is missing: ``breaching`` where
silence means the thing is gone (a broker, a node, the job, the NameNode),
``notBreaching`` only where another alarm covers silence, and why.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Missing(StrEnum):
    """CloudWatch's ``treat_missing_data``."""

    BREACHING = "breaching"
    NOT_BREACHING = "notBreaching"


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One metric, or one term of a metric-math expression."""

    namespace: str
    name: str
    dimensions: Mapping[str, str]
    statistic: str
    period: int = 60


@dataclass(frozen=True, kw_only=True)
class AlarmSpec:
    """One alarm: what it watches, when it fires, what silence means."""

    name: str
    """After ``tablecast-<env>-``; also the resource's id."""
    description: str
    comparison: str
    threshold: float
    evaluation_periods: int
    missing: Missing
    metric: Metric | None = None
    """The one metric watched, or ``None`` with ``terms`` and ``expression``."""
    terms: Mapping[str, Metric] = field(default_factory=dict)
    """Metrics by id, combined by ``expression``."""
    expression: str | None = None
    extra_actions: tuple[str, ...] = ()
    """Further actions on firing, e.g. EC2 recover."""
    armed_by_deploy: bool = False
    """Created with its actions off, which ``tablecast-ops deploy`` turns on (its name is in
    ``app.metric_names.ARMED_BY_DEPLOY``): it watches what runs only once the job is deployed."""

    def __post_init__(self) -> None:
        if (self.metric is None) == (self.expression is None):
            raise ValueError(f"alarm {self.name}: one metric or one expression")


GREATER = "GreaterThanThreshold"
AT_LEAST = "GreaterThanOrEqualToThreshold"
LESS = "LessThanThreshold"
