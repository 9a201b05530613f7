"""A route for every AWS service the nodes call, derived from the code (tests/infra/node_calls.py).

The VPC has no internet route: a service without an endpoint is a call that
hangs on AWS and answers at once on moto. Every synthesized environment and
test pipeline, and an environment of each Kafka sign-in, must have an
endpoint (interface, or S3's gateway) for each service the code calls, and
no interface endpoint that nothing calls (each costs per zone and hour).
"""

import dataclasses

import pytest

from app.sources.kafka_client import KafkaAuth
from infra.config.environments import dev
from infra.config.kafka_job import KafkaJobSettings
from infra.config.node_services import GATEWAY_SERVICES, interface_endpoint_services
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.node_calls import Call, calls_in, node_calls

SECRET = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:AmazonMSK_tablecast-x-AbCdEf"
KEY = "arn:aws:kms:eu-west-1:000000000000:key/00000000-0000-4000-8000-000000000001"
CA = (
    "arn:aws:acm-pca:eu-west-1:000000000000:"
    "certificate-authority/00000000-0000-4000-8000-000000000002"
)
SIGN_INS = {
    "devscram": KafkaJobSettings(auth=KafkaAuth.SCRAM, secret_arn=SECRET, secret_key_arn=KEY),
    "devtls": KafkaJobSettings(
        auth=KafkaAuth.TLS,
        certificate_authority_arns=(CA,),
        options=("ssl.certificate.location=/etc/c.pem", "ssl.key.location=/etc/k.pem"),
    ),
}


@pytest.fixture(scope="module")
def calls() -> list[Call]:
    return node_calls()


@pytest.fixture(scope="module")
def sign_ins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthesizedEnvironment]:
    """dev with each sign-in besides IAM (one synth)."""
    base = dev(load_settings(TESTING_SETTINGS)["dev"])
    configs = [dataclasses.replace(base, name=n, kafka=k) for n, k in SIGN_INS.items()]
    return synthesize(configs, tmp_path_factory.mktemp("sign-ins"))


def endpoints(env: SynthesizedEnvironment) -> dict[str, set[str]]:
    """The network's endpoints by type: ``{"Gateway": {"s3"}, "Interface": {...}}``."""
    found: dict[str, set[str]] = {}
    prefix = f"com.amazonaws.{env.config.region}."
    for endpoint in env["network"].resources("aws_vpc_endpoint").values():
        service = endpoint["service_name"].removeprefix(prefix)
        found.setdefault(endpoint["vpc_endpoint_type"], set()).add(service)
    return found


def required(calls: list[Call], auth: KafkaAuth) -> set[str]:
    return {call.endpoint for call in calls if call.only_with in (None, auth)}


def check_routes(env: SynthesizedEnvironment, calls: list[Call]) -> None:
    found = endpoints(env)
    needed = required(calls, env.config.kafka.auth)
    missing = needed - found["Gateway"] - found["Interface"]
    assert not missing, {
        service: [c.where for c in calls if c.endpoint == service] for service in missing
    }
    # No interface endpoint nobody calls, and S3 through the (free) gateway.
    assert found["Interface"] == needed - found["Gateway"]
    assert found["Gateway"] == set(GATEWAY_SERVICES) == {"s3"}
    assert found["Interface"] == set(interface_endpoint_services(env.config))


def test_every_service_the_nodes_call_has_a_route(
    env: SynthesizedEnvironment, calls: list[Call]
) -> None:
    check_routes(env, calls)


@pytest.mark.parametrize("name", sorted(SIGN_INS))
def test_every_sign_in_has_a_route_for_what_it_calls(
    name: str, sign_ins: dict[str, SynthesizedEnvironment], calls: list[Call]
) -> None:
    env = sign_ins[name]
    check_routes(env, calls)
    scram = env.config.kafka.auth == KafkaAuth.SCRAM
    assert ("secretsmanager" in endpoints(env)["Interface"]) is scram


def test_interface_endpoints_sit_in_every_spark_subnet_behind_their_group(
    env: SynthesizedEnvironment,
) -> None:
    spark_subnets = {
        f"${{aws_subnet.{name}.id}}"
        for name, subnet in env["network"].resources("aws_subnet").items()
        if subnet["tags"]["Name"].startswith(f"{env.config.resource_prefix}-spark-")
    }
    for endpoint in env["network"].resources("aws_vpc_endpoint").values():
        if endpoint["vpc_endpoint_type"] != "Interface":
            continue
        assert endpoint["private_dns_enabled"] is True
        assert set(endpoint["subnet_ids"]) == spark_subnets
        assert endpoint["security_group_ids"] == [
            "${aws_security_group.endpoints-security-group.id}"
        ]


def test_the_derivation_finds_what_the_code_calls(calls: list[Call]) -> None:
    """Each way a call is found, on a call the code makes: if the reading breaks, this fails."""
    where = {(call.service, call.only_with): call.where for call in calls}
    assert where[("glue", None)].startswith("app/table/catalog.py:")  # pyiceberg's Glue catalog
    assert where[("secretsmanager", KafkaAuth.SCRAM)].startswith("app/sources/kafka_client.py:")
    assert ("secretsmanager", None) not in where
    assert where[("sts", None)].startswith("ami/files/bin/archiver-credentials:")  # a heredoc
    assert where[("ssmmessages", None)].startswith("app/ops/remote.py:")  # Run Command's agent
    assert where[("logs", None)] == "ami/files/templates/cloudwatch-agent.json.tmpl"
    assert where[("s3", None)]
    # The pipeline on one machine publishes alarms to SNS; no node does.
    assert not [call for call in calls if call.where.startswith("app/local/")]
    assert "sns" not in {call.service for call in calls}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('import boto3\nboto3.client("kinesis")', [("kinesis", None)]),
        ('s = boto3.session.Session()\ns.resource("dynamodb")', [("dynamodb", None)]),
        ('def tls_key():\n    return boto3.client("acm-pca")', [("acm-pca", KafkaAuth.TLS)]),
        ('catalog = {"type": "glue", "glue.region": "r"}', [("glue", None)]),
        ("from pyarrow.fs import S3FileSystem\nS3FileSystem()", [("s3", None)]),
        ('{"type": "sql"}', []),
        ("echo not python", []),
    ],
)
def test_a_call_of_each_kind_is_found(
    source: str, expected: list[tuple[str, KafkaAuth | None]]
) -> None:
    assert [(c.service, c.only_with) for c in calls_in(source, "x.py")] == expected


def test_a_service_added_to_the_code_without_a_route_fails(
    synthesized: dict[str, SynthesizedEnvironment], calls: list[Call]
) -> None:
    added = [*calls, *calls_in('boto3.client("kinesis")', "app/new.py")]
    with pytest.raises(AssertionError, match=r"kinesis.*app/new\.py"):
        check_routes(synthesized["dev"], added)
