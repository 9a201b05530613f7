"""``tablecast-ops pipelines``: every declared test pipeline with age, expiry, owner, cost and
what of it is deployed, and the deployed ones nobody declares (moto's tagging API)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from app.ops import cli
from app.ops.aws import AwsClients
from app.ops.pipelines import PRICES, load_prices
from infra.config.node_services import interface_endpoint_services
from infra.config.pipeline_listing import declarations
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.config.sizing import ROOT_VOLUME_GIB
from infra.config.test_pipelines import pipeline_configs
from tests.ops.conftest import PROJECT

BASE_TEXT = TESTING_SETTINGS.read_text(encoding="utf-8").split("[test_pipelines.")[0]
PIPELINES = """
[test_pipelines.late-exp]
owner = "bea@tablecast-testing.net"
purpose = "second"
created = 2026-11-20
expires = 2026-12-20
spark_worker_count = 3

[test_pipelines.early-exp]
owner = "al@tablecast-testing.net"
purpose = "first"
created = 2026-11-01
expires = 2026-11-25
"""
# Round prices, so that each term of the estimate shows in the total.
PRICES_TEXT = """
as_of = 2026-01-02
region = "eu-west-1"
currency = "USD"
[ec2_per_hour]
"m7i.large" = 1.0
[msk_broker_per_hour]
"kafka.m7g.large" = 10.0
[storage_per_gib_month]
msk = {msk}
ebs_gp3 = {ebs}
[vpc]
interface_endpoint_per_az_hour = {vpc}
"""


def main(argv: list[str]) -> int:
    """The operator's command line as scripts/tablecast_ops.py runs it: with infra's reading."""
    return cli.main(argv, declarations=declarations())


def files(tmp_path: Path, msk: float = 0.0, ebs: float = 0.0, vpc: float = 0.0) -> list[str]:
    settings = tmp_path / "settings.toml"
    settings.write_text(BASE_TEXT + PIPELINES, encoding="utf-8")
    # The testing settings' jobs name table schemas beside them.
    shutil.copytree(
        TESTING_SETTINGS.parent / "schemas", settings.parent / "schemas", dirs_exist_ok=True
    )
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES_TEXT.format(msk=msk, ebs=ebs, vpc=vpc), encoding="utf-8")
    return ["--settings", str(settings), "--prices", str(prices), "--today", "2026-12-01"]


def listing(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    assert main(["pipelines", "--declared-only", *argv]) == 0
    rows: dict[str, list[str]] = {}
    for line in capsys.readouterr().out.splitlines():
        cells = line.split()
        rows[cells[0].rstrip(":;")] = cells
    return rows


def test_every_declared_pipeline_is_listed_oldest_first_with_age_expiry_owner_and_cost(
    aws: AwsClients, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pipelines", *files(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "owner", "age", "expires", "USD/h", "deployed", "purpose"]
    assert [line.split()[0] for line in lines[1:3]] == ["early-exp", "late-exp"]
    early, late = (line.split() for line in lines[1:3])
    # The sandbox's shape: a driver and 1 worker of m7i.large, 2 brokers; 3 workers overridden.
    assert early == [
        "early-exp",
        "al@tablecast-testing.net",
        "30",
        "d",
        "2026-11-25",
        "(EXPIRED",
        "6",
        "d",
        "ago)",
        "22.00",
        "no",  # nothing of it in the account
        "first",
    ]
    assert late == [
        "late-exp",
        "bea@tablecast-testing.net",
        "11",
        "d",
        "2026-12-20",
        "(in",
        "19",
        "d)",
        "24.00",
        "no",
        "second",
    ]
    assert "2 test pipeline(s), about 46.00 USD/h together" in lines[3]
    assert "prices as of 2026-01-02" in lines[3]
    assert lines[4] == (
        "expired: early-exp; destroy it with npx cdktf-cli@0.21.0 destroy 'tablecast-early-exp-*'"
    )


def test_storage_is_priced_per_gib_month(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = files(tmp_path, msk=730.0, ebs=730.0)  # 1 per GiB and hour
    early = next(
        c
        for c in pipeline_configs(Path(argv[1]), load_settings(Path(argv[1])))
        if c.name == "early-exp"
    )
    gib = early.broker_count * early.effective_broker_volume_gib + (
        early.spark_worker_count + 1
    ) * (ROOT_VOLUME_GIB + early.spark_data_volume_gib)
    rows = listing(argv, capsys)
    assert rows["early-exp"][9] == f"{22 + gib:.2f}"


def test_a_type_missing_from_the_price_table_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = files(tmp_path)
    settings = Path(argv[1])
    settings.write_text(
        settings.read_text() + 'spark_worker_instance_type = "r7i.xlarge"\n', encoding="utf-8"
    )
    assert main(["pipelines", "--declared-only", *argv]) == 64
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "no price for r7i.xlarge in [ec2_per_hour]: add it" in error


def test_without_settings_it_says_how_to_name_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TABLECAST_SETTINGS", raising=False)
    assert main(["pipelines"]) == 64
    assert "name the deployment settings with --settings or TABLECAST_SETTINGS" in (
        capsys.readouterr().err
    )


def test_the_repositorys_price_table_prices_every_declared_type_and_has_its_date(
    capsys: pytest.CaptureFixture[str],
) -> None:
    prices = load_prices(PRICES)
    assert prices.as_of >= date(2026, 11, 23)
    argv = ["pipelines", "--declared-only", "--settings", str(TESTING_SETTINGS)]
    assert main([*argv, "--today", "2026-11-24"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[0] == "resync-exp"
    assert f"prices as of {prices.as_of}" in out


def test_it_runs_from_a_checkout_and_says_so_where_infra_is_missing(tmp_path: Path) -> None:
    argv = ["pipelines", "--declared-only", "--settings", str(TESTING_SETTINGS)]
    script = [sys.executable, str(PROJECT / "scripts" / "tablecast_ops.py"), *argv]
    done = subprocess.run(script, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("resync-exp ")
    # As on a node: the job's wheel holds app/ only.
    module = [sys.executable, "-m", "app.ops", *argv]
    done = subprocess.run(module, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 64
    assert done.stderr == (
        "tablecast-ops pipelines: pipelines reads infra/'s configuration: run it from a "
        "checkout (scripts/tablecast_ops.py)\n"
    )


def test_the_vpc_endpoints_are_priced_per_zone_and_hour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = files(tmp_path, vpc=1.0)
    early = next(
        c
        for c in pipeline_configs(Path(argv[1]), load_settings(Path(argv[1])))
        if c.name == "early-exp"
    )
    endpoints = len(interface_endpoint_services(early)) * len(early.availability_zones)
    assert endpoints == 8 * 2  # the sandbox's shape: eight services in two zones
    assert listing(argv, capsys)["early-exp"][9] == f"{22 + endpoints:.2f}"


def tag(aws: AwsClients, name: str, **tags: str) -> str:
    """An instance tagged as infra tags a test pipeline's resources."""
    image = aws.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (instance,) = aws.ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"]
    every = {"Environment": name, "TestPipeline": "true", "Project": "tablecast", **tags}
    aws.ec2.create_tags(
        Resources=[instance["InstanceId"]],
        Tags=[{"Key": k, "Value": v} for k, v in every.items()],
    )
    return str(instance["InstanceId"])


