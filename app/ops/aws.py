"""The AWS clients the tools use, made once per command from one boto3 session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_ssm import SSMClient


@dataclass(frozen=True, slots=True)
class AwsClients:
    ssm: SSMClient
    s3: S3Client
    cloudwatch: CloudWatchClient
    ec2: EC2Client

    @classmethod
    def create(cls, region: str | None = None) -> AwsClients:
        """Clients for ``region`` (or the default region of the AWS configuration)."""
        return cls.of(boto3.session.Session(region_name=region))

    @classmethod
    def of(cls, session: boto3.session.Session, endpoint_url: str | None = None) -> AwsClients:
        """Clients of ``session``, at ``endpoint_url`` where a server stands in for AWS."""
        return cls(
            ssm=session.client("ssm", endpoint_url=endpoint_url),
            s3=session.client("s3", endpoint_url=endpoint_url),
            cloudwatch=session.client("cloudwatch", endpoint_url=endpoint_url),
            ec2=session.client("ec2", endpoint_url=endpoint_url),
        )
