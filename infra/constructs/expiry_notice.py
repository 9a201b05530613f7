"""A test pipeline's expiry, enforced: its owner told before and after, its Spark nodes stopped.

Three EventBridge Scheduler schedules, all ``rate(1 day)`` at 09:00 UTC:

- **advance notice**, from ``ADVANCE_NOTICE_DAYS`` before the expiry date until it:
  one message a day to the pipeline's alarm topic, which the owner is subscribed to;
- **expiry notice**, from the expiry date on until the pipeline is destroyed;
- **stop**, from the expiry date on: EC2 ``StopInstances`` of the pipeline's Spark nodes,
  again every day, so a node started by hand stops again. The brokers cannot be
  stopped (MSK has no such state): they cost until the pipeline is destroyed, which
  the notices say.

The notices' role may publish to that topic only, and use the topic's key only
for that; the stop's role may stop those instances only. Destroying the
pipeline removes the schedules with it.
"""

import json
from collections.abc import Sequence

from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.scheduler_schedule import (
    SchedulerSchedule,
    SchedulerScheduleFlexibleTimeWindow,
    SchedulerScheduleTarget,
)
from constructs import Construct

from infra.config.declared import ADVANCE_NOTICE_DAYS, DeclaredPipeline
from infra.constructs.policies import Statement, allow, assume_role_policy, policy_json

SCHEDULE = "rate(1 day)"
SCHEDULER = "scheduler.amazonaws.com"


def expiry_message(name: str, declared: DeclaredPipeline, destroy: str) -> str:
    """What the owner reads from the expiry date on, in plain text (SNS mails it as it is)."""
    return (
        f"tablecast test pipeline '{name}' ({declared.purpose}) expired on "
        f"{declared.expires.isoformat()}; you ({declared.owner.address}) are its owner. "
        "Its Spark nodes are stopped daily; its brokers cost until it is destroyed. "
        f"Destroy it with: {destroy} (docs/operations.md, 'Test pipelines'), "
        f"or move its expires date in {declared.source} and deploy it again. "
        "This notice repeats daily until it is destroyed."
    )


def advance_message(name: str, declared: DeclaredPipeline, destroy: str) -> str:
    """What the owner reads in the days before the expiry date."""
    return (
        f"tablecast test pipeline '{name}' ({declared.purpose}) expires on "
        f"{declared.expires.isoformat()}; you ({declared.owner.address}) are its owner. "
        "That day at 09:00 UTC its Spark nodes are stopped (and every day after). "
        f"Destroy it before with: {destroy}, or move its expires date in {declared.source} "
        "and deploy it again."
    )


class ExpiryNotice(Construct):
    """The schedules that notify a test pipeline's owner and stop its nodes, and their roles."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        name: str,
        declared: DeclaredPipeline,
        topic_arn: str,
        key_arn: str,
        destroy: str,
        instance_ids: Sequence[str],
        region: str,
        partition: str,
    ) -> None:
        """Create them.

        :param name: the pipeline's name (``tablecast-<name>-*`` stacks).
        :param topic_arn: the pipeline's alarm topic, which the owner is subscribed to.
        :param key_arn: the topic's KMS key.
        :param destroy: the command that destroys the pipeline, quoted in the messages.
        :param instance_ids: the pipeline's Spark nodes, stopped at expiry.
        :param region, partition: where they are.
        """
        super().__init__(scope, id_)
        account = DataAwsCallerIdentity(self, "account").account_id
        self._account = account
        role, policy = self._role(
            "",
            name=f"tablecast-{name}-expiry-notice",
            description=f"EventBridge Scheduler publishes {name}'s expiry notices",
            policy_name="publish-expiry-notice",
            statements=[
                allow("PublishToTheAlarmTopic", ["sns:Publish"], [topic_arn]),
                # The topic and the schedules are encrypted with this key.
                allow("UseTheTopicsKey", ["kms:Decrypt", "kms:GenerateDataKey"], [key_arn]),
            ],
        )
        self.message = expiry_message(name, declared, destroy)
        self.advance_message = advance_message(name, declared, destroy)

        def notice(
            id_: str, suffix: str, what: str, message: str, start: str, end: str | None
        ) -> None:
            SchedulerSchedule(
                self,
                id_,
                name=f"tablecast-{name}-{suffix}",
                description=f"Tell the owner of test pipeline {name} daily {what}",
                schedule_expression=SCHEDULE,
                start_date=start,
                end_date=end,
                flexible_time_window=SchedulerScheduleFlexibleTimeWindow(mode="OFF"),
                # The message at rest under the topic's key, which the role may decrypt.
                kms_key_arn=key_arn,
                target=SchedulerScheduleTarget(arn=topic_arn, role_arn=role.arn, input=message),
                # Never a schedule whose role may not publish yet.
                depends_on=[policy],
            )

        # "schedule" is the id the expiry notice has always had: no deployed one is replaced.
        notice(
            "schedule",
            "expiry-notice",
            "from its expiry on",
            self.message,
            declared.first_notice,
            None,
        )
        notice(
            "advance-notice",
            "advance-notice",
            f"in the {ADVANCE_NOTICE_DAYS} days before its expiry",
            self.advance_message,
            declared.first_advance_notice,
            declared.first_notice,
        )
        self._stop(name, declared, instance_ids, region, partition, account, key_arn)

    def _stop(
        self,
        name: str,
        declared: DeclaredPipeline,
        instance_ids: Sequence[str],
        region: str,
        partition: str,
        account: str,
        key_arn: str,
    ) -> None:
        instances = [f"arn:{partition}:ec2:{region}:{account}:instance/{i}" for i in instance_ids]
        role, policy = self._role(
            "stop-",
            name=f"tablecast-{name}-expiry-stop",
            description=f"EventBridge Scheduler stops {name}'s Spark nodes at its expiry",
            policy_name="stop-spark-nodes",
            statements=[
                allow("StopTheSparkNodes", ["ec2:StopInstances"], instances),
                # The schedule is encrypted with the topic's key, as the notices are.
                allow("UseTheTopicsKey", ["kms:Decrypt"], [key_arn]),
            ],
        )
        self.stop_input = json.dumps({"InstanceIds": list(instance_ids)})
        self.stop = SchedulerSchedule(
            self,
            "stop",
            name=f"tablecast-{name}-expiry-stop",
            description=f"Stop the Spark nodes of test pipeline {name} daily from its expiry on",
            schedule_expression=SCHEDULE,
            start_date=declared.first_notice,
            flexible_time_window=SchedulerScheduleFlexibleTimeWindow(mode="OFF"),
            kms_key_arn=key_arn,
            # EventBridge Scheduler's universal target: the EC2 API's StopInstances.
            target=SchedulerScheduleTarget(
                arn=f"arn:{partition}:scheduler:::aws-sdk:ec2:stopInstances",
                role_arn=role.arn,
                input=self.stop_input,
            ),
            depends_on=[policy],
        )

    def _role(
        self,
        id_prefix: str,
        *,
        name: str,
        description: str,
        policy_name: str,
        statements: list[Statement],
    ) -> tuple[IamRole, IamRolePolicy]:
        """A role only the account's EventBridge Scheduler assumes, and its one policy."""
        role = IamRole(
            self,
            f"{id_prefix}role",
            name=name,
            description=description,
            assume_role_policy=assume_role_policy(SCHEDULER, source_account=self._account),
        )
        policy = IamRolePolicy(
            self,
            f"{id_prefix}policy",
            name=policy_name,
            role=role.id,
            policy=policy_json(statements),
        )
        return role, policy
