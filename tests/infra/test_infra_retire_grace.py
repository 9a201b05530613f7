"""The job's retire grace (``run --retire-grace``), an environment setting: in SSM for run-job
only where the environment sets it otherwise than the job's default, refused in one line when
it is not a grace the job takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app import handoff
from app.defaults import RETIRE_GRACE_S
from infra.config import ConfigError, EnvironmentConfig, parsing
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import synthesize
from tests.infra.synthesized_documents import parameters
from tests.infra.valid_config import ssm_values


def _dev(**changes: str) -> EnvironmentConfig:
    return dataclasses.replace(dev(load_settings(TESTING_SETTINGS)["dev"]), **changes)  # type: ignore[arg-type]


def test_an_environment_that_sets_a_retire_grace_hands_it_to_the_job(tmp_path: Path) -> None:
    synthesized = synthesize([_dev(retire_grace="10 minutes")], tmp_path)["dev"]
    parameter = parameters(synthesized)[handoff.parameter_name("dev", handoff.RETIRE_GRACE)]
    assert parameter["value"] == "10 minutes"
    assert "--retire-grace" in parameter["description"]
    assert synthesized["handoff"].outputs()["retire_grace"]["description"]


def test_the_jobs_default_grace_writes_no_parameter(
    configs: dict[str, EnvironmentConfig],
) -> None:
    for config in configs.values():  # every configured environment and test pipeline
        assert parsing.retire_grace_seconds(config.retire_grace) == RETIRE_GRACE_S
        assert not set(ssm_values(config)) & set(handoff.TABLE_OPTIONAL), config.name
    # The default however spelled.
    assert handoff.RETIRE_GRACE not in ssm_values(_dev(retire_grace="120 seconds"))
    assert ssm_values(_dev(retire_grace="0 seconds"))[handoff.RETIRE_GRACE] == "0 seconds"


@pytest.mark.parametrize(
    ("grace", "problem"),
    [
        ("soon", "'soon' is not '<n> seconds|minutes|hours'"),
        ("-1 seconds", "'-1 seconds' is not '<n> seconds|minutes|hours'"),
        ("61 minutes", "'61 minutes' is over 3600 seconds"),
    ],
)
def test_a_grace_the_job_would_refuse_is_refused_in_one_line(grace: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _dev(retire_grace=grace)
    message = str(caught.value)
    assert message.startswith(f"environment 'dev': retire_grace: {problem}"), message
    assert "\n" not in message
    assert caught.value.field == "retire_grace"
