"""Real Terraform on the synthesized stacks, offline: the provider mirror, moto on loopback.

What differs from a deploy is written into each stack directory as
Terraform override files (``zz_offline_override.tf.json``), never into the
synthesized JSON itself, so that what is validated and applied is what a
deploy gets:

- the provider version: the machine's mirror (``/opt/tf-plugins``, or
  ``$TABLECAST_TF_MIRROR``) holds one ``hashicorp/aws`` version, which may
  differ from the deploy pin (``versions.toml`` ``[cdktf] provider_aws``);
- the backend: a shared environment's S3 backend becomes a local one in a
  throwaway directory, or an S3 one in moto (:class:`S3State`) (only for
  ``apply``; ``validate`` needs no backend);
- for ``apply``: the provider talks to a moto server on 127.0.0.1 with test
  credentials.
"""

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIRROR_VARIABLE = "TABLECAST_TF_MIRROR"
DEFAULT_MIRROR = Path("/opt/tf-plugins")
OVERRIDE_FILE = "zz_offline_override.tf.json"
MIRROR_LOCK = (
    Path(__file__).resolve().parents[2] / "infra" / "locks" / ("offline-mirror.terraform.lock.hcl")
)
"""The committed hash of the mirror's provider build; init refuses any other build."""
PROVIDER = Path("registry.terraform.io/hashicorp/aws")
# The provider's endpoint names for every service the stacks call.
MOTO_SERVICES = (
    "applicationautoscaling",
    "athena",
    "cloudwatch",
    "dlm",
    "ec2",
    "glue",
    "iam",
    "kafka",
    "kms",
    "logs",
    "s3",
    "scheduler",
    "sns",
    "ssm",
    "sts",
)


class TerraformError(AssertionError):
    """A terraform command failed; carries its output."""


@dataclass(frozen=True)
class S3State:
    """A state file in a bucket of a moto server: Terraform's S3 backend, pointed at moto."""

    bucket: str
    key: str
    endpoint: str
    region: str = "eu-west-1"

    def config(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "region": self.region,
            "encrypt": True,
            "use_lockfile": True,
            "endpoints": {"s3": self.endpoint},
            "use_path_style": True,
            "access_key": "moto",
            "secret_key": "moto",
            "skip_credentials_validation": True,
            "skip_requesting_account_id": True,
            "skip_metadata_api_check": True,
            "skip_region_validation": True,
        }

    def backend(self) -> dict[str, Any]:
        return {"s3": self.config()}

    def remote(self) -> dict[str, Any]:
        return {"backend": "s3", "config": self.config()}


State = Path | S3State
"""Where a stack keeps its state, or where a cross-stack read finds another's."""


@dataclass(frozen=True)
class Mirror:
    """The offline provider mirror and the one version of hashicorp/aws it holds."""

    path: Path
    version: str

    @classmethod
    def find(cls) -> "Mirror":
        """The mirror of ``$TABLECAST_TF_MIRROR`` or ``/opt/tf-plugins``; fails clearly."""
        path = Path(os.environ.get(MIRROR_VARIABLE, DEFAULT_MIRROR))
        versions = sorted(p.name for p in (path / PROVIDER).glob("*") if p.is_dir())
        if len(versions) != 1:
            raise TerraformError(
                f"{path / PROVIDER} holds {versions or 'no versions'}: the offline Terraform "
                f"checks need exactly one hashicorp/aws version (set {MIRROR_VARIABLE})"
            )
        locked = re.search(r'version\s*=\s*"([^"]+)"', MIRROR_LOCK.read_text(encoding="utf-8"))
        if locked is None or locked.group(1) != versions[0]:
            raise TerraformError(
                f"the mirror holds hashicorp/aws {versions[0]}, {MIRROR_LOCK.name} locks "
                f"{locked.group(1) if locked else 'nothing'}: regenerate the lock file "
                "(docs/infra.md, 'Terraform state and lock files')"
            )
        return cls(path=path, version=versions[0])

    def cli_config(self, directory: Path) -> Path:
        """A CLI configuration that installs hashicorp/aws from the mirror only."""
        config = directory / "offline.tfrc"
        config.write_text(
            "provider_installation {\n"
            f'  filesystem_mirror {{\n    path = "{self.path}"\n'
            '    include = ["registry.terraform.io/hashicorp/aws"]\n  }\n'
            '  direct { exclude = ["registry.terraform.io/*/*"] }\n}\n',
            encoding="utf-8",
        )
        return config


