"""The Spark standalone cluster: a driver node and N workers, zone-affine with the brokers.

All nodes share one subnet (in the first zone, which also has a broker
subnet): Spark shuffles and HDFS replication stay inside one zone, and the
job fetches from the replica in its zone (rack-aware fetching, see
docs/infra.md). A ``spread`` placement group puts each node on its own rack,
so one rack's failure takes one HDFS copy, not all of them. Every node runs
the image the deployment settings pin; Terraform never replaces a running
node for a new image or user data: nodes are rolled one at a time on purpose.
The HDFS data volumes are guarded against destroy and snapshotted by DLM.
"""

from cdktf_cdktf_provider_aws.cloudwatch_log_group import CloudwatchLogGroup
from cdktf_cdktf_provider_aws.data_aws_ami import DataAwsAmi, DataAwsAmiFilter
from cdktf_cdktf_provider_aws.data_aws_availability_zone import DataAwsAvailabilityZone
from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from cdktf_cdktf_provider_aws.iam_instance_profile import IamInstanceProfile
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.placement_group import PlacementGroup
from constructs import Construct

from app import handoff, metric_names
from infra.config import EnvironmentConfig, layout, versions
from infra.constructs import EncryptionKey, NodeRole, SparkNode, node_user_data
from infra.constructs.hdfs_snapshots import HdfsSnapshots
from infra.constructs.kafka_access import KafkaResources
from infra.constructs.node_permissions import NodeKind, node_statements
from infra.constructs.policies import assume_role_policy, policy_json, trust_role_policy
from infra.stacks.base import EnvironmentStack


