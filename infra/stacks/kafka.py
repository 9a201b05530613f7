"""The MSK cluster: encrypted, IAM-authenticated, private, sized and configured for retention."""

from cdktf_cdktf_provider_aws.cloudwatch_log_group import CloudwatchLogGroup
from cdktf_cdktf_provider_aws.msk_cluster import (
    MskCluster,
    MskClusterBrokerNodeGroupInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfo,
    MskClusterBrokerNodeGroupInfoConnectivityInfoPublicAccess,
    MskClusterBrokerNodeGroupInfoStorageInfo,
    MskClusterBrokerNodeGroupInfoStorageInfoEbsStorageInfo,
    MskClusterClientAuthentication,
    MskClusterClientAuthenticationSasl,
    MskClusterConfigurationInfo,
    MskClusterEncryptionInfo,
    MskClusterEncryptionInfoEncryptionInTransit,
    MskClusterLoggingInfo,
    MskClusterLoggingInfoBrokerLogs,
    MskClusterLoggingInfoBrokerLogsCloudwatchLogs,
)
from cdktf_cdktf_provider_aws.msk_configuration import MskConfiguration
from constructs import Construct

from infra.config import EnvironmentConfig, layout, versions
from infra.config.broker_settings import server_properties
from infra.constructs import EncryptionKey
from infra.stacks.base import EnvironmentStack


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
        kafka_version = versions().msk_kafka
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
            name=f"{prefix}-brokers",
            description=f"{prefix}: durability and {config.retention_hours} h retention",
            kafka_versions=[kafka_version],
            server_properties=server_properties(config),
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
            client_authentication=MskClusterClientAuthentication(
                sasl=MskClusterClientAuthenticationSasl(iam=True),
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
        )
        self.cluster_arn: str = self.cluster.arn
        self.cluster_name: str = self.cluster.cluster_name
        self.cluster_uuid: str = self.cluster.cluster_uuid
        self.bootstrap_brokers_iam: str = self.cluster.bootstrap_brokers_sasl_iam