@dataclass(frozen=True)
class Terraform:
    """Runs terraform with the offline configuration."""

    binary: str
    environ: Mapping[str, str]

    @classmethod
    def offline(cls, mirror: Mirror, workdir: Path) -> "Terraform":
        binary = shutil.which("terraform")
        if binary is None:
            raise TerraformError("no terraform binary on the PATH (CI installs Terraform 1.11)")
        # No plugin cache: init links each stack's provider to the mirror's unpacked
        # directory (a symlink), so the 700 MB binary is never copied.
        environ = {
            **os.environ,
            "TF_CLI_CONFIG_FILE": str(mirror.cli_config(workdir)),
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
        }
        # Never the caller's AWS identity: only moto's test credentials.
        for name in list(environ):
            if name.startswith("AWS_"):
                del environ[name]
        return cls(binary=binary, environ=environ)

    def __call__(self, stack: Path, *args: str) -> str:
        result = self._run(stack, *args)
        if result.returncode != 0:
            raise TerraformError(
                f"terraform {' '.join(args)} in {stack.name} failed:\n{result.stderr[-4000:]}"
            )
        return result.stdout

    def validate(self, stack: Path) -> dict[str, Any]:
        """``terraform validate -json``'s report, an invalid configuration's too."""
        result = self._run(stack, "validate", "-json")
        if result.returncode not in (0, 1) or not result.stdout.startswith("{"):
            raise TerraformError(f"terraform validate in {stack.name} failed:\n{result.stderr}")
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    def _run(self, stack: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, f"-chdir={stack}", *args, "-no-color"],
            env=dict(self.environ),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )


def write_override(stack: Path, document: Mapping[str, Any]) -> None:
    """The offline differences, and the committed lock file that ``init -lockfile=readonly``
    holds the mirror's provider build to."""
    (stack / OVERRIDE_FILE).write_text(json.dumps(document, indent=2), encoding="utf-8")
    shutil.copyfile(MIRROR_LOCK, stack / ".terraform.lock.hcl")


def provider_version_override(version: str) -> dict[str, Any]:
    return {
        "terraform": {
            "required_providers": {"aws": {"source": "hashicorp/aws", "version": version}}
        }
    }


def moto_override(
    *,
    version: str,
    endpoint: str,
    state: State,
    remote_states: Mapping[str, State],
    instances: Sequence[str] = (),
) -> dict[str, Any]:
    """Local state (or S3's in moto), and every AWS call to moto.

    :param remote_states: cross-stack reads (``terraform_remote_state`` names) and
        the state file each reads instead of its S3 or local original.
    :param instances: ``aws_instance`` names whose detailed monitoring is turned off:
        moto has no ``MonitorInstances`` (the provider would retry it for minutes).
    """
    document = provider_version_override(version)
    document["terraform"]["backend"] = (
        state.backend() if isinstance(state, S3State) else {"local": {"path": str(state)}}
    )
    document["provider"] = {
        "aws": {
            "access_key": "moto",
            "secret_key": "moto",
            "skip_credentials_validation": True,
            "skip_metadata_api_check": "true",
            "skip_region_validation": True,
            "s3_use_path_style": True,
            "endpoints": [{service: endpoint for service in MOTO_SERVICES}],
        }
    }
    if instances:
        document["resource"] = {"aws_instance": {name: {"monitoring": False} for name in instances}}
    if remote_states:
        document["data"] = {
            "terraform_remote_state": {
                name: (
                    path.remote()
                    if isinstance(path, S3State)
                    else {"backend": "local", "config": {"path": str(path)}}
                )
                for name, path in remote_states.items()
            }
        }
    return document


def resource_names(stack: Path, resource_type: str) -> list[str]:
    """The names of a synthesized stack's resources of one type."""
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    return sorted(document.get("resource", {}).get(resource_type, {}))


def remote_state_names(stack: Path) -> list[str]:
    """The ``terraform_remote_state`` data sources of a synthesized stack."""
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    return sorted(document.get("data", {}).get("terraform_remote_state", {}))


def stand_in_state(path: Path, outputs: Mapping[str, str]) -> None:
    """A state file that holds only ``outputs``, for a stack moto cannot apply whole."""
    path.write_text(
        json.dumps(
            {
                "version": 4,
                "terraform_version": "1.11.0",
                "serial": 1,
                "lineage": str(uuid.uuid4()),
                "outputs": {
                    name: {"value": value, "type": "string", "sensitive": True}
                    for name, value in outputs.items()
                },
                "resources": [],
                "check_results": None,
            }
        ),
        encoding="utf-8",
    )


_REFERENCE = re.compile(r"^\$\{aws_msk_cluster\.cluster\.(?P<attribute>\w+)\}$")


def cluster_outputs(stack: Path, cluster: Mapping[str, str]) -> dict[str, str]:
    """The kafka stack's outputs that name a cluster attribute, filled from ``cluster``."""
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    filled = {}
    for name, output in document.get("output", {}).items():
        match = _REFERENCE.match(str(output["value"]))
        if match is not None:
            filled[name] = cluster[match["attribute"]]
    return filled


def targets_except(stack: Path, left_out: Sequence[str]) -> list[str]:
    """``-target=`` arguments for every resource of a stack but those of ``left_out`` types."""
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    return [
        f"-target={resource_type}.{name}"
        for resource_type, resources in document.get("resource", {}).items()
        if resource_type not in left_out
        for name in resources
    ]