class SparkStack(EnvironmentStack):
    """``tablecast-<env>-spark``: nodes, data volumes, log groups, role, placement group."""

    def __init__(
        self,
        scope: Construct,
        *,
        config: EnvironmentConfig,
        subnet_id: str,
        security_group_id: str,
        bucket_arn: str,
        data_key_arn: str,
        cluster_arn: str,
        cluster_name: str,
        cluster_uuid: str,
    ) -> None:
        """Create the cluster.

        :param config: the environment.
        :param subnet_id: the Spark subnet (the network stack's).
        :param security_group_id: the Spark nodes' security group.
        :param bucket_arn: the pipeline's bucket (the storage stack's).
        :param data_key_arn: the KMS key that encrypts the bucket.
        :param cluster_arn: the MSK cluster (the kafka stack's).
        :param cluster_name: its name.
        :param cluster_uuid: its uuid, part of its topics' and groups' ARNs.
        """
        super().__init__(scope, config=config, component="spark")
        prefix = config.resource_prefix
        self.partition: str = DataAwsPartition(self, "partition").partition
        self.account: str = DataAwsCallerIdentity(self, "account").account_id
        key = EncryptionKey(
            self,
            "node-key",
            alias=f"{prefix}-spark",
            description=f"{prefix} Spark node volumes and logs",
            region=config.region,
            allow_cloudwatch_logs=True,
            # It encrypts the data volumes' snapshots, which outlive the stack.
            guard=not config.throwaway,
        )
        log_groups = [
            CloudwatchLogGroup(
                self,
                f"{name}-logs",
                name=layout.node_log_group(config.name, name),
                kms_key_id=key.arn,
                retention_in_days=layout.LOG_RETENTION_DAYS,
            )
            for name in layout.NODE_LOG_GROUPS
        ]
        profiles = self._roles(
            log_group_arns=[group.arn for group in log_groups],
            bucket_arn=bucket_arn,
            data_key_arn=data_key_arn,
            cluster_arn=cluster_arn,
            cluster_name=cluster_name,
            cluster_uuid=cluster_uuid,
        )
        image = _node_image(self, config.deployment.spark_image_id)
        placement = (
            PlacementGroup(self, "placement", name=f"{prefix}-spark", strategy="spread")
            if config.spark_placement == "spread"
            else None
        )
        driver_host = config.subnets.driver_private_ip
        zone_id = DataAwsAvailabilityZone(
            self, "spark-zone", name=config.spark_availability_zone
        ).zone_id

        def node(name: str, role: NodeRole, instance_type: str, host: str) -> SparkNode:
            return SparkNode(
                self,
                name,
                # The tools find the driver by this tag (app.handoff.driver_name).
                name=(
                    handoff.driver_name(config.name)
                    if role is NodeRole.DRIVER
                    else f"{prefix}-{name}"
                ),
                ami_id=image.id,
                instance_type=instance_type,
                subnet_id=subnet_id,
                availability_zone=config.spark_availability_zone,
                placement_group=placement.name if placement is not None else None,
                security_group_ids=[security_group_id],
                instance_profile=profiles[NodeKind(role.value)].name,
                kms_key_arn=key.arn,
                data_volume_gib=config.spark_data_volume_gib,
                user_data=node_user_data(
                    environment=config.name,
                    role=role,
                    driver_host=host,
                    region=config.region,
                    zone_id=zone_id,
                    hdfs_replication=config.hdfs_replication,
                    archiver_role_arn=self.archiver_role_arn if role is NodeRole.DRIVER else None,
                ),
                private_ip=driver_host if role is NodeRole.DRIVER else None,
                keep_final_snapshot=config.is_production,
                guard_data=not config.throwaway,
                snapshot_tag=(layout.HDFS_SNAPSHOT_TAG, prefix),
            )

        # The driver writes its own fixed address; workers name the driver
        # instance's, which also makes Terraform start the driver first.
        self.driver = node("driver", NodeRole.DRIVER, config.driver_instance_type, driver_host)
        self.workers = [
            node(
                f"worker-{index}",
                NodeRole.WORKER,
                config.spark_worker_instance_type,
                self.driver.private_ip,
            )
            for index in range(1, config.spark_worker_count + 1)
        ]
        self.driver_instance_id = self.driver.instance_id
        self.driver_private_ip = self.driver.private_ip
        self.nodes = {"driver": self.driver.instance_id} | {
            f"worker-{index}": worker.instance_id
            for index, worker in enumerate(self.workers, start=1)
        }
        """Instance ids by node name, for the monitoring stack."""
        snapshots = HdfsSnapshots(
            self,
            "hdfs-snapshots",
            name=prefix,
            target_tag=(layout.HDFS_SNAPSHOT_TAG, prefix),
            kms_key_arn=key.arn,
            interval_hours=config.hdfs_snapshot_interval_hours,
            retain=config.hdfs_snapshots_kept,
            region=config.region,
            account=self.account,
            partition=self.partition,
        )
        self.dlm_policy_id: str = snapshots.policy.id
        """The DLM policy's id, whose failed snapshots the monitoring stack alarms on."""

    def _roles(
        self,
        *,
        log_group_arns: list[str],
        bucket_arn: str,
        data_key_arn: str,
        cluster_arn: str,
        cluster_name: str,
        cluster_uuid: str,
    ) -> dict[NodeKind, IamInstanceProfile]:
        """A role per kind (driver, worker, archiver); instance profiles for the nodes'.

        The archiver runs on the driver node and trusts only the driver's role,
        which assumes it for the archiver's service (``archiver-credentials``).
        """
        config = self.config
        prefix = config.resource_prefix
        partition, account = self.partition, self.account
        descriptions = {
            NodeKind.DRIVER: "Spark driver node: the job, its wheel, checkpoint copies, SSM",
            NodeKind.WORKER: "Spark worker nodes: the job's executors",
            NodeKind.ARCHIVER: "The archiver: Kafka to the archive, no deletes",
        }
        roles: dict[NodeKind, IamRole] = {}
        for kind in (NodeKind.DRIVER, NodeKind.WORKER, NodeKind.ARCHIVER):
            trust = (
                trust_role_policy(roles[NodeKind.DRIVER].arn)
                if kind is NodeKind.ARCHIVER
                else assume_role_policy("ec2.amazonaws.com")
            )
            roles[kind] = IamRole(
                self,
                f"{kind.value}-role",
                name=f"{prefix}-{kind.value}",
                description=descriptions[kind],
                assume_role_policy=trust,
            )
        kafka = KafkaResources(
            partition=partition,
            region=config.region,
            account=account,
            cluster_arn=cluster_arn,
            cluster_name=cluster_name,
            cluster_uuid=cluster_uuid,
            topic_prefix=config.topic_prefix,
        )
        for kind, role in roles.items():
            IamRolePolicy(
                self,
                f"{kind.value}-policy",
                name="pipeline",
                role=role.id,
                policy=policy_json(
                    node_statements(
                        kind=kind,
                        environment=config.name,
                        region=config.region,
                        account=account,
                        partition=partition,
                        bucket_arn=bucket_arn,
                        data_key_arn=data_key_arn,
                        kafka=kafka,
                        metric_namespaces=(metric_names.NAMESPACE, layout.NODE_METRICS_NAMESPACE),
                        log_group_arns=log_group_arns,
                        archiver_role_arn=roles[NodeKind.ARCHIVER].arn,
                        kafka_secret_arn=config.kafka.secret_arn,
                        kafka_secret_key_arn=config.kafka.secret_key_arn,
                        archive_locked=config.archive_locked,
                        test_pipeline=config.test_pipeline is not None,
                        glue_tables=config.glue_tables,
                    )
                ),
            )
        self.role_arns: dict[NodeKind, str] = {kind: role.arn for kind, role in roles.items()}
        self.archiver_role_arn: str = roles[NodeKind.ARCHIVER].arn
        return {
            kind: IamInstanceProfile(
                self, f"{kind.value}-profile", name=f"{prefix}-{kind.value}", role=roles[kind].name
            )
            for kind in (NodeKind.DRIVER, NodeKind.WORKER)
        }


def _node_image(scope: Construct, image_id: str) -> DataAwsAmi:
    """The pinned image, which the plan checks is ours and built for this Spark version.

    By id, never ``most_recent``: a new image is a change to the deployment
    settings, rolled node by node, not whatever was built last.
    """
    tags = {**layout.AMI_TAGS, layout.AMI_SPARK_VERSION_TAG: versions().spark}
    return DataAwsAmi(
        scope,
        "spark-node-image",
        owners=["self"],
        filter=[
            DataAwsAmiFilter(name="image-id", values=[image_id]),
            DataAwsAmiFilter(name="name", values=[layout.AMI_NAME_PATTERN]),
            DataAwsAmiFilter(name="state", values=["available"]),
            *(DataAwsAmiFilter(name=f"tag:{key}", values=[value]) for key, value in tags.items()),
        ],
    )
