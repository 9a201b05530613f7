"""Real Terraform: every synthesized stack validates; the provider refuses the testing account.

Offline and on loopback only (tests/infra/terraform.py says what is
overridden and why). The sandbox's apply to moto runs through the cdktf CLI
(test_infra_cdktf_cli.py), production's in test_infra_terraform_prod.py.
Marked ``terraform``: ``make terraform-check`` runs these, ``make unit``
does not.
"""

import json
import re
import shutil
from pathlib import Path
from typing import Any

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


# What Terraform says of every stack as a module of the checking root, and of nothing else:
# a backend block counts only in a root module (each stack is one when it is deployed).
MODULE_ONLY = "Backend configuration ignored"


def test_every_stack_validates_with_the_real_provider(
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    tmp_path: Path,
) -> None:
    """Every stack of every environment and declared test pipeline, each a module of one
    root: one init and one validate (the provider's schema loaded once) instead of one
    each per stack, 174 to 24 core-seconds. Each stack's arguments are checked as its own
    root's would be, by Terraform and by the provider (an unknown argument, a value out of
    the provider's range: an error naming the stack's file or the module's resource)."""
    assert {"dev", "staging", "prod", "sandbox", *DECLARED_PIPELINES} <= set(synthesized)
    names = sorted(stack.name for env in synthesized.values() for stack in env.synthesized.values())
    version = provider_version_override(mirror.version)
    for name in names:
        write_override(copy_stack(outdir, name, tmp_path), version)
    root = tmp_path / "all-stacks"
    root.mkdir()
    write_override(root, version)
    (root / "main.tf.json").write_text(
        json.dumps({"module": {name: {"source": f"../{name}"} for name in names}}),
        encoding="utf-8",
    )
    terraform(root, "init", "-backend=false", "-lockfile=readonly")
    report = terraform.validate(root)

    found = [_shown(d) for d in report["diagnostics"] if d["summary"] != MODULE_ONLY]
    assert report["valid"] and not found, "\n".join(found)
    ignored = sorted(Path(d["range"]["filename"]).parent.name for d in report["diagnostics"])
    assert ignored == [name for name in names if _has_backend(tmp_path / name)]


def _shown(diagnostic: dict[str, Any]) -> str:
    where = diagnostic.get("address") or diagnostic.get("range", {}).get("filename")
    return f"{diagnostic['severity']}: {diagnostic['summary']} ({where}): {diagnostic['detail']}"


def _has_backend(stack: Path) -> bool:
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    return "backend" in document.get("terraform", {})


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
