"""A deploy as the tests run it, and what it leaves in moto, read back: the version, the
scripts sent, the declared jobs."""

from __future__ import annotations

from typing import Any

from app import handoff
from app.ops import deploy
from app.ops.aws import AwsClients
from tests.ops.conftest import Environment


def deploy_polled(
    aws: AwsClients, environment: Environment, *, heartbeat_timeout_s: float = 20, **options: Any
) -> deploy.DeployReport:
    """``deploy.deploy`` to ``environment``, polling every 50 ms: a driver's stand-in
    (tests/ops/standin.py) answers its restart with a heartbeat well within 20 s."""
    return deploy.deploy(
        aws,
        environment.name,
        heartbeat_timeout_s=heartbeat_timeout_s,
        poll_s=0.05,
        **options,
    )


def job_version(aws: AwsClients, env: Environment) -> str:
    name = handoff.parameter_name(env.name, handoff.JOB_VERSION)
    return aws.ssm.get_parameter(Name=name)["Parameter"]["Value"]


def commands(aws: AwsClients, env: Environment) -> list[str]:
    """The scripts sent to the driver, oldest first."""
    sent = aws.ssm.list_commands(InstanceId=env.driver)["Commands"]
    assert all(c["DocumentName"] == "AWS-RunShellScript" for c in sent)
    assert all(c["InstanceIds"] == [env.driver] for c in sent)
    return ["\n".join(c["Parameters"]["commands"]) for c in sent]


def declare_jobs(aws: AwsClients, environment: Environment, *names: str) -> None:
    """The hand-off's ``jobs``, as infra writes it where the settings declare jobs."""
    aws.ssm.put_parameter(
        Name=handoff.parameter_name(environment.name, handoff.JOBS),
        Value=",".join(names),
        Type="String",
    )
