"""The MSK cluster: encrypted, IAM-authenticated, private, sized and configured for retention.

Also who may use it besides the Spark nodes: a managed policy producers
attach to their own roles, and the topic-administration role the operator's
tools assume (``infra.constructs.kafka_access``).
"""

from cdktf_cdktf_provider_aws.appautoscaling_policy import (
    AppautoscalingPolicy,
    AppautoscalingPolicyTargetTrackingScalingPolicyConfiguration,
    AppautoscalingPolicyTargetTrackingScalingPolicyConfigurationPredefinedMetricSpecification,
)
from cdktf_cdktf_provider_aws.appautoscaling_target import AppautoscalingTarget
from cdktf_cdktf_provider_aws.cloudwatch_log_group import CloudwatchLogGroup
from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from cdktf_cdktf_provider_aws.iam_policy import IamPolicy
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.msk_cluster import (
    MskCluster,
    MskClusterBrokerNodeGroupInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfoPublicAccess,
    MskClusterBrokerNodeGroupInfoStorageInfo,
    MskClusterBrokerNodeGroupInfoStorageInfoEbsStorageInfo,
    MskClusterClientAuthentication,
    MskClusterClientAuthenticationSasl,
    MskClusterClientAuthenticationTls,
    MskClusterConfigurationInfo,
    MskClusterEncryptionInfo,
    MskClusterEncryptionInfoEncryptionInTransit,
    MskClusterLoggingInfo,
    MskClusterLoggingInfoBrokerLogs,
    MskClusterLoggingInfoBrokerLogsCloudwatchLogs,
)
from cdktf_cdktf_provider_aws.msk_configuration import MskConfiguration
from cdktf_cdktf_provider_aws.msk_scram_secret_association import MskScramSecretAssociation
from constructs import Construct

from app.sources.kafka_client import KafkaAuth
from infra.cdk import TerraformOutput, TerraformResourceLifecycle
from infra.config import EnvironmentConfig, layout
from infra.config.broker_settings import server_properties
from infra.constructs import EncryptionKey
from infra.constructs.kafka_access import (
    KafkaResources,
    produce_statements,
    topic_admin_statements,
)
from infra.constructs.policies import policy_json
from infra.stacks.base import EnvironmentStack

# Grow storage when brokers are this full on average: below the 70 % the
# sizing aims at is normal, the 85 % disk alarm is the last resort.
STORAGE_TARGET_PERCENT = 75
STORAGE_SIZE_PATH = "broker_node_group_info[0].storage_info[0].ebs_storage_info[0].volume_size"


