"""All stacks of one environment, wired together with constructor arguments."""

from dataclasses import dataclass

from constructs import Construct

from infra.config import EnvironmentConfig
from infra.stacks.base import EnvironmentStack
from infra.stacks.handoff import HandoffStack
from infra.stacks.kafka import KafkaStack
from infra.stacks.monitoring import MonitoringStack
from infra.stacks.network import NetworkStack
from infra.stacks.spark import SparkStack
from infra.stacks.storage import StorageStack


@dataclass(frozen=True, kw_only=True)
class EnvironmentStacks:
    """The stacks of one environment, in deployment order."""

    network: NetworkStack
    storage: StorageStack
    kafka: KafkaStack
    spark: SparkStack
    monitoring: MonitoringStack
    handoff: HandoffStack

    def all(self) -> tuple[EnvironmentStack, ...]:
        """Every stack, dependencies first."""
        return (self.network, self.storage, self.kafka, self.spark, self.monitoring, self.handoff)


def build_environment(scope: Construct, config: EnvironmentConfig) -> EnvironmentStacks:
    """Add ``config``'s stacks to ``scope`` (the app)."""
    network = NetworkStack(scope, config=config)
    storage = StorageStack(scope, config=config)
    kafka = KafkaStack(
        scope,
        config=config,
        subnet_ids=network.broker_subnet_ids,
        security_group_id=network.broker_security_group_id,
    )
    spark = SparkStack(
        scope,
        config=config,
        subnet_id=network.spark_subnet_id,
        security_group_id=network.spark_security_group_id,
        bucket_arn=storage.bucket_arn,
        data_key_arn=storage.key_arn,
        cluster_arn=kafka.cluster_arn,
        cluster_name=kafka.cluster_name,
        cluster_uuid=kafka.cluster_uuid,
    )
    monitoring = MonitoringStack(
        scope,
        config=config,
        cluster_name=kafka.cluster_name,
        nodes=spark.nodes,
        dlm_policy_id=spark.dlm_policy_id,
    )
    handoff = HandoffStack(
        scope,
        config=config,
        bootstrap_brokers_iam=kafka.bootstrap_brokers_iam,
        bucket_name=storage.bucket_name,
        driver_private_ip=spark.driver_private_ip,
        driver_instance_id=spark.driver_instance_id,
        bootstrap_brokers=kafka.bootstrap_brokers,
    )
    return EnvironmentStacks(
        network=network,
        storage=storage,
        kafka=kafka,
        spark=spark,
        monitoring=monitoring,
        handoff=handoff,
    )
