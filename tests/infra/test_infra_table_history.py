"""How far back the output's table keeps snapshots (``run --table-history``), an environment
setting: in SSM for run-job only where the environment sets it otherwise than the job's
default, refused in one line when it is not a duration the job takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app import handoff
from app.defaults import TABLE_HISTORY_S
from app.durations import parse_duration_ms
from infra.config import ConfigError, EnvironmentConfig, parsing
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import synthesize
from tests.infra.synthesized_documents import parameters
from tests.infra.valid_config import ssm_values


def _dev(**changes: str) -> EnvironmentConfig:
    return dataclasses.replace(dev(load_settings(TESTING_SETTINGS)["dev"]), **changes)  # type: ignore[arg-type]


def test_an_environment_that_sets_a_table_history_hands_it_to_the_job(tmp_path: Path) -> None:
    synthesized = synthesize([_dev(table_history="30 days")], tmp_path)["dev"]
    parameter = parameters(synthesized)[handoff.parameter_name("dev", handoff.TABLE_HISTORY)]
    assert parameter["value"] == "30 days"
    assert "--table-history" in parameter["description"]
    assert synthesized["handoff"].outputs()["table_history"]["description"]
    # The job reads it as written.
    assert parse_duration_ms(parameter["value"]) == 30 * 86_400_000


def test_the_jobs_default_history_writes_no_parameter(
    configs: dict[str, EnvironmentConfig],
) -> None:
    for config in configs.values():  # every configured environment and test pipeline
        assert parsing.table_history_seconds(config.table_history) == TABLE_HISTORY_S
        assert handoff.TABLE_HISTORY not in ssm_values(config), config.name
    assert handoff.TABLE_HISTORY not in ssm_values(_dev(table_history="120 hours"))
    assert ssm_values(_dev(table_history="1 hour"))[handoff.TABLE_HISTORY] == "1 hour"


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ("a week", "'a week' is not '<n> seconds|minutes|hours|days'"),
        ("5d", "'5d' is not '<n> seconds|minutes|hours|days'"),
        ("-1 days", "'-1 days' is not '<n> seconds|minutes|hours|days'"),
    ],
)
def test_a_history_the_job_would_refuse_is_refused_in_one_line(history: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _dev(table_history=history)
    message = str(caught.value)
    assert message.startswith(f"environment 'dev': table_history: {problem}"), message
    assert "\n" not in message
    assert caught.value.field == "table_history"
