"""The job's Kafka options (infra/config/kafka_job.py): in SSM for run-job and the archiver,
the SCRAM secret readable by exactly the roles that read Kafka, the brokers' ports those of
the sign-ins the cluster takes, no client without a sign-in, and nothing of it where the
environment keeps the job's defaults."""

from __future__ import annotations

import dataclasses
import json

import pytest

from app import handoff
from infra.config import ConfigError, EnvironmentConfig, layout
from infra.config.environments import dev
from infra.config.kafka_job import KafkaJobSettings
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.synthesized_documents import KINDS, parameters, role_statements

SECRET = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:AmazonMSK_tablecast-dev-AbCdEf"
KEY = "arn:aws:kms:eu-west-1:000000000000:key/00000000-0000-4000-8000-000000000001"
SCRAM = KafkaJobSettings(
    auth="scram",  # type: ignore[arg-type]  # as an operator writes it
    secret_arn=SECRET,
    secret_key_arn=KEY,
    isolation_level="read_uncommitted",  # type: ignore[arg-type]
    options=("fetch.max.bytes=1048576", "client.id=tablecast, plant 7"),
    starting_offsets="latest",
    topics=("sensor-a", "sensor-b"),
    min_offsets_per_trigger=10_000,
    max_trigger_delay="5 minutes",
)
CA = (
    "arn:aws:acm-pca:eu-west-1:000000000000:"
    "certificate-authority/00000000-0000-4000-8000-000000000002"
)
CERTIFICATE = (
    "ssl.certificate.location=/etc/tablecast/kafka.crt",
    "ssl.key.location=/etc/tablecast/kafka.key",
)
TLS = KafkaJobSettings(
    auth="tls",  # type: ignore[arg-type]
    certificate_authority_arns=(CA,),
    options=CERTIFICATE,
)
SPARK = "${aws_security_group.spark-security-group.id}"
BROKERS = "${aws_security_group.brokers-security-group.id}"


def _dev(kafka: KafkaJobSettings) -> EnvironmentConfig:
    return dataclasses.replace(dev(load_settings(TESTING_SETTINGS)["dev"]), kafka=kafka)


@pytest.fixture(scope="module")
def synthesized_options(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, SynthesizedEnvironment]:
    """dev signing in with SCRAM and every option set, and a copy of dev with TLS (one synth)."""
    tls = dataclasses.replace(_dev(TLS), name="devtls")
    return synthesize([_dev(SCRAM), tls], tmp_path_factory.mktemp("kafka-options"))


@pytest.fixture
def scram_env(synthesized_options: dict[str, SynthesizedEnvironment]) -> SynthesizedEnvironment:
    return synthesized_options["dev"]


def _values(env: SynthesizedEnvironment) -> dict[str, str]:
    prefix = handoff.parameter_name(env.config.name, "")
    return {name.removeprefix(prefix): str(p["value"]) for name, p in parameters(env).items()}


def test_an_environment_with_the_jobs_defaults_writes_no_kafka_option_and_no_secret_grant(
    env: SynthesizedEnvironment,
) -> None:
    assert env.config.kafka == KafkaJobSettings()
    assert not set(_values(env)) & set(handoff.KAFKA_OPTIONAL)
    for kind in KINDS:
        statements = role_statements(env, kind)
        assert "ReadKafkaSecret" not in statements and "DecryptKafkaSecret" not in statements
        assert not any("secretsmanager:" in json.dumps(s) for s in statements.values())
    assert not env["kafka"].resources("aws_msk_scram_secret_association")
    (cluster,) = env["kafka"].resources("aws_msk_cluster").values()
    assert cluster["client_authentication"] == {"sasl": {"iam": True}, "unauthenticated": False}
    assert kafka_ports(env) == {
        "ingress": [layout.KAFKA_IAM_PORT],
        "egress": [layout.KAFKA_IAM_PORT],
    }


def kafka_ports(env: SynthesizedEnvironment) -> dict[str, list[int]]:
    """The brokers' ports the Spark nodes reach: in to the brokers, out of the Spark nodes."""
    network = env["network"]
    ingress = [
        rule
        for rule in network.resources("aws_vpc_security_group_ingress_rule").values()
        if rule["security_group_id"] == BROKERS
        and rule.get("referenced_security_group_id") == SPARK
    ]
    egress = [
        rule
        for rule in network.resources("aws_vpc_security_group_egress_rule").values()
        if rule["security_group_id"] == SPARK
        and rule.get("referenced_security_group_id") == BROKERS
    ]
    for rule in [*ingress, *egress]:
        assert rule["ip_protocol"] == "tcp" and rule["from_port"] == rule["to_port"]
    return {
        "ingress": sorted(rule["from_port"] for rule in ingress),
        "egress": sorted(rule["from_port"] for rule in egress),
    }


