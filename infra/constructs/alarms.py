"""CloudWatch alarms that always notify the environment's alarm topics."""

from collections.abc import Mapping, Sequence

from cdktf_cdktf_provider_aws.cloudwatch_metric_alarm import (
    CloudwatchMetricAlarm,
    CloudwatchMetricAlarmMetricQuery,
)
from constructs import Construct


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

    def alarm(
        self,
        id_: str,
        *,
        name: str,
        description: str,
        comparison_operator: str,
        threshold: float,
        evaluation_periods: int,
        treat_missing_data: str = "notBreaching",
        namespace: str | None = None,
        metric_name: str | None = None,
        statistic: str | None = None,
        period: int | None = None,
        dimensions: Mapping[str, str] | None = None,
        metric_query: Sequence[CloudwatchMetricAlarmMetricQuery] | None = None,
        extra_alarm_actions: Sequence[str] = (),
    ) -> CloudwatchMetricAlarm:
        """An alarm on one metric or on a metric-math expression.

        Either ``namespace``, ``metric_name``, ``statistic`` and ``period`` or
        ``metric_query`` say what is watched.

        :param name: the alarm's name after the prefix.
        :param extra_alarm_actions: further actions on firing, e.g. EC2 recover.
        """
        alarm = CloudwatchMetricAlarm(
            self._scope,
            id_,
            alarm_name=f"{self._name_prefix}-{name}",
            alarm_description=description,
            comparison_operator=comparison_operator,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            treat_missing_data=treat_missing_data,
            namespace=namespace,
            metric_name=metric_name,
            statistic=statistic,
            period=period,
            dimensions=dict(dimensions) if dimensions is not None else None,
            metric_query=list(metric_query) if metric_query is not None else None,
            actions_enabled=True,
            alarm_actions=[*extra_alarm_actions, *self._topic_arns],
            ok_actions=list(self._topic_arns),
        )
        self.alarms.append(alarm)
        return alarm
