"""The Packer templates: valid for Debian's Packer 1.6.6, and built to the
agreements (one dated base image by name, SSH from the build host only, IMDSv2,
tags, manifest, validation last).

These tests need the `packer` binary (CI: `apt-get install -y packer`). When
it is missing they fail with that message; they never skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.ami.helpers import AMI, ROOT, SCRIPTS

HCL_FILES = ("variables.pkr.hcl", "sources.pkr.hcl", "build.pkr.hcl")


def packer() -> str:
    path = shutil.which("packer")
    assert path is not None, (
        "the packer binary is needed for the AMI tests: install Debian's Packer "
        "with `apt-get install -y packer` (CI does)"
    )
    return path


def run_packer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([packer(), *args], cwd=ROOT, capture_output=True, text=True, check=False)


def template(name: str) -> str:
    return (AMI / name).read_text(encoding="utf-8")


def test_templates_are_split_into_variables_sources_and_build() -> None:
    found = sorted(p.name for p in AMI.glob("*.pkr.hcl"))
    assert found == sorted(HCL_FILES), (
        f"ami/ must hold exactly {HCL_FILES}; found {found} "
        "(a copied plugins.pkr.hcl breaks validation with Packer 1.6.6)"
    )


def test_packer_validate_passes() -> None:
    assert (ROOT / "requirements.lock").is_file(), (
        "requirements.lock is missing at the repository root: the image installs it "
        "with --require-hashes and packer validate checks the file exists"
    )
    result = run_packer("validate", "ami")
    assert result.returncode == 0, result.stdout + result.stderr


def test_templates_are_formatted() -> None:
    result = run_packer("fmt", "-check", "-diff", "ami")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_required_plugins_in_validated_files() -> None:
    for name in HCL_FILES:
        assert "required_plugins" not in template(name), name
    example = (AMI / "plugins.pkr.hcl.example").read_text(encoding="utf-8")
    assert re.search(r'source\s*=\s*"github.com/hashicorp/amazon"', example)
    assert re.search(r'version\s*=\s*"=\s*\d+\.\d+\.\d+"', example), "pin the plugin exactly"


def test_image_name_and_tags_follow_the_agreement() -> None:
    result = run_packer("inspect", "ami")
    assert result.returncode == 0, result.stdout + result.stderr
    locals_ = result.stdout
    assert re.search(r'^local\.ami_name: "tablecast-spark-node-[0-9a-f]+"$', locals_, re.M)
    for tag, value in (("Project", "tablecast"), ("Component", "spark-node")):
        assert f'\\"{tag}\\" = \\"{value}\\"' in locals_, tag
    assert '\\"SparkVersion\\" = \\"' in locals_
    sources = template("sources.pkr.hcl")
    assert re.search(r"^\s*tags\s*=\s*local\.image_tags$", sources, re.M)


def test_base_image_is_one_dated_debian_build_by_its_exact_name() -> None:
    sources = template("sources.pkr.hcl")
    block = re.search(r"source_ami_filter \{(.*?)\n  \}", sources, re.S)
    assert block is not None
    body = block.group(1)
    for key in ("name", "architecture", "virtualization-type", "root-device-type"):
        assert re.search(rf"^\s*{key}\s*=", body, re.M), f"filter {key} is missing"
    assert re.search(r"name\s*=\s*var\.base_ami_name$", body, re.M)
    assert re.search(r"owners\s*=\s*\[var\.base_ami_owner\]", body)
    assert "most_recent" not in body, "a name matches one image: nothing to pick among"
    variables = template("variables.pkr.hcl")
    assert 'default     = "136693071363"' in variables, "Debian's official account"
    assert re.search(r'default\s*=\s*"debian-12-amd64-\d{8}-\d+"', variables)
    # A pattern is refused before anything is built.
    refused = run_packer("validate", "-var", "base_ami_name=debian-12-amd64-*", "ami")
    assert refused.returncode != 0 and "never a pattern" in refused.stderr + refused.stdout


def test_ssh_reaches_the_build_instance_from_the_build_host_only() -> None:
    sources = template("sources.pkr.hcl")
    assert re.search(
        r"^\s*temporary_security_group_source_cidrs\s*=\s*var\.ssh_source_cidrs$", sources, re.M
    )
    for cidrs in ('["0.0.0.0/0"]', '["10.0.0.0/8"]', "[]", '["not-a-network"]'):
        refused = run_packer("validate", "-var", f"ssh_source_cidrs={cidrs}", "ami")
        assert refused.returncode != 0, cidrs
        assert "never the internet" in " ".join((refused.stderr + refused.stdout).split()), cidrs
    assert (
        run_packer("validate", "-var", 'ssh_source_cidrs=["203.0.113.7/32"]', "ami").returncode == 0
    )


def test_every_variable_has_a_description_type_and_default() -> None:
    variables = template("variables.pkr.hcl")
    blocks = re.findall(r'variable "([^"]+)" \{(.*?)\n\}', variables, re.S)
    assert blocks
    for name, body in blocks:
        for field in ("description", "type", "default"):
            assert re.search(rf"^\s*{field}\s*=", body, re.M), f"{name} has no {field}"


def test_imdsv2_is_required_on_the_build_instance_first() -> None:
    build = template("build.pkr.hcl")
    provisioners = re.findall(r'provisioner "([^"]+)" \{(.*?)\n  \}', build, re.S)
    kind, body = provisioners[0]
    assert kind == "shell-local"
    assert "require-imdsv2-instance.sh" in body and "INSTANCE_ID=${build.ID}" in body
    kind, body = provisioners[1]
    assert kind == "shell" and "imdsv2-check.sh" in body
    script = (SCRIPTS / "local" / "require-imdsv2-instance.sh").read_text(encoding="utf-8")
    assert "--http-tokens required" in script


def test_image_gets_manifest_then_imdsv2_only() -> None:
    build = template("build.pkr.hcl")
    chain = re.search(r"post-processors \{(.*)\n  \}", build, re.S)
    assert chain is not None
    kinds = re.findall(r'post-processor "([^"]+)"', chain.group(1))
    assert kinds == ["manifest", "shell-local"]
    assert "require-imdsv2-image.sh" in chain.group(1)
    script = (SCRIPTS / "local" / "require-imdsv2-image.sh").read_text(encoding="utf-8")
    assert '--imds-support \'{"Value": "v2.0"}\'' in script


def test_provisioning_scripts_run_in_order_and_validation_is_last() -> None:
    build = template("build.pkr.hcl")
    listed = re.findall(r'"\$\{path\.root\}/scripts/([a-z0-9-]+\.sh)"', build)
    assert listed[0] == "imdsv2-check.sh"
    ordered = listed[1:]
    assert ordered[-2:] == ["cleanup.sh", "validate.sh"], ordered
    on_disk = sorted(p.name for p in SCRIPTS.glob("*.sh"))
    assert sorted(listed) == on_disk, "every script in ami/scripts is run, and only those"
    assert ordered.index("python-env.sh") < ordered.index("spark-jars.sh")
    assert ordered.index("base-packages.sh") < ordered.index("python-env.sh")
