"""Terraform state: S3 with locking for every shared environment, local only when throwaway."""

from infra.testing import SynthesizedEnvironment


def test_shared_environments_keep_state_in_s3_with_a_lock_file(env: SynthesizedEnvironment) -> None:
    backend = env.config.deployment.state_backend
    for stack in env.synthesized.values():
        backends = stack.document["terraform"]["backend"]
        if env.config.throwaway:
            assert set(backends) == {"local"}
            assert backends["local"]["path"] == f"../../../terraform.{stack.name}.tfstate"
            continue
        assert backend is not None
        assert set(backends) == {"s3"}, stack.name
        s3 = backends["s3"]
        component = stack.name.removeprefix(f"tablecast-{env.config.name}-")
        assert s3["bucket"] == backend.bucket
        assert s3["key"] == f"{backend.key_prefix}/{env.config.name}/{component}.tfstate"
        assert s3["region"] == (backend.region or env.config.region)
        assert s3["encrypt"] is True
        assert s3["use_lockfile"] is True


def test_cross_stack_reads_use_the_same_backend(env: SynthesizedEnvironment) -> None:
    expected = "local" if env.config.throwaway else "s3"
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
