"""The entry point: writes every stack where cdktf expects it, or stops with one line."""

from pathlib import Path

import pytest

from infra.config import EnvironmentConfig
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, DeploymentSettings
from infra.main import main

TESTING = {"TABLECAST_SETTINGS": str(TESTING_SETTINGS)}


def broken(deployment: DeploymentSettings) -> EnvironmentConfig:
    config = dev(deployment)
    return EnvironmentConfig(
        **{field: getattr(config, field) for field in config.__dataclass_fields__}
        | {"retention_hours": 24}
    )


def test_invalid_environment_stops_synth_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    environ = TESTING | {"TABLECAST_ENVIRONMENTS": "dev"}
    assert main({"dev": broken}, environ=environ) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "retention_hours" in error
    assert "24 is under the minimum of 72 hours" in error


def test_shared_environment_without_settings_stops_synth_naming_it_and_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(outdir=str(tmp_path), environ={}) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith("infra: invalid configuration: environment 'dev': ")
    assert "set TABLECAST_SETTINGS to a TOML file with a [dev] table" in error
    assert not list(tmp_path.iterdir()), "nothing is written"


def test_writes_each_stack_to_its_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = TESTING | {"TABLECAST_ENVIRONMENTS": "dev"}
    assert main(outdir=str(tmp_path), environ=environ) == 0
    written = sorted(path.parent.name for path in tmp_path.glob("stacks/*/cdk.tf.json"))
    assert written == [
        f"tablecast-dev-{component}"
        for component in sorted(("network", "storage", "kafka", "spark", "monitoring", "handoff"))
    ]
    assert "throwaway settings" in capsys.readouterr().err


def test_unknown_environment_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(environ=TESTING | {"TABLECAST_ENVIRONMENTS": "dev,qa"}) == 2
    assert "environment 'qa': TABLECAST_ENVIRONMENTS: no such environment" in (
        capsys.readouterr().err
    )
