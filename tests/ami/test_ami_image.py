"""The image as its build installs it: the file-installing step
(``install_node_files``, downloading nothing) run into a staging root, and
every program a unit, a timer or the bootstrap runs found there.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from app.local.image import StagedImage, stage
from infra.config import layout
from infra.constructs.user_data import NodeRole, node_user_data
from tests.ami.helpers import bash, shell_env

# What the downloading steps install (validate.sh checks them on the built
# image); everything else a unit runs must come from the staged files.
DOWNLOADED = ("/opt/spark/", "/opt/hadoop/", "/opt/tablecast/venv/", "/opt/aws/")
IMAGE_PROGRAM = re.compile(r"/opt/tablecast/bin/[\w.-]+")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> StagedImage:
    return stage(tmp_path_factory.mktemp("image") / "root")


def exec_programs(unit_text: str) -> set[str]:
    """The program of every Exec* line of a unit (systemd's prefixes stripped)."""
    programs = set()
    for line in unit_text.replace("\\\n", " ").splitlines():
        key, _, value = line.partition("=")
        if key.strip().startswith("Exec") and value.strip():
            programs.add(value.split()[0].lstrip("-@+!:"))
    return programs


def bootstrap_timer_units(image: StagedImage, tmp_path: Path) -> list[Path]:
    """The timers' services the staged node-bootstrap writes on a driver."""
    units = tmp_path / "bootstrap-units"
    units.mkdir()
    env = shell_env(tmp_path) | {"TABLECAST_UNIT_DIR": str(units)}
    result = bash(f'source "{image.bin / "node-bootstrap"}"\ndriver_timers', env)
    assert result.returncode == 0, result.stderr
    written = sorted(units.glob("*.service"))
    assert written, "node-bootstrap wrote no timer service"
    return written


def test_every_program_a_unit_timer_or_the_bootstrap_runs_is_in_the_image(
    image: StagedImage, tmp_path: Path
) -> None:
    runs: dict[str, str] = {}
    for unit in [*sorted(image.units.glob("*.service")), *bootstrap_timer_units(image, tmp_path)]:
        for program in exec_programs(unit.read_text(encoding="utf-8")):
            runs.setdefault(program, unit.name)
    # The user data runs the bootstrap; the image's programs run each other.
    user_data = node_user_data(
        environment="prod",
        role=NodeRole.DRIVER,
        driver_host="10.0.0.1",
        region="eu-west-1",
        zone_id="euw1-az1",
        hdfs_replication=2,
    )
    for program in IMAGE_PROGRAM.findall(user_data):
        runs.setdefault(program, "user data")
    for installed in sorted(path for path in image.root.rglob("*") if path.is_file()):
        for line in installed.read_text(encoding="utf-8").splitlines():
            if not line.lstrip().startswith("#"):
                for program in IMAGE_PROGRAM.findall(line):
                    runs.setdefault(program, installed.name)

    assert layout.NODE_BOOTSTRAP in runs
    timers = {"/opt/tablecast/bin/hdfs-health", "/opt/tablecast/bin/hdfs-checkpoint-backup"}
    assert timers <= set(runs)
    missing = []
    for program, by in sorted(runs.items()):
        if program.startswith(DOWNLOADED):
            continue
        staged = image.path(program)
        if not staged.is_file():
            missing.append(f"{program} (run by {by}) is not in the image")
        elif stat.S_IMODE(staged.stat().st_mode) != 0o755:
            missing.append(f"{program} (run by {by}) has mode {oct(staged.stat().st_mode)}")
    assert not missing, missing


def test_every_unit_and_template_of_ami_files_is_installed(image: StagedImage) -> None:
    files = Path(__file__).resolve().parents[2] / "ami" / "files"
    for unit in (files / "systemd").glob("*"):
        staged = image.units / unit.name
        assert staged.is_file(), unit.name
        assert stat.S_IMODE(staged.stat().st_mode) == 0o644
    for template in (files / "templates").glob("*.tmpl"):
        assert (image.templates / template.name).is_file(), template.name
    for program in (files / "bin").iterdir():
        assert (image.bin / program.name).is_file(), program.name


def test_the_archiver_gets_its_own_roles_credentials(image: StagedImage, tmp_path: Path) -> None:
    """The archiver's profile runs archiver-credentials, which assumes its role (moto's STS)."""
    import json
    import os
    import subprocess
    import sys

    import boto3
    from moto.server import ThreadedMotoServer

    profile = (image.root / "etc" / "tablecast" / "archiver-aws.config").read_text("utf-8")
    assert "credential_process = /opt/tablecast/bin/archiver-credentials" in profile
    unit = (image.units / "tablecast-archiver.service").read_text(encoding="utf-8")
    assert "AWS_CONFIG_FILE=/etc/tablecast/archiver-aws.config AWS_PROFILE=archiver" in unit

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        base = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": endpoint,
        }
        iam = boto3.client(
            "iam",
            region_name="eu-west-1",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        role = iam.create_role(RoleName="tablecast-dev-archiver", AssumeRolePolicyDocument="{}")
        # The instance's profile would be the driver's role; the archiver's must not leak in.
        env = {
            **os.environ,
            **base,
            "TABLECAST_PYTHON": sys.executable,
            "AWS_REGION": "eu-west-1",
            "TABLECAST_ARCHIVER_ROLE_ARN": role["Role"]["Arn"],
            "AWS_PROFILE": "archiver",
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
        }
        done = subprocess.run(
            [str(image.bin / "archiver-credentials")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["Version"] == 1
    assert printed["AccessKeyId"] != "testing" and printed["SessionToken"]
    assert printed["Expiration"].startswith("20")


PRELOAD_DIR = "/opt/tablecast/python"  # node-files.sh's .pth puts it on the venv's path


def test_the_image_holds_the_python_daemons_preload_on_the_venvs_path(
    image: StagedImage,
) -> None:
    import subprocess
    import sys

    staged = image.path(PRELOAD_DIR)
    assert (staged / "tablecast_preload" / "__main__.py").is_file()
    node_files = Path(__file__).resolve().parents[2] / "ami" / "scripts" / "node-files.sh"
    writes_pth = f"-m tablecast_preload.pth {PRELOAD_DIR}"
    assert writes_pth in node_files.read_text(encoding="utf-8")
    # Imported from the image's copy, it preloads the workers' libraries and no job
    # code, and the .pth line it writes names a module the copy holds.
    probe = (
        "import sys, tablecast_preload as p, tablecast_preload.spark_path as s; "
        "print(p.__file__); p.preload(); exec(s.PTH_LINE); "
        "print(p.Preloaded.failed, 'app' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        env={"PYTHONPATH": str(staged)},
    )
    where, outcome = done.stdout.strip().splitlines()
    assert where.startswith(str(staged))
    assert outcome == "() False"
