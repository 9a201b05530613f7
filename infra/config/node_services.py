"""The AWS services the Spark nodes call, and so the VPC endpoints the network gives them.

The VPC has no route to the internet: a call to a service without an
endpoint in the VPC hangs until it times out. S3 goes through the gateway
endpoint; every other service the nodes' code, libraries and agents call
has an interface endpoint here. ``tests/infra/test_infra_node_routes.py``
derives the services from the code (the boto3 clients of ``app/`` and of
``ami/files``, pyiceberg's Glue catalog, the agents the image runs) and
fails when one lacks its endpoint, so a service added to the code fails
``make test`` until it is added here.
"""

from collections.abc import Mapping

from app.sources.kafka_client import KafkaAuth
from infra.config.model import EnvironmentConfig

GATEWAY_SERVICES: Mapping[str, str] = {
    "s3": "the bucket: output, archive, wheel, checkpoint copies (pyarrow, boto3, Spark)",
}
"""Services reached through a gateway endpoint (free, a route in the route table)."""

INTERFACE_SERVICES: Mapping[str, str] = {
    "ssm": "the hand-off's parameters (run-job, the archiver, the tools); the SSM agent",
    "ssmmessages": "the SSM agent: Session Manager",
    "ec2messages": "the SSM agent: Run Command (deploy, start, stop)",
    "monitoring": "CloudWatch: the job's and the archiver's metrics, hdfs-health, the agent's",
    "logs": "CloudWatch Logs: the CloudWatch agent ships the nodes' logs",
    "sts": "the driver assumes the archiver's role (archiver-credentials)",
    "glue": "pyiceberg's Glue catalog: the output's Iceberg table (run --glue-database)",
    "ec2": "tablecast-ops on the driver finds the driver by its tag (deploy, start, stop)",
}
"""Interface endpoints every environment has, each with the reason the nodes need it."""

SCRAM_SERVICES: Mapping[str, str] = {
    "secretsmanager": "the SCRAM sign-in's user name and password (kafka-secret-arn)",
}
"""Interface endpoints of an environment whose job signs in to Kafka with SCRAM only."""


def interface_endpoint_services(config: EnvironmentConfig) -> tuple[str, ...]:
    """The interface endpoints ``config``'s network has, by endpoint service name
    (``com.amazonaws.<region>.<name>``)."""
    services = dict(INTERFACE_SERVICES)
    if config.kafka.auth == KafkaAuth.SCRAM:
        services |= SCRAM_SERVICES
    return tuple(services)