def test_what_is_deployed_is_listed_by_tag_and_a_deployed_undeclared_one_is_an_orphan(
    aws: AwsClients, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = files(tmp_path)
    tag(aws, "late-exp", Owner="bea@tablecast-testing.net")
    tag(aws, "late-exp", Owner="bea@tablecast-testing.net")
    # Terminated, still tagged a while: no longer deployed.
    aws.ec2.terminate_instances(InstanceIds=[tag(aws, "late-exp"), tag(aws, "dead-exp")])
    tag(aws, "gone-exp", Owner="cy@tablecast-testing.net", Expires="2026-11-02")
    # A fixed environment's resources are no test pipeline's.
    image = aws.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    aws.ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "Environment", "Value": "prod"}]}
        ],
    )
    assert main(["pipelines", *argv]) == 1  # an orphan fails the listing: act on it
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in out[1:3]}
    assert rows["late-exp"][9:11] == ["2", "resources"]
    assert rows["early-exp"][10] == "no"
    (orphan,) = [line for line in out if line.startswith("ORPHAN ")]
    assert orphan == (
        "ORPHAN gone-exp: deployed, not declared in settings.toml: 1 resources (ec2), "
        "owner cy@tablecast-testing.net, expired 2026-11-02"
    )
    assert out[-1] == (
        f"orphan: gone-exp; declare it again in {argv[1]} (its state is in the state backend) "
        "and destroy it with npx cdktf-cli@0.21.0 destroy 'tablecast-gone-exp-*'"
    )
