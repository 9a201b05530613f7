"""Terraform state: S3 with locking for every shared environment, local only when throwaway."""

import dataclasses
from pathlib import Path

from infra.config.environments import sandbox
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import SynthesizedEnvironment, synthesize


def test_shared_environments_keep_state_in_s3_with_a_lock_file(env: SynthesizedEnvironment) -> None:
    backend = env.config.deployment.state_backend
    # Shared environments and test pipelines must name a backend; the sandbox may.
    assert backend is not None or (env.config.throwaway and env.config.test_pipeline is None)
    for stack in env.synthesized.values():
        backends = stack.document["terraform"]["backend"]
        if backend is None:
            assert set(backends) == {"local"}
            assert backends["local"]["path"] == f"../../../terraform.{stack.name}.tfstate"
            continue
        assert set(backends) == {"s3"}, stack.name
        s3 = backends["s3"]
        component = stack.name.removeprefix(f"tablecast-{env.config.name}-")
        assert s3["bucket"] == backend.bucket
        assert s3["key"] == f"{backend.key_prefix}/{env.config.name}/{component}.tfstate"
        assert s3["region"] == (backend.region or env.config.region)
        assert s3["encrypt"] is True
        assert s3["use_lockfile"] is True


def test_cross_stack_reads_use_the_same_backend(env: SynthesizedEnvironment) -> None:
    expected = "local" if env.config.deployment.state_backend is None else "s3"
    for stack in env.synthesized.values():
        for remote in stack.data_sources("terraform_remote_state").values():
            assert remote["backend"] == expected


def test_only_the_sandbox_and_test_pipelines_are_throwaway(env: SynthesizedEnvironment) -> None:
    expected = env.config.name == "sandbox" or env.config.test_pipeline is not None
    assert env.config.throwaway is expected
    if env.config.is_production:
        assert not env.config.throwaway


def test_stacks_refuse_any_other_account(env: SynthesizedEnvironment) -> None:
    for stack in env.synthesized.values():
        (provider,) = stack.document["provider"]["aws"]
        assert provider["allowed_account_ids"] == [env.config.deployment.account_id]


def test_a_sandbox_without_a_backend_keeps_local_state(tmp_path: Path) -> None:
    settings = load_settings(TESTING_SETTINGS)["sandbox"]
    local = sandbox(dataclasses.replace(settings, state_backend=None))
    (env,) = synthesize([local], tmp_path / "cdktf.out").values()
    for stack in env.synthesized.values():
        assert stack.document["terraform"]["backend"] == {
            "local": {"path": f"../../../terraform.{stack.name}.tfstate"}
        }
        for remote in stack.data_sources("terraform_remote_state").values():
            assert remote["backend"] == "local"
