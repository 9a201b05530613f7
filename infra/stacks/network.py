"""The network: a private VPC with no route to or from the internet.

Broker subnets in every zone, one Spark subnet in the first zone, an S3
gateway endpoint (reaching the environment's bucket and the SSM agent's
only) and an interface endpoint for every other AWS service the nodes call
(``infra/config/node_services.py``), and the security groups that decide
who talks to whom: the Spark nodes reach the brokers on the ports of the
sign-ins the cluster takes (IAM's, and the job's TLS or SCRAM), and so do
producers in the private networks the operator names (``producer_networks``:
a CIDR reached through an accepted VPC peering or a transit gateway), on the
IAM port only.
"""

from cdktf_cdktf_provider_aws.cloudwatch_log_group import CloudwatchLogGroup
from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from cdktf_cdktf_provider_aws.default_security_group import DefaultSecurityGroup
from cdktf_cdktf_provider_aws.ec2_transit_gateway_vpc_attachment import (
    Ec2TransitGatewayVpcAttachment,
)
from cdktf_cdktf_provider_aws.flow_log import FlowLog
from cdktf_cdktf_provider_aws.iam_role import IamRole
from cdktf_cdktf_provider_aws.iam_role_policy import IamRolePolicy
from cdktf_cdktf_provider_aws.route import Route
from cdktf_cdktf_provider_aws.route_table import RouteTable
from cdktf_cdktf_provider_aws.route_table_association import RouteTableAssociation
from cdktf_cdktf_provider_aws.security_group import SecurityGroup
from cdktf_cdktf_provider_aws.subnet import Subnet
from cdktf_cdktf_provider_aws.vpc import Vpc
from cdktf_cdktf_provider_aws.vpc_endpoint import VpcEndpoint
from cdktf_cdktf_provider_aws.vpc_security_group_egress_rule import VpcSecurityGroupEgressRule
from cdktf_cdktf_provider_aws.vpc_security_group_ingress_rule import VpcSecurityGroupIngressRule
from constructs import Construct

from infra.config import EnvironmentConfig, layout
from infra.config.node_services import interface_endpoint_services
from infra.constructs import EncryptionKey
from infra.constructs.node_permissions import S3_ENDPOINT_ACTIONS
from infra.constructs.policies import Statement, allow, assume_role_policy, policy_json
from infra.stacks.base import EnvironmentStack

# The SSM agent's own buckets of the region (its documents, updates, plugins):
# the S3 endpoint's policy lets the nodes read these and nothing else of AWS's.
SSM_AGENT_BUCKETS = (
    "aws-ssm-{region}",
    "amazon-ssm-{region}",
    "amazon-ssm-packages-{region}",
    "{region}-birdwatcher-prod",
    "aws-ssm-distributor-file-{region}",
    "aws-ssm-document-attachments-{region}",
    "patch-baseline-snapshot-{region}",
)


