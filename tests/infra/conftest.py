"""Synthesize every environment once per test session (importing the provider takes ~15 s).

The environments get the throwaway deployment settings of
``infra/settings/testing.toml``, as ``make synth`` on a fresh clone does.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.config import ENVIRONMENTS, DeploymentSettings, EnvironmentConfig
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.config.test_pipelines import load_test_pipelines
from infra.main import configure_all
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.moto_apply import moto_server
from tests.infra.terraform import Mirror, Terraform

DECLARED_PIPELINES = [table.name for table in load_test_pipelines(TESTING_SETTINGS)]
"""The test pipelines testing.toml declares: synthesized and checked like every environment."""


@pytest.fixture(scope="session")
def testing_settings() -> dict[str, DeploymentSettings]:
    """The throwaway settings of every environment, by name."""
    return load_settings(TESTING_SETTINGS)


@pytest.fixture(scope="session")
def configs(testing_settings: dict[str, DeploymentSettings]) -> dict[str, EnvironmentConfig]:
    """Every configured environment and declared test pipeline, by name."""
    configs = configure_all(TESTING_SETTINGS, testing_settings, None)
    return {config.name: config for config in configs}


@pytest.fixture(scope="session")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's synthesis is written (``<outdir>/stacks/<stack>/cdk.tf.json``)."""
    return tmp_path_factory.mktemp("synth") / "cdktf.out"


@pytest.fixture(scope="session")
def synthesized(
    configs: dict[str, EnvironmentConfig], outdir: Path
) -> dict[str, SynthesizedEnvironment]:
    """Every environment's stacks as ``make synth`` writes them, by environment name."""
    return synthesize(list(configs.values()), outdir)


@pytest.fixture(scope="session", params=[*sorted(ENVIRONMENTS), *DECLARED_PIPELINES])
def env(
    request: pytest.FixtureRequest, synthesized: dict[str, SynthesizedEnvironment]
) -> SynthesizedEnvironment:
    """Each environment in turn: tests that take it run once per environment."""
    name: str = request.param
    return synthesized[name]


@pytest.fixture(scope="session")
def mirror() -> Mirror:
    """The offline hashicorp/aws provider mirror (fails clearly without one)."""
    return Mirror.find()


@pytest.fixture(scope="session")
def terraform(mirror: Mirror, tmp_path_factory: pytest.TempPathFactory) -> Terraform:
    """Terraform with the offline CLI configuration."""
    return Terraform.offline(mirror, tmp_path_factory.mktemp("terraform"))


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[str]:
    """A moto server of the test's own, on loopback; its endpoint."""
    with moto_server(tmp_path / "moto.log") as endpoint:
        yield endpoint
