"""What a deploy leaves in moto, read back: the version, the scripts sent, the declared jobs."""

from __future__ import annotations

from app import handoff
from app.ops.aws import AwsClients
from tests.ops.conftest import Environment


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