def test_the_kafka_options_reach_ssm_and_the_secret_is_granted_to_every_role_that_reads_kafka(
    scram_env: SynthesizedEnvironment,
) -> None:
    values = _values(scram_env)
    assert {name: values[name] for name in handoff.KAFKA_OPTIONAL if name in values} == {
        handoff.KAFKA_AUTH: "scram",
        handoff.BOOTSTRAP_BROKERS_SASL_SCRAM: values[handoff.BOOTSTRAP_BROKERS_SASL_SCRAM],
        handoff.KAFKA_SECRET_ARN: SECRET,
        handoff.KAFKA_ISOLATION_LEVEL: "read_uncommitted",
        handoff.KAFKA_OPTIONS: json.dumps(list(SCRAM.options), separators=(",", ":")),
        handoff.STARTING_OFFSETS: "latest",
        handoff.TOPICS: "sensor-a,sensor-b",
        handoff.MIN_OFFSETS_PER_TRIGGER: "10000",
        handoff.MAX_TRIGGER_DELAY: "5 minutes",
    }
    assert scram_env.follow(values[handoff.BOOTSTRAP_BROKERS_SASL_SCRAM]) == (
        "${aws_msk_cluster.cluster.bootstrap_brokers_sasl_scram}"
    )
    assert set(scram_env["handoff"].outputs()) >= {n.replace("-", "_") for n in values}
    # The driver plans, the workers' tasks read the ranges, the archiver copies: each may
    # read exactly the secret, and decrypt with its key through Secrets Manager only.
    for kind in KINDS:
        statements = role_statements(scram_env, kind)
        read, decrypt = statements["ReadKafkaSecret"], statements["DecryptKafkaSecret"]
        assert (read["Action"], read["Resource"]) == (["secretsmanager:GetSecretValue"], [SECRET])
        assert (decrypt["Action"], decrypt["Resource"]) == (["kms:Decrypt"], [KEY])
        assert decrypt["Condition"] == {
            "StringEquals": {"kms:ViaService": "secretsmanager.eu-west-1.amazonaws.com"}
        }
    (association,) = scram_env["kafka"].resources("aws_msk_scram_secret_association").values()
    assert association["secret_arn_list"] == [SECRET]
    (cluster,) = scram_env["kafka"].resources("aws_msk_cluster").values()
    assert cluster["client_authentication"] == {
        "sasl": {"iam": True, "scram": True},
        "unauthenticated": False,
    }
    # SCRAM's port, in both directions, beside IAM's (the tools); no other.
    ports = [layout.KAFKA_SCRAM_PORT, layout.KAFKA_IAM_PORT]
    assert kafka_ports(scram_env) == {"ingress": sorted(ports), "egress": sorted(ports)}


@pytest.mark.parametrize(
    ("kafka", "field"),
    [
        (KafkaJobSettings(auth="scram"), "kafka.secret_arn"),  # type: ignore[arg-type]
        (dataclasses.replace(SCRAM, secret_key_arn=""), "kafka.secret_key_arn"),
        (KafkaJobSettings(secret_arn=SECRET), "kafka.secret_arn"),  # iam takes no secret
        (KafkaJobSettings(auth="none"), "kafka.auth"),  # type: ignore[arg-type]
        (KafkaJobSettings(options=("isolation.level=read_uncommitted",)), "kafka.options"),
        (KafkaJobSettings(starting_offsets="yesterday"), "kafka.starting_offsets"),
        (KafkaJobSettings(topics=("other-a",)), "kafka.topics"),  # not the grants' topics
        (KafkaJobSettings(max_trigger_delay="5 minutes"), "kafka.max_trigger_delay"),
        # TLS only with client certificates, checked by MSK against the environment's CA.
        (KafkaJobSettings(auth="tls"), "kafka.auth"),  # type: ignore[arg-type]
        (
            dataclasses.replace(TLS, certificate_authority_arns=(SECRET,)),
            "kafka.certificate_authority_arns",
        ),
        (dataclasses.replace(TLS, options=CERTIFICATE[:1]), "kafka.options"),
        (KafkaJobSettings(certificate_authority_arns=(CA,)), "kafka.certificate_authority_arns"),
    ],
)
def test_a_wrong_kafka_option_fails_the_configuration_in_one_line(
    kafka: KafkaJobSettings, field: str
) -> None:
    with pytest.raises(ConfigError) as wrong:
        _dev(kafka)
    assert wrong.value.field == field and "\n" not in str(wrong.value)


def test_tls_opens_the_clusters_tls_listener_to_clients_with_certificates_only(
    synthesized_options: dict[str, SynthesizedEnvironment],
) -> None:
    env = synthesized_options["devtls"]
    values = _values(env)
    assert {name: values[name] for name in handoff.KAFKA_OPTIONAL if name in values} == {
        handoff.KAFKA_AUTH: "tls",
        handoff.BOOTSTRAP_BROKERS_TLS: values[handoff.BOOTSTRAP_BROKERS_TLS],
        handoff.KAFKA_OPTIONS: json.dumps(list(CERTIFICATE), separators=(",", ":")),
    }
    assert env.follow(values[handoff.BOOTSTRAP_BROKERS_TLS]) == (
        "${aws_msk_cluster.cluster.bootstrap_brokers_tls}"
    )
    (cluster,) = env["kafka"].resources("aws_msk_cluster").values()
    assert cluster["client_authentication"] == {
        "sasl": {"iam": True},
        "tls": {"certificate_authority_arns": [CA]},
        "unauthenticated": False,
    }
    ports = [layout.KAFKA_TLS_PORT, layout.KAFKA_IAM_PORT]
    assert kafka_ports(env) == {"ingress": sorted(ports), "egress": sorted(ports)}
    assert not any(
        "secretsmanager:" in json.dumps(s)
        for kind in KINDS
        for s in role_statements(env, kind).values()
    )