class KafkaStack(EnvironmentStack):
    """``tablecast-<env>-kafka``: the MSK cluster, its configuration, key and broker logs."""

    def __init__(
        self,
        scope: Construct,
        *,
        config: EnvironmentConfig,
        subnet_ids: list[str],
        security_group_id: str,
    ) -> None:
        """Create the cluster.

        :param config: the environment.
        :param subnet_ids: one broker subnet per zone (the network stack's).
        :param security_group_id: the brokers' security group.
        """
        super().__init__(scope, config=config, component="kafka")
        prefix = config.resource_prefix
        kafka_version = config.msk_cluster_version
        key = EncryptionKey(
            self,
            "kafka-key",
            alias=f"{prefix}-kafka",
            description=f"{prefix} MSK data at rest and broker logs",
            region=config.region,
            allow_cloudwatch_logs=True,
        )
        broker_logs = CloudwatchLogGroup(
            self,
            "broker-logs",
            name=f"/tablecast/{config.name}/msk-brokers",
            kms_key_id=key.arn,
            retention_in_days=layout.LOG_RETENTION_DAYS,
        )
        configuration = MskConfiguration(
            self,
            "configuration",
            # A new Kafka version needs a new configuration; named after the
            # version, the new one exists beside the old one until the cluster
            # has moved to it (create_before_destroy). Changed properties are
            # a new revision of the same configuration, applied in place.
            name=f"{prefix}-brokers-{kafka_version.replace('.', '-')}",
            description=f"{prefix}: durability and {config.retention_hours} h retention",
            kafka_versions=[kafka_version],
            server_properties=server_properties(config),
            lifecycle=TerraformResourceLifecycle(create_before_destroy=True),
        )
        self.cluster = MskCluster(
            self,
            "cluster",
            cluster_name=prefix,
            kafka_version=kafka_version,
            number_of_broker_nodes=config.broker_count,
            broker_node_group_info=MskClusterBrokerNodeGroupInfo(
                instance_type=config.broker_instance_type,
                client_subnets=subnet_ids,
                security_groups=[security_group_id],
                connectivity_info=MskClusterBrokerNodeGroupInfoConnectivityInfo(
                    public_access=MskClusterBrokerNodeGroupInfoConnectivityInfoPublicAccess(
                        type="DISABLED"
                    )
                ),
                storage_info=MskClusterBrokerNodeGroupInfoStorageInfo(
                    ebs_storage_info=MskClusterBrokerNodeGroupInfoStorageInfoEbsStorageInfo(
                        volume_size=config.effective_broker_volume_gib
                    )
                ),
            ),
            # IAM always (the operator's tools sign in with it); the job's other
            # sign-in beside it when the environment names one (config.kafka): SCRAM,
            # or TLS with client certificates of the environment's CAs. Never a client
            # without a sign-in.
            client_authentication=MskClusterClientAuthentication(
                sasl=MskClusterClientAuthenticationSasl(
                    iam=True, scram=True if config.kafka.auth == KafkaAuth.SCRAM else None
                ),
                tls=MskClusterClientAuthenticationTls(
                    certificate_authority_arns=list(config.kafka.certificate_authority_arns)
                )
                if config.kafka.auth == KafkaAuth.TLS
                else None,
                unauthenticated=False,
            ),
            encryption_info=MskClusterEncryptionInfo(
                encryption_at_rest_kms_key_arn=key.arn,
                encryption_in_transit=MskClusterEncryptionInfoEncryptionInTransit(
                    client_broker="TLS", in_cluster=True
                ),
            ),
            configuration_info=MskClusterConfigurationInfo(
                arn=configuration.arn, revision=configuration.latest_revision
            ),
            enhanced_monitoring=config.enhanced_monitoring,
            logging_info=MskClusterLoggingInfo(
                broker_logs=MskClusterLoggingInfoBrokerLogs(
                    cloudwatch_logs=MskClusterLoggingInfoBrokerLogsCloudwatchLogs(
                        enabled=True, log_group=broker_logs.name
                    )
                )
            ),
            # The cluster holds every record not yet archived: a plan that
            # would replace it (a new metadata mode, a renamed cluster) fails.
            # Storage autoscaling grows the volumes; Terraform must not shrink
            # them back to the configured size (MSK cannot shrink anyway).
            lifecycle=TerraformResourceLifecycle(
                prevent_destroy=not config.throwaway,
                ignore_changes=[STORAGE_SIZE_PATH],
            ),
        )
        self.cluster_arn: str = self.cluster.arn
        self.cluster_name: str = self.cluster.cluster_name
        self.cluster_uuid: str = self.cluster.cluster_uuid
        self.bootstrap_brokers_iam: str = self.cluster.bootstrap_brokers_sasl_iam
        # The brokers of the job's sign-in when it is not IAM ("" with IAM).
        self.bootstrap_brokers: str = ""
        if config.kafka.auth == KafkaAuth.TLS:
            self.bootstrap_brokers = self.cluster.bootstrap_brokers_tls
        elif config.kafka.auth == KafkaAuth.SCRAM:
            self.bootstrap_brokers = self.cluster.bootstrap_brokers_sasl_scram
            MskScramSecretAssociation(
                self,
                "scram-secret",
                cluster_arn=self.cluster.arn,
                secret_arn_list=[config.kafka.secret_arn],
            )
        self._storage_autoscaling()
        self._access(
            KafkaResources(
                partition=DataAwsPartition(self, "partition").partition,
                region=config.region,
                account=DataAwsCallerIdentity(self, "account").account_id,
                cluster_arn=self.cluster_arn,
                cluster_name=self.cluster_name,
                cluster_uuid=self.cluster_uuid,
                topic_prefix=config.topic_prefix,
            )
        )

    def _storage_autoscaling(self) -> None:
        """Grow broker storage before the disk alarm fires (MSK never shrinks it)."""
        config = self.config
        target = AppautoscalingTarget(
            self,
            "storage-scaling-target",
            service_namespace="kafka",
            scalable_dimension="kafka:broker-storage:VolumeSize",
            resource_id=self.cluster_arn,
            min_capacity=1,
            max_capacity=config.broker_volume_ceiling_gib,
        )
        AppautoscalingPolicy(
            self,
            "storage-scaling-policy",
            name=f"{config.resource_prefix}-broker-storage",
            policy_type="TargetTrackingScaling",
            service_namespace=target.service_namespace,
            scalable_dimension=target.scalable_dimension,
            resource_id=target.resource_id,
            target_tracking_scaling_policy_configuration=(
                AppautoscalingPolicyTargetTrackingScalingPolicyConfiguration(
                    target_value=STORAGE_TARGET_PERCENT,
                    disable_scale_in=True,
                    predefined_metric_specification=(
                        AppautoscalingPolicyTargetTrackingScalingPolicyConfigurationPredefinedMetricSpecification(
                            predefined_metric_type="KafkaBrokerStorageUtilization"
                        )
                    ),
                )
            ),
        )

    def _access(self, kafka: KafkaResources) -> None:
        """The producer policy and the topic-administration role, both outputs."""
        config = self.config
        prefix = config.resource_prefix
        producer = IamPolicy(
            self,
            "producer-policy",
            name=f"{prefix}-producer",
            description=f"Write {config.topic_prefix}* topics of {prefix} (attach to producers)",
            policy=policy_json(produce_statements(kafka)),
        )
        principals = list(config.deployment.topic_admin_principals) or [
            f"arn:{kafka.partition}:iam::{kafka.account}:root"
        ]
        admin = IamRole(
            self,
            "topic-admin-role",
            name=f"{prefix}-topic-admin",
            description=f"Create and alter {config.topic_prefix}* topics of {prefix}, load them",
            assume_role_policy=policy_json(
                [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": principals},
                        "Action": "sts:AssumeRole",
                    }
                ]
            ),
            max_session_duration=3600,
        )
        IamRolePolicy(
            self,
            "topic-admin-policy",
            name="administer-topics",
            role=admin.id,
            policy=policy_json(topic_admin_statements(kafka)),
        )
        TerraformOutput(
            self,
            "producer_policy_arn",
            value=producer.arn,
            description="Managed policy to attach to a producer's role",
        )
        TerraformOutput(
            self,
            "topic_admin_role_arn",
            value=admin.arn,
            description="Role the operator assumes for tablecast-ops topics and produce",
        )
