"""A customer-managed KMS key with rotation and an explicit key policy."""

from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from cdktf_cdktf_provider_aws.kms_alias import KmsAlias
from cdktf_cdktf_provider_aws.kms_key import KmsKey
from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.constructs.policies import Statement, policy_json

# Long enough to notice and cancel a deletion by mistake.
DELETION_WINDOW_DAYS = 30


class EncryptionKey(Construct):
    """A KMS key for one stack's data, with an alias ``alias/<alias>``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        alias: str,
        description: str,
        region: str,
        allow_cloudwatch_logs: bool = False,
        allow_cloudwatch_alarms: bool = False,
        guard: bool = False,
    ) -> None:
        """Create the key.

        :param alias: alias name without ``alias/``, e.g. ``tablecast-dev-kafka``.
        :param description: what the key protects.
        :param region: the stack's region, for the CloudWatch Logs principal.
        :param allow_cloudwatch_logs: let CloudWatch Logs encrypt this account's log groups.
        :param allow_cloudwatch_alarms: let CloudWatch alarms publish to topics it encrypts.
        :param guard: refuse any plan that destroys the key (it encrypts data kept
            beyond its stack, e.g. snapshots).
        """
        super().__init__(scope, id_)
        account = DataAwsCallerIdentity(self, "account").account_id
        partition = DataAwsPartition(self, "partition").partition
        statements: list[Statement] = [
            {
                # Without it the key becomes unmanageable; IAM policies then
                # decide who in the account may use it.
                "Sid": "AccountAdministersKey",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
                "Action": "kms:*",
                "Resource": "*",
            }
        ]
        if allow_cloudwatch_logs:
            statements.append(
                {
                    "Sid": "CloudWatchLogsEncryptsLogGroups",
                    "Effect": "Allow",
                    "Principal": {"Service": f"logs.{region}.amazonaws.com"},
                    "Action": [
                        "kms:Decrypt",
                        "kms:DescribeKey",
                        "kms:Encrypt",
                        "kms:GenerateDataKey",
                        "kms:GenerateDataKeyWithoutPlaintext",
                        "kms:ReEncryptFrom",
                        "kms:ReEncryptTo",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "ArnLike": {
                            "kms:EncryptionContext:aws:logs:arn": (
                                f"arn:{partition}:logs:{region}:{account}:log-group:*"
                            )
                        }
                    },
                }
            )
        if allow_cloudwatch_alarms:
            statements.append(
                {
                    # Alarms publish to an encrypted topic only with this.
                    "Sid": "CloudWatchAlarmsPublish",
                    "Effect": "Allow",
                    "Principal": {"Service": "cloudwatch.amazonaws.com"},
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": "*",
                    "Condition": {"StringEquals": {"aws:SourceAccount": account}},
                }
            )
        self.key = KmsKey(
            self,
            "key",
            description=description,
            enable_key_rotation=True,
            deletion_window_in_days=DELETION_WINDOW_DAYS,
            policy=policy_json(statements),
            lifecycle=TerraformResourceLifecycle(prevent_destroy=True) if guard else None,
        )
        KmsAlias(self, "alias", name=f"alias/{alias}", target_key_id=self.key.key_id)

    @property
    def arn(self) -> str:
        """The key's ARN."""
        return str(self.key.arn)
