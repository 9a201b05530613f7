"""The stacks synthesize the same on CDK Terrain (cdktn) as on cdktf, through infra/cdk.py.

cdktn is synthesized in a process of its own (``TABLECAST_CDK=cdktn python -m
infra.main``), so each CDK has its own jsii runtime; both are installed in
the one venv. The comparison is of every stack's resources, data sources,
outputs and backend; what may differ is the provider version constraint
(each CDK's bindings name theirs) and the CDK's own name in metadata.
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from infra.cdk_seam import CDK_VARIABLE, selected
from infra.config.settings import TESTING_SETTINGS
from infra.testing import SynthesizedEnvironment

ROOT = Path(__file__).resolve().parents[2]


def normalized(document: dict[str, Any], part: str) -> Any:
    """One part of a stack without cdktf's metadata, the CDK named neutrally."""
    text = json.dumps(document.get(part, {}), sort_keys=True)
    value = json.loads(text.replace("cdktn", "CDK").replace("cdktf", "CDK"))
    if isinstance(value, dict):
        for body in value.values():
            if isinstance(body, dict):
                for resource in body.values():
                    if isinstance(resource, dict):
                        resource.pop("//", None)
    return value


@pytest.fixture(scope="session")
def terrain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every environment synthesized with CDK Terrain."""
    outdir = tmp_path_factory.mktemp("cdktn") / "cdktn.out"
    environ = {
        **os.environ,
        CDK_VARIABLE: "cdktn",
        "TABLECAST_SETTINGS": str(TESTING_SETTINGS),
        "CDKTF_OUTDIR": str(outdir),
    }
    environ.pop("TABLECAST_ENVIRONMENTS", None)
    result = subprocess.run(
        [sys.executable, "-m", "infra.main"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir


def test_cdk_terrain_synthesizes_the_same_stacks(
    terrain: Path, synthesized: dict[str, SynthesizedEnvironment]
) -> None:
    stacks = {
        stack.name: stack for env in synthesized.values() for stack in env.synthesized.values()
    }
    with (ROOT / "versions.toml").open("rb") as handle:
        pins = tomllib.load(handle)
    written = sorted(path.name for path in (terrain / "stacks").iterdir())
    assert written == sorted(stacks)
    for name, stack in stacks.items():
        terrain_document = json.loads((terrain / "stacks" / name / "cdk.tf.json").read_text())
        # Each was written by the CDK it claims: the seam switched, not a no-op.
        assert terrain_document["//"]["metadata"]["version"] == pins["cdktn"]["version"]
        assert stack.document["//"]["metadata"]["version"] == pins["cdktf"]["version"]
        for part in ("resource", "data", "output", "locals"):
            assert normalized(terrain_document, part) == normalized(stack.document, part), (
                name,
                part,
            )
        assert terrain_document["terraform"]["backend"] == stack.document["terraform"]["backend"]
        terrain_provider = terrain_document["terraform"]["required_providers"]["aws"]
        cdktf_provider = stack.document["terraform"]["required_providers"]["aws"]
        assert terrain_provider["version"] == "6.69.1"  # cdktn-provider-aws 25.8.1's
        assert cdktf_provider["version"] == "6.25.0"  # cdktf-cdktf-provider-aws 21.22.1's
        (terrain_aws,) = terrain_document["provider"]["aws"]
        (cdktf_aws,) = stack.document["provider"]["aws"]
        assert normalized({"p": terrain_aws}, "p") == normalized({"p": cdktf_aws}, "p")


def test_the_cdks_are_pinned_where_versions_toml_says() -> None:
    with (ROOT / "versions.toml").open("rb") as handle:
        pins = tomllib.load(handle)
    with (ROOT / "pyproject.toml").open("rb") as handle:
        dev = tomllib.load(handle)["project"]["optional-dependencies"]["dev"]
    assert f"cdktf=={pins['cdktf']['version']}" in dev
    assert f"cdktf-cdktf-provider-aws=={pins['cdktf']['provider_aws']}" in dev
    assert f"cdktn=={pins['cdktn']['version']}" in dev
    assert f"cdktn-provider-aws=={pins['cdktn']['provider_aws']}" in dev


def test_an_unknown_cdk_is_refused_with_one_line() -> None:
    with pytest.raises(SystemExit) as stopped:
        selected({CDK_VARIABLE: "cdk8s"})
    assert str(stopped.value) == "infra: TABLECAST_CDK='cdk8s' is not one of cdktf, cdktn"
    assert selected({}) == "cdktf"
