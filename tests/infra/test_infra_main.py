"""The entry point: writes every stack where cdktf expects it, or stops with one line."""

from pathlib import Path

import pytest

from infra.config import ConfigError, EnvironmentConfig
from infra.config.environments import dev
from infra.main import main


def broken() -> EnvironmentConfig:
    config = dev()
    return EnvironmentConfig(
        **{field: getattr(config, field) for field in config.__dataclass_fields__}
        | {"retention_hours": 24}
    )


def test_invalid_environment_stops_synth_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main({"dev": dev, "broken": broken}) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "retention_hours" in error
    assert "24 is under the minimum of 72 hours" in error


def test_writes_each_stack_to_its_directory(tmp_path: Path) -> None:
    assert main({"dev": dev}, outdir=str(tmp_path)) == 0
    written = sorted(path.parent.name for path in tmp_path.glob("stacks/*/cdk.tf.json"))
    assert written == [
        f"tablecast-dev-{component}"
        for component in sorted(("network", "storage", "kafka", "spark", "monitoring", "handoff"))
    ]


def test_config_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="retention_hours"):
        broken()
    assert issubclass(ConfigError, ValueError)
