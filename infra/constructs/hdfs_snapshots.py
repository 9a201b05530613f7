"""Scheduled EBS snapshots of the HDFS data volumes (Data Lifecycle Manager).

Snapshots are regional: they outlive the zone the cluster runs in, which
nothing else on the nodes does. Each is crash-consistent per volume, like a
power cut: HDFS (the NameNode's edit log, the DataNodes' blocks) recovers
from one, but volumes snapshotted a few minutes apart do not make one
consistent cluster. The driver's hourly copy of the checkpoint in S3
(``hdfs-checkpoint-backup``) is the consistent one; see docs/infra.md,
"What a failure costs".
"""

from cdktf_cdktf_provider_aws.dlm_lifecycle_policy import (
    DlmLifecyclePolicy,
    DlmLifecyclePolicyPolicyDetails,
    DlmLifecyclePolicyPolicyDetailsSchedule,
    DlmLifecyclePolicyPolicyDetailsScheduleCreateRule,
    DlmLifecyclePolicyPolicyDetailsScheduleRetainRule,
)
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from constructs import Construct

from infra.constructs.policies import allow, assume_role_policy, policy_json

# EC2 defines no resource for its Describe actions.
DLM_DESCRIBE_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeSnapshots", "ec2:DescribeVolumes")


class HdfsSnapshots(Construct):
    """A DLM policy that snapshots every volume with one tag, and its role."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        name: str,
        target_tag: tuple[str, str],
        kms_key_arn: str,
        interval_hours: int,
        retain: int,
        region: str,
        account: str,
        partition: str,
    ) -> None:
        """Create the policy.

        :param name: prefix of the role's name and the policy's description.
        :param target_tag: ``(key, value)`` of the volumes to snapshot.
        :param kms_key_arn: the key that encrypts the volumes (snapshots keep it).
        :param interval_hours: hours between snapshots.
        :param retain: snapshots kept per volume.
        :param region, account, partition: where the volumes and snapshots are.
        """
        super().__init__(scope, id_)
        key, value = target_tag
        # The policy copies the volumes' tags to their snapshots, so the tag scopes both:
        # DLM snapshots only the environment's data volumes and deletes only their snapshots.
        tagged = {"StringEquals": {f"aws:ResourceTag/{key}": value}}
        volumes = f"arn:{partition}:ec2:{region}:{account}:volume/*"
        snapshots = f"arn:{partition}:ec2:{region}::snapshot/*"
        role = IamRole(
            self,
            "role",
            name=f"{name}-hdfs-snapshots",
            description=f"DLM snapshots {name}'s HDFS volumes",
            assume_role_policy=assume_role_policy("dlm.amazonaws.com", source_account=account),
        )
        IamRolePolicy(
            self,
            "policy",
            name="snapshot-hdfs-volumes",
            role=role.id,
            policy=policy_json(
                [
                    allow("FindVolumes", DLM_DESCRIBE_ACTIONS, ["*"]),
                    allow("SnapshotTaggedVolumes", ["ec2:CreateSnapshot"], [volumes], tagged),
                    # The new snapshot, which has no tags yet (the volume's condition above
                    # decides which volumes may be snapshotted).
                    allow("CreateSnapshots", ["ec2:CreateSnapshot"], [snapshots]),
                    allow("TagSnapshots", ["ec2:CreateTags"], [snapshots]),
                    allow("DeleteOwnSnapshots", ["ec2:DeleteSnapshot"], [snapshots], tagged),
                    allow(
                        # Snapshots of an encrypted volume are encrypted with its key.
                        "UseVolumeKey",
                        ["kms:CreateGrant", "kms:DescribeKey"],
                        [kms_key_arn],
                        {"Bool": {"kms:GrantIsForAWSResource": "true"}},
                    ),
                ]
            ),
        )
        self.policy = DlmLifecyclePolicy(
            self,
            "lifecycle-policy",
            # DLM takes letters, digits, spaces, - and _ only.
            description=f"{name} HDFS volumes every {interval_hours} h keep {retain}",
            execution_role_arn=role.arn,
            state="ENABLED",
            policy_details=DlmLifecyclePolicyPolicyDetails(
                resource_types=["VOLUME"],
                target_tags={key: value},
                schedule=[
                    DlmLifecyclePolicyPolicyDetailsSchedule(
                        name=f"every {interval_hours} h",
                        create_rule=DlmLifecyclePolicyPolicyDetailsScheduleCreateRule(
                            interval=interval_hours, interval_unit="HOURS"
                        ),
                        retain_rule=DlmLifecyclePolicyPolicyDetailsScheduleRetainRule(count=retain),
                        copy_tags=True,
                    )
                ],
            ),
        )
