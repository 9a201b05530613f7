"""A test pipeline's expiry notice: its own alarm topic tells the owner, at expiry and daily after.

An EventBridge Scheduler schedule (``rate(1 day)`` from the expiry date)
publishes one message to the pipeline's alarm topic, which the owner is
subscribed to. Its role may publish to that topic only, and use the topic's
key only for that. Destroying the pipeline removes the schedule with it.
"""

from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.scheduler_schedule import (
    SchedulerSchedule,
    SchedulerScheduleFlexibleTimeWindow,
    SchedulerScheduleTarget,
)
from constructs import Construct

from infra.config.declared import DeclaredPipeline
from infra.constructs.policies import allow, assume_role_policy, policy_json

SCHEDULE = "rate(1 day)"


def expiry_message(name: str, declared: DeclaredPipeline, destroy: str) -> str:
    """What the owner reads, in plain text (SNS mails it as it is)."""
    return (
        f"tablecast test pipeline '{name}' ({declared.purpose}) expired on "
        f"{declared.expires.isoformat()}; you ({declared.owner.address}) are its owner. "
        f"Destroy it with: {destroy} (docs/operations.md, 'Test pipelines'), "
        f"or move its expires date in {declared.source} and deploy it again. "
        "This notice repeats daily until it is destroyed."
    )


class ExpiryNotice(Construct):
    """The schedule that notifies a test pipeline's owner, and the role it publishes with."""

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
    ) -> None:
        """Create it.

        :param name: the pipeline's name (``tablecast-<name>-*`` stacks).
        :param topic_arn: the pipeline's alarm topic, which the owner is subscribed to.
        :param key_arn: the topic's KMS key.
        :param destroy: the command that destroys the pipeline, quoted in the message.
        """
        super().__init__(scope, id_)
        account = DataAwsCallerIdentity(self, "account").account_id
        role = IamRole(
            self,
            "role",
            name=f"tablecast-{name}-expiry-notice",
            description=f"EventBridge Scheduler publishes {name}'s expiry notice",
            assume_role_policy=assume_role_policy(
                "scheduler.amazonaws.com", source_account=account
            ),
        )
        policy = IamRolePolicy(
            self,
            "policy",
            name="publish-expiry-notice",
            role=role.id,
            policy=policy_json(
                [
                    allow("PublishToTheAlarmTopic", ["sns:Publish"], [topic_arn]),
                    # The topic and the schedule are encrypted with this key.
                    allow("UseTheTopicsKey", ["kms:Decrypt", "kms:GenerateDataKey"], [key_arn]),
                ]
            ),
        )
        self.message = expiry_message(name, declared, destroy)
        self.schedule = SchedulerSchedule(
            self,
            "schedule",
            name=f"tablecast-{name}-expiry-notice",
            description=f"Tell the owner of test pipeline {name} daily from its expiry on",
            schedule_expression=SCHEDULE,
            start_date=declared.first_notice,
            flexible_time_window=SchedulerScheduleFlexibleTimeWindow(mode="OFF"),
            # The message at rest under the topic's key, which the role may decrypt.
            kms_key_arn=key_arn,
            target=SchedulerScheduleTarget(arn=topic_arn, role_arn=role.arn, input=self.message),
            # Never a schedule whose role may not publish yet.
            depends_on=[policy],
        )
