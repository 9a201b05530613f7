"""Real Terraform: every synthesized stack validates; the provider refuses the testing account.

Offline and on loopback only (tests/infra/terraform.py says what is
overridden and why). The sandbox's apply to moto runs through the cdktf CLI
(test_infra_cdktf_cli.py), production's in test_infra_terraform_prod.py.
Marked ``terraform``: ``make terraform-check`` runs these, ``make unit``
does not.
"""

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from infra.testing import SynthesizedEnvironment
from tests.infra.conftest import DECLARED_PIPELINES
from tests.infra.terraform import (
    Mirror,
    Terraform,
    TerraformError,
    moto_override,
    provider_version_override,
    write_override,
)

pytestmark = pytest.mark.terraform

COMPONENTS = ("network", "storage", "kafka", "spark", "monitoring", "handoff")


def copy_stack(outdir: Path, name: str, workdir: Path) -> Path:
    stack = workdir / name
    shutil.copytree(outdir / "stacks" / name, stack)
    return stack


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "sandbox", *DECLARED_PIPELINES])
def test_every_stack_validates_with_the_real_provider(
    name: str,
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    tmp_path: Path,
) -> None:
    env = synthesized[name]

    def validate(component: str) -> str:
        stack = copy_stack(outdir, env[component].name, tmp_path)
        write_override(stack, provider_version_override(mirror.version))
        terraform(stack, "init", "-backend=false", "-lockfile=readonly")
        return terraform(stack, "validate")

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(COMPONENTS, pool.map(validate, COMPONENTS), strict=True))
    for component, output in results.items():
        assert "Success! The configuration is valid." in output, component


def test_init_refuses_any_provider_build_but_the_locked_one(
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    tmp_path: Path,
) -> None:
    stack = copy_stack(outdir, "tablecast-sandbox-handoff", tmp_path)
    write_override(stack, provider_version_override(mirror.version))
    lock = stack / ".terraform.lock.hcl"
    lock.write_text(
        re.sub(
            r'"h1:[^"]+"', '"h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="', lock.read_text()
        ),
        encoding="utf-8",
    )
    with pytest.raises(TerraformError, match="checksum"):
        terraform(stack, "init", "-backend=false", "-lockfile=readonly")


def test_the_throwaway_settings_cannot_reach_a_real_account(
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    moto: str,
    tmp_path: Path,
) -> None:
    """Account 000000000000 of testing.toml: the provider refuses moto's account too."""
    stack = copy_stack(outdir, "tablecast-sandbox-storage", tmp_path)
    write_override(
        stack,
        moto_override(
            version=mirror.version, endpoint=moto, state=tmp_path / "s", remote_states={}
        ),
    )
    terraform(stack, "init", "-lockfile=readonly")
    with pytest.raises(TerraformError, match="not allowed"):
        terraform(stack, "plan")
