"""What a synthesized environment's stacks hold, read alike by every test: the hand-off's
SSM parameters, the policy statements of the nodes' and the archiver's roles."""

from infra.testing import Document, SynthesizedEnvironment, policy_statements

KINDS = ("driver", "worker", "archiver")
"""The roles that read Kafka and the bucket: the driver's, the workers' and the archiver's."""


def parameters(env: SynthesizedEnvironment) -> dict[str, Document]:
    """The hand-off's SSM parameters, by name."""
    return {
        parameter["name"]: parameter
        for parameter in env["handoff"].resources("aws_ssm_parameter").values()
    }


def role_statements(env: SynthesizedEnvironment, kind: str) -> dict[str, Document]:
    """The statements of the driver's, the workers' or the archiver's role, by Sid."""
    (policy,) = [
        policy
        for policy in env["spark"].resources("aws_iam_role_policy").values()
        if policy["role"] == f"${{aws_iam_role.{kind}-role.id}}"
    ]
    return {statement["Sid"]: statement for statement in policy_statements(policy["policy"])}