class NetworkStack(EnvironmentStack):
    """``tablecast-<env>-network``: VPC, subnets, endpoints, security groups, flow logs."""

    def __init__(self, scope: Construct, *, config: EnvironmentConfig) -> None:
        """Create the network of ``config``'s environment.

        :param config: the environment.
        """
        super().__init__(scope, config=config, component="network")
        prefix = config.resource_prefix
        plan = config.subnets
        self.vpc = Vpc(
            self,
            "vpc",
            cidr_block=config.vpc_cidr,
            # MSK and the interface endpoints resolve through the VPC's DNS.
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags={"Name": prefix},
        )
        # The default group stays empty, so nothing lands in it by accident.
        DefaultSecurityGroup(self, "default-security-group", vpc_id=self.vpc.id)
        self.broker_subnet_ids: list[str] = []
        for zone, cidr in zip(config.availability_zones, plan.broker_subnets, strict=True):
            subnet = self._subnet(f"brokers-{zone}", zone, cidr)
            self.broker_subnet_ids.append(subnet.id)
        # A Spark subnet in every zone, used or not: moving Spark to another
        # zone (the deployment settings' spark_zone) creates and moves no subnet.
        # The first zone's keeps the construct id "spark" (the first zone's
        # subnet of every deployed environment), so that no running cluster's
        # subnet is replaced.
        spark_subnet_ids = {
            zone: self._subnet(
                "spark" if index == 0 else f"spark-{zone}", zone, cidr, name=f"spark-{zone}"
            ).id
            for index, (zone, cidr) in enumerate(
                zip(config.availability_zones, plan.spark_subnets, strict=True)
            )
        }
        self.spark_subnet_id: str = spark_subnet_ids[config.spark_availability_zone]
        self.spark_subnet_cidr = plan.spark_subnet
        # No routes but the VPC's own and the S3 endpoint's: nothing public.
        route_table = RouteTable(
            self, "private-routes", vpc_id=self.vpc.id, tags={"Name": f"{prefix}-private"}
        )
        for index, subnet_id in enumerate([*self.broker_subnet_ids, *spark_subnet_ids.values()]):
            RouteTableAssociation(
                self, f"private-routes-{index}", route_table_id=route_table.id, subnet_id=subnet_id
            )
        account = DataAwsCallerIdentity(self, "account").account_id
        partition = DataAwsPartition(self, "partition").partition
        s3_endpoint = VpcEndpoint(
            self,
            "s3-endpoint",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{config.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[route_table.id],
            policy=policy_json(
                s3_endpoint_statements(config, account=account, partition=partition)
            ),
            tags={"Name": f"{prefix}-s3"},
        )
        self._security_groups(s3_prefix_list_id=s3_endpoint.prefix_list_id)
        self._producer_access(route_table)
        for service in interface_endpoint_services(config):
            VpcEndpoint(
                self,
                f"{service}-endpoint",
                vpc_id=self.vpc.id,
                service_name=f"com.amazonaws.{config.region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                # Only Spark nodes use them: one in each zone's Spark subnet, so
                # that they are there wherever Spark runs.
                subnet_ids=list(spark_subnet_ids.values()),
                security_group_ids=[self.endpoint_security_group_id],
                tags={"Name": f"{prefix}-{service}"},
            )
        self._flow_logs(account)

    def _subnet(self, id_: str, zone: str, cidr: str, *, name: str | None = None) -> Subnet:
        return Subnet(
            self,
            id_,
            vpc_id=self.vpc.id,
            availability_zone=zone,
            cidr_block=cidr,
            map_public_ip_on_launch=False,
            tags={"Name": f"{self.config.resource_prefix}-{name or id_}"},
        )

    def _security_groups(self, *, s3_prefix_list_id: str) -> None:
        prefix = self.config.resource_prefix
        brokers = self._group("brokers", "MSK brokers: Kafka over TLS from Spark nodes")
        spark = self._group("spark", "Spark nodes: each other, the brokers, S3 and endpoints")
        endpoints = self._group("endpoints", "Interface endpoints: HTTPS from Spark nodes")
        self.brokers_group = brokers
        self.broker_security_group_id: str = brokers.id
        self.spark_security_group_id: str = spark.id
        self.endpoint_security_group_id: str = endpoints.id
        # Rules as resources of their own: the groups refer to each other. One
        # port per sign-in the cluster takes, in both directions; IAM's keeps the
        # ids it always had, so that no deployed rule is replaced.
        for port in self.config.kafka.ports:
            suffix = "" if port == layout.KAFKA_IAM_PORT else f"-{port}"
            self._ingress(
                f"brokers-from-spark{suffix}",
                brokers,
                source=spark,
                port=port,
                description=f"Kafka {_LISTENERS[port]} from Spark nodes",
            )
            self._egress(
                f"spark-to-brokers{suffix}",
                spark,
                port=port,
                destination=brokers,
                description=f"Kafka {_LISTENERS[port]} to the brokers",
            )
        self._ingress(
            "endpoints-from-spark",
            endpoints,
            source=spark,
            port=layout.HTTPS_PORT,
            description="HTTPS to AWS APIs from Spark nodes",
        )
        # Spark RPC, block transfers and HDFS use many ports between nodes.
        VpcSecurityGroupIngressRule(
            self,
            "spark-from-spark",
            security_group_id=spark.id,
            referenced_security_group_id=spark.id,
            ip_protocol="-1",
            description="Spark and HDFS between cluster nodes",
            tags={"Name": f"{prefix}-spark-from-spark"},
        )
        VpcSecurityGroupEgressRule(
            self,
            "spark-to-spark",
            security_group_id=spark.id,
            referenced_security_group_id=spark.id,
            ip_protocol="-1",
            description="Spark and HDFS between cluster nodes",
            tags={"Name": f"{prefix}-spark-to-spark"},
        )
        self._egress(
            "spark-to-endpoints",
            spark,
            port=layout.HTTPS_PORT,
            destination=endpoints,
            description="HTTPS to AWS API endpoints",
        )
        VpcSecurityGroupEgressRule(
            self,
            "spark-to-s3",
            security_group_id=spark.id,
            prefix_list_id=s3_prefix_list_id,
            ip_protocol="tcp",
            from_port=layout.HTTPS_PORT,
            to_port=layout.HTTPS_PORT,
            description="HTTPS to S3 through the gateway endpoint",
            tags={"Name": f"{prefix}-spark-to-s3"},
        )

    def _producer_access(self, route_table: RouteTable) -> None:
        """Each producer network: Kafka over TLS with IAM in, and a route back."""
        networks = self.config.deployment.producer_networks
        attachments: dict[str, Ec2TransitGatewayVpcAttachment] = {}
        for gateway_id in sorted({n.via for n in networks if n.via.startswith("tgw-")}):
            attachments[gateway_id] = Ec2TransitGatewayVpcAttachment(
                self,
                f"attachment-{gateway_id}",
                transit_gateway_id=gateway_id,
                vpc_id=self.vpc.id,
                # One subnet per zone, as a transit gateway attachment wants.
                subnet_ids=self.broker_subnet_ids,
                tags={"Name": f"{self.config.resource_prefix}-{gateway_id}"},
            )
        for network in networks:
            VpcSecurityGroupIngressRule(
                self,
                f"brokers-from-{network.name}",
                security_group_id=self.brokers_group.id,
                cidr_ipv4=network.cidr,
                ip_protocol="tcp",
                from_port=layout.KAFKA_IAM_PORT,
                to_port=layout.KAFKA_IAM_PORT,
                description=f"Kafka TLS+IAM from producers in {network.name}",
                tags={"Name": f"{self.config.resource_prefix}-brokers-from-{network.name}"},
            )
            gateway = attachments.get(network.via)
            Route(
                self,
                f"route-to-{network.name}",
                route_table_id=route_table.id,
                destination_cidr_block=network.cidr,
                vpc_peering_connection_id=network.via if gateway is None else None,
                transit_gateway_id=network.via if gateway is not None else None,
                depends_on=[gateway] if gateway is not None else None,
            )

    def _group(self, name: str, description: str) -> SecurityGroup:
        # Terraform removes the default allow-all egress rule of a new group;
        # every rule these groups have is below.
        return SecurityGroup(
            self,
            f"{name}-security-group",
            name=f"{self.config.resource_prefix}-{name}",
            description=description,
            vpc_id=self.vpc.id,
            tags={"Name": f"{self.config.resource_prefix}-{name}"},
        )

    def _ingress(
        self, name: str, group: SecurityGroup, *, source: SecurityGroup, port: int, description: str
    ) -> None:
        VpcSecurityGroupIngressRule(
            self,
            name,
            security_group_id=group.id,
            referenced_security_group_id=source.id,
            ip_protocol="tcp",
            from_port=port,
            to_port=port,
            description=description,
            tags={"Name": f"{self.config.resource_prefix}-{name}"},
        )

    def _egress(
        self,
        name: str,
        group: SecurityGroup,
        *,
        port: int,
        destination: SecurityGroup,
        description: str,
    ) -> None:
        VpcSecurityGroupEgressRule(
            self,
            name,
            security_group_id=group.id,
            referenced_security_group_id=destination.id,
            ip_protocol="tcp",
            from_port=port,
            to_port=port,
            description=description,
            tags={"Name": f"{self.config.resource_prefix}-{name}"},
        )

    def _flow_logs(self, account: str) -> None:
        config = self.config
        prefix = config.resource_prefix
        key = EncryptionKey(
            self,
            "flow-logs-key",
            alias=f"{prefix}-network",
            description=f"{prefix} VPC flow logs",
            region=config.region,
            allow_cloudwatch_logs=True,
        )
        log_group = CloudwatchLogGroup(
            self,
            "flow-logs",
            name=f"/tablecast/{config.name}/vpc-flow-logs",
            kms_key_id=key.arn,
            retention_in_days=layout.LOG_RETENTION_DAYS,
        )
        role = IamRole(
            self,
            "flow-logs-role",
            name=f"{prefix}-vpc-flow-logs",
            assume_role_policy=assume_role_policy(
                "vpc-flow-logs.amazonaws.com", source_account=account
            ),
        )
        IamRolePolicy(
            self,
            "flow-logs-policy",
            name="write-flow-logs",
            role=role.id,
            policy=policy_json(
                [
                    allow(
                        "WriteFlowLogs",
                        ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                        [log_group.arn, f"{log_group.arn}:*"],
                    )
                ]
            ),
        )
        FlowLog(
            self,
            "flow-log",
            vpc_id=self.vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=log_group.arn,
            iam_role_arn=role.arn,
        )


_LISTENERS = {
    layout.KAFKA_IAM_PORT: "TLS+IAM",
    layout.KAFKA_TLS_PORT: "TLS with client certificates",
    layout.KAFKA_SCRAM_PORT: "TLS+SCRAM",
}


def s3_endpoint_statements(
    config: EnvironmentConfig, *, account: str, partition: str
) -> list[Statement]:
    """What goes through the S3 endpoint: the environment's bucket, what the nodes do there,
    and reads of the SSM agent's buckets; no other bucket, this account's or anyone's."""
    bucket = (
        f"arn:{partition}:s3:::{layout.bucket_name(config.resource_prefix, account, config.region)}"
    )
    agent = [
        f"arn:{partition}:s3:::{name.format(region=config.region)}/*" for name in SSM_AGENT_BUCKETS
    ]
    # An endpoint policy's statements name their principal: anyone in the VPC, whose own
    # policies then decide what of it they may do.
    return [
        {
            **allow("ThisEnvironmentsBucket", S3_ENDPOINT_ACTIONS, [bucket, f"{bucket}/*"]),
            "Principal": "*",
        },
        {**allow("SsmAgentBuckets", ["s3:GetObject"], agent), "Principal": "*"},
    ]
