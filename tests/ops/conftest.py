"""Fixtures of the operator tools' tests: moto for AWS (in-process, ``mock_aws``).

The tansu broker for Kafka (``broker``) is the whole suite's: tests/conftest.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from app import handoff, metric_names
from app.ops.aws import AwsClients
from app.ops.environment import write_handoff
from app.ops.wheel import Wheel, build_wheel

REGION: Final = "eu-west-1"
ENVIRONMENT: Final = "dev"
BUCKET = "tablecast-dev-pipeline-test"
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def aws(moto_aws: None) -> AwsClients:
    """Clients of moto in this process (tests/conftest.py's ``moto_aws``)."""
    return AwsClients.create(REGION)


@dataclass(frozen=True)
class Environment:
    name: str
    bucket: str
    driver: str
    artifacts_uri: str


@pytest.fixture
def environment(aws: AwsClients) -> Environment:
    """What ``infra/`` leaves behind for the tools: bucket, driver node, hand-off."""
    aws.s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    image = aws.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    driver = aws.ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]
    write_handoff(
        aws.ssm,
        ENVIRONMENT,
        {
            handoff.BOOTSTRAP_BROKERS_IAM: "b-1.msk.example:9098,b-2.msk.example:9098",
            handoff.BUCKET: BUCKET,
            handoff.OUTPUT_URI: f"s3://{BUCKET}/output",
            handoff.ARCHIVE_URI: f"s3://{BUCKET}/archive",
            handoff.ARTIFACTS_URI: f"s3://{BUCKET}/artifacts",
            handoff.CHECKPOINT_BACKUP_URI: f"s3://{BUCKET}/checkpoint-backups",
            handoff.CHECKPOINT_URI: "hdfs://10.0.1.23:8020/tablecast/checkpoint",
            handoff.TOPIC_PATTERN: "^sensor-.+",
            handoff.TRIGGER: "1 minute",
            handoff.METRIC_NAMESPACE: metric_names.NAMESPACE,
            handoff.DRIVER_ADDRESS: "10.0.1.23",
            handoff.DRIVER_INSTANCE_ID: driver["InstanceId"],
            handoff.JOB_VERSION: "none",
            handoff.JOB_WHEEL_SHA256: "none",
            handoff.RETENTION_HOURS: "96",
            handoff.REPLICATION_FACTOR: "1",
            handoff.REGION: REGION,
            handoff.GLUE_DATABASE: "tablecast_dev",
            handoff.COMPACT_EVERY: "1 day",
        },
    )
    return Environment(ENVIRONMENT, BUCKET, driver["InstanceId"], f"s3://{BUCKET}/artifacts")


@pytest.fixture(scope="session")
def job_wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    """The project's wheel, built once (pip with the pinned setuptools, a few seconds)."""
    return build_wheel(PROJECT, tmp_path_factory.mktemp("dist"))
