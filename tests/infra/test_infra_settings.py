"""The operator's deployment settings: endpoints that reach a person, a backend, an image."""

from pathlib import Path

import pytest

from infra.config import ConfigError, EndpointKind
from infra.config.environments import configure, dev
from infra.config.settings import (
    TESTING_SETTINGS,
    alarm_endpoint,
    load_settings,
    parse_settings,
    reserved_domain,
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("oncall@tablecast-ops.net", EndpointKind.EMAIL),
        ("https://events.pagerduty.com/integration/abc/enqueue", EndpointKind.HTTPS),
        ("arn:aws:sns:eu-west-1:111122223333:pager", EndpointKind.TOPIC),
    ],
)
def test_an_endpoint_is_an_email_an_https_url_or_a_topic(text: str, kind: EndpointKind) -> None:
    endpoint = alarm_endpoint(text)
    assert (endpoint.kind, endpoint.address) == (kind, text)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("tablecast-oncall@example.com", "reserved or example domain"),
        ("ops@mail.example.org", "reserved or example domain"),
        ("ops@team.example", "reserved or example domain"),
        ("ops@alerts.test", "reserved or example domain"),
        ("ops@pager.invalid", "reserved or example domain"),
        ("ops@localhost.localdomain.local", "reserved or example domain"),
        ("https://hooks.example.net/alarms", "reserved or example domain"),
        ("https://127.0.0.1/alarms", "reserved or example domain"),
        ("http://pager.tablecast-ops.net/alarms", "HTTPS only"),
        ("arn:aws:sns:eu-west-1:123:pager", "not an SNS topic ARN"),
        ("oncall", "not an email address, an https:// URL or an SNS topic ARN"),
    ],
)
def test_endpoints_that_reach_nobody_are_refused(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        alarm_endpoint(text)


def test_reserved_names() -> None:
    assert reserved_domain("example.com")
    assert reserved_domain("EXAMPLE.COM.")
    assert reserved_domain("10.0.0.1")
    assert not reserved_domain("examples.com")
    assert not reserved_domain("company.net")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    return path


PROD = """
[prod]
account_id = "111122223333"
spark_image_id = "ami-0123456789abcdef0"
alarm_endpoints = ["oncall@tablecast-ops.net", "arn:aws:sns:eu-west-1:111122223333:pager"]
state_backend = { bucket = "company-terraform-state", key_prefix = "data/tablecast" }
"""


def test_settings_file_supplies_a_shared_environment(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, PROD))
    (prod,) = configure(settings, ["prod"])
    assert prod.deployment.account_id == "111122223333"
    assert [e.kind for e in prod.deployment.alarm_endpoints] == [
        EndpointKind.EMAIL,
        EndpointKind.TOPIC,
    ]
    assert prod.deployment.state_backend is not None
    assert prod.deployment.state_backend.key_prefix == "data/tablecast"


@pytest.mark.parametrize(
    ("text", "field", "complaint"),
    [
        (PROD.replace('"111122223333"\n', '"1234"\n', 1), "account_id", "12-digit"),
        (PROD.replace("ami-0123456789abcdef0", "latest"), "spark_image_id", "not an image id"),
        (
            PROD.replace("oncall@tablecast-ops.net", "oncall@example.com"),
            "alarm_endpoints",
            "reserved or example domain",
        ),
        (PROD + 'colour = "blue"\n', "colour", "is not a setting"),
        (
            PROD.replace("company-terraform-state", "Bad_Bucket"),
            "state_backend",
            "not an S3 bucket name",
        ),
        (
            PROD + 'producer_networks = [{ name = "p", cidr = "10.9.0.0/16", via = "igw-1" }]\n',
            "producer_networks",
            "not a pcx-... or tgw-... id",
        ),
        (
            PROD + 'topic_admin_principals = ["arn:aws:iam::111122223333:user/bob"]\n',
            "topic_admin_principals",
            "not an IAM role or root ARN",
        ),
    ],
)
def test_bad_settings_fail_naming_the_file_and_key(
    tmp_path: Path, text: str, field: str, complaint: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert caught.value.environment == "prod"
    assert caught.value.field == f"{field} (in {path})"
    assert complaint in caught.value.problem
    assert "\n" not in str(caught.value)


def test_a_shared_environment_without_settings_says_how_to_supply_them(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, PROD))
    with pytest.raises(ConfigError) as caught:
        configure(settings, ["dev"])
    message = str(caught.value)
    assert message.startswith("environment 'dev': deployment settings: none given: ")
    assert "set TABLECAST_SETTINGS to a TOML file with a [dev] table" in message
    assert "\n" not in message


def test_producer_networks_must_be_private_and_apart_from_the_vpc(tmp_path: Path) -> None:
    overlapping = PROD + (
        'producer_networks = [{ name = "p", cidr = "10.42.128.0/20", via = "pcx-0123456789" }]\n'
    )
    with pytest.raises(ConfigError, match=r"overlaps the VPC 10\.42\.0\.0/16"):
        configure(load_settings(write(tmp_path, overlapping)), ["prod"])
    public = (
        PROD + 'producer_networks = [{ name = "p", cidr = "8.8.0.0/16", via = "pcx-0123456789" }]\n'
    )
    with pytest.raises(ConfigError, match="not a private range"):
        configure(load_settings(write(tmp_path, public)), ["prod"])


def test_testing_settings_belong_to_no_account() -> None:
    for settings in load_settings(TESTING_SETTINGS).values():
        assert settings.account_id == "000000000000"


def test_unknown_environment_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such environment"):
        configure({}, ["qa"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")


def test_an_alarm_topic_in_another_region_fails_at_synth_in_one_line() -> None:
    """CloudWatch alarms publish only to topics of their own region (else apply fails)."""
    settings = parse_settings(
        "dev",
        {
            "account_id": "000000000000",
            "spark_image_id": "ami-0123456789abcdef0",
            "alarm_endpoints": ["arn:aws:sns:us-east-1:000000000000:pager"],
            "state_backend": {"bucket": "state"},
        },
        source="t.toml",
    )
    with pytest.raises(ConfigError) as refused:
        dev(settings)
    message = str(refused.value)
    assert "\n" not in message
    assert "alarm_endpoints" in message and "us-east-1" in message and "eu-west-1" in message
