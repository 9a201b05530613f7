"""CloudWatch alarms that always notify the environment's alarm topics."""

from collections.abc import Sequence

from cdktf_cdktf_provider_aws.cloudwatch_metric_alarm import (
    CloudwatchMetricAlarm,
    CloudwatchMetricAlarmMetricQuery,
    CloudwatchMetricAlarmMetricQueryMetric,
)
from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.constructs.alarm_specs import AlarmSpec, Metric


class TopicAlarms:
    """Makes alarms that tell SNS topics when they fire and when they clear.

    Every alarm of the environment is made here, so none can lack its actions.
    """

    def __init__(self, scope: Construct, *, name_prefix: str, topic_arns: Sequence[str]) -> None:
        """Bind the factory.

        :param scope: where the alarms are created.
        :param name_prefix: prefix of every alarm's name, e.g. ``tablecast-dev``.
        :param topic_arns: the SNS topics told about every alarm: the environment's own
            and any existing topic the operator named as an alarm endpoint.
        """
        self._scope = scope
        self._name_prefix = name_prefix
        self._topic_arns = list(topic_arns)
        self.alarms: list[CloudwatchMetricAlarm] = []
        """Every alarm made so far, for the dashboard."""

    def alarm(self, spec: AlarmSpec) -> CloudwatchMetricAlarm:
        """The alarm ``spec`` describes."""
        single = spec.metric
        alarm = CloudwatchMetricAlarm(
            self._scope,
            spec.name,
            alarm_name=f"{self._name_prefix}-{spec.name}",
            alarm_description=spec.description,
            comparison_operator=spec.comparison,
            threshold=spec.threshold,
            evaluation_periods=spec.evaluation_periods,
            treat_missing_data=spec.missing.value,
            namespace=single.namespace if single else None,
            metric_name=single.name if single else None,
            statistic=single.statistic if single else None,
            period=single.period if single else None,
            dimensions=dict(single.dimensions) if single else None,
            metric_query=None if single else _queries(spec),
            # The deploy tool owns an armed alarm's switch once it exists.
            actions_enabled=not spec.armed_by_deploy,
            alarm_actions=[*spec.extra_actions, *self._topic_arns],
            ok_actions=list(self._topic_arns),
            lifecycle=TerraformResourceLifecycle(ignore_changes=["actions_enabled"])
            if spec.armed_by_deploy
            else None,
        )
        self.alarms.append(alarm)
        return alarm


def _queries(spec: AlarmSpec) -> list[CloudwatchMetricAlarmMetricQuery]:
    """The terms (which return no data) and the expression (which does)."""
    return [
        *(_term(id_, metric) for id_, metric in spec.terms.items()),
        CloudwatchMetricAlarmMetricQuery(id="result", expression=spec.expression, return_data=True),
    ]


def _term(id_: str, metric: Metric) -> CloudwatchMetricAlarmMetricQuery:
    return CloudwatchMetricAlarmMetricQuery(
        id=id_,
        metric=CloudwatchMetricAlarmMetricQueryMetric(
            namespace=metric.namespace,
            metric_name=metric.name,
            dimensions=dict(metric.dimensions),
            stat=metric.statistic,
            period=metric.period,
        ),
        return_data=False,
    )
