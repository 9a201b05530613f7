"""ami/scripts/ssm-agent.sh, offline: the SSM Agent's package is installed only when AWS's key,
committed in ami/keys, signed it; no key is downloaded.

AWS's download bucket is out of reach here, so the script runs with its downloads served from
a local folder (``fetch`` replaced after common.sh is sourced): what it downloads, and that it
refuses a package another key signed and a key file that is not AWS's key, before installing
anything. Only a real build installs AWS's package (docs/infra.md, "What stays as it is").
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.ami.helpers import AMI, LIB, ROOT, SCRIPTS, shell_env

SCRIPT = SCRIPTS / "ssm-agent.sh"
KEY = AMI / "keys" / "amazon-ssm-agent.asc"
VERSION = re.search(
    r'\[ssm_agent\][^\[]*?version = "([^"]+)"', (ROOT / "versions.toml").read_text()
)


def fingerprints(key: Path, home: Path) -> list[str]:
    home.mkdir(mode=0o700, exist_ok=True)
    listed = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--with-colons", "--show-keys", str(key)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:")]


def pinned_fingerprint() -> str:
    match = re.search(r'^readonly KEY_FINGERPRINT="([0-9A-F]{40})"$', SCRIPT.read_text(), re.M)
    assert match is not None, "ssm-agent.sh pins the key's fingerprint"
    return match.group(1)


def test_the_committed_key_is_the_one_key_of_the_pinned_fingerprint(tmp_path: Path) -> None:
    assert fingerprints(KEY, tmp_path / "gnupg") == [pinned_fingerprint()]
    assert pinned_fingerprint() == "DE92C7DA3E56E92331D62A36BC1F495C97DD04ED"


def test_the_agent_is_pinned_to_a_version_in_versions_toml() -> None:
    assert VERSION is not None, "versions.toml has [ssm_agent] version"
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", VERSION.group(1))


def build_dir(tmp_path: Path, key: Path, served: Path) -> Path:
    """The build's uploads as build.pkr.hcl lays them out, with downloads served from
    ``served`` (each URL recorded in ``fetched.log``)."""
    build = tmp_path / "build"
    (build / "lib").mkdir(parents=True)
    (build / "keys").mkdir()
    shutil.copy(key, build / "keys" / "amazon-ssm-agent.asc")
    shutil.copy(ROOT / "versions.toml", build / "versions.toml")
    (build / "lib" / "common.sh").write_text(
        LIB.read_text()
        + "\n# Offline: every download served from a local folder.\n"
        + "fetch() {\n"
        + f'  printf "%s\\n" "$1" >> "{tmp_path}/fetched.log"\n'
        + f'  cp "{served}/$(basename "$1")" "$2"\n'
        + "}\n"
    )
    return build


def run_script(build: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = shell_env(tmp_path) | {
        "TABLECAST_BUILD_DIR": str(build),
        "VERSIONS_FILE": str(build / "versions.toml"),
        "AWS_REGION": "eu-west-1",
    }
    # dpkg and systemctl must never be reached: a stand-in records the attempt.
    for tool in ("dpkg", "systemctl"):
        stub = tmp_path / "stubs" / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/installed.log"\nexit 1\n')
        stub.chmod(0o755)
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=120
    )


def signed_by_another_key(tmp_path: Path) -> tuple[Path, Path]:
    """A package and its detached signature by a key that is not AWS's, and that key."""
    home = tmp_path / "signer"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--passphrase", ""]
    subprocess.run(
        [*gpg, "--quick-gen-key", "Not AWS <not-aws@tablecast-testing.net>", "rsa2048", "sign"],
        capture_output=True,
        check=True,
    )
    served = tmp_path / "served"
    served.mkdir()
    package = served / "amazon-ssm-agent.deb"
    package.write_bytes(b"!<arch>\nnot the agent\n")
    subprocess.run(
        [*gpg, "--detach-sign", "-o", str(served / "amazon-ssm-agent.deb.sig"), str(package)],
        capture_output=True,
        check=True,
    )
    key = tmp_path / "other.asc"
    exported = subprocess.run([*gpg, "--armor", "--export"], capture_output=True, check=True)
    key.write_bytes(exported.stdout)
    # Making and using the key started the homedir's agent, a daemon that outlives the test.
    subprocess.run(
        ["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=True
    )
    return served, key


def test_a_package_signed_by_another_key_is_refused_before_anything_is_installed(
    tmp_path: Path,
) -> None:
    served, _ = signed_by_another_key(tmp_path)
    done = run_script(build_dir(tmp_path, KEY, served), tmp_path)
    assert done.returncode == 1
    assert "signature check failed" in done.stderr
    assert not (tmp_path / "installed.log").exists(), "dpkg and systemctl were not reached"
    # The pinned version's package, from the build region's bucket first, never "latest".
    assert VERSION is not None
    path = f"{VERSION.group(1)}/debian_amd64/amazon-ssm-agent.deb"
    assert (tmp_path / "fetched.log").read_text().splitlines() == [
        f"https://s3.eu-west-1.amazonaws.com/amazon-ssm-eu-west-1/{path}",
        f"https://s3.eu-west-1.amazonaws.com/amazon-ssm-eu-west-1/{path}.sig",
    ]


def test_a_key_file_that_is_not_aws_key_is_refused_before_any_download(tmp_path: Path) -> None:
    served, other = signed_by_another_key(tmp_path)
    # The other key would verify its own signature: the fingerprint check stops it first.
    done = run_script(build_dir(tmp_path, other, served), tmp_path)
    assert done.returncode == 1
    assert "is not AWS's SSM Agent key alone" in done.stderr
    assert not (tmp_path / "fetched.log").exists(), "nothing was downloaded"
    assert not (tmp_path / "installed.log").exists()


def test_the_image_checks_the_agent_is_enabled_and_leaves_no_state_of_the_build() -> None:
    validate = (SCRIPTS / "validate.sh").read_text()
    assert 'check_equal "SSM Agent" "$(pin ssm_agent version)"' in validate
    assert "systemctl is-enabled amazon-ssm-agent.service" in validate
    assert "find /var/lib/amazon/ssm -mindepth 1" in validate
    assert "find /var/lib/amazon/ssm -mindepth 1 -delete" in (SCRIPTS / "cleanup.sh").read_text()
    # The build uploads the committed keys where the script reads them.
    build = (AMI / "build.pkr.hcl").read_text()
    assert 'source      = "${path.root}/keys/"' in build
    assert '"AWS_REGION=${var.region}"' in build
