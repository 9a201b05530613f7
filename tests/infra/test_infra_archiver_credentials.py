"""pyarrow's S3 client takes the archiver's role through its profile's ``credential_process``.

On the driver the archiver's service sets ``AWS_CONFIG_FILE`` and
``AWS_PROFILE=archiver`` (ami/files/systemd/tablecast-archiver.service); the
profile (ami/files/aws/archiver.config) runs ami/files/bin/archiver-credentials,
which assumes the archiver's role with the instance's own credentials. Here
moto enforces IAM: the "instance" may only assume the role, the role may
only write ``archive/``. A write through ``app.storage`` (pyarrow's
S3FileSystem, the AWS C++ SDK) succeeds with the profile and is refused
without it, so the write was signed with the role's credentials.
"""

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.config import layout
from tests.infra.moto_apply import REGION, client, moto_server

ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS_PROGRAM = ROOT / "ami" / "files" / "bin" / "archiver-credentials"
PROFILE = ROOT / "ami" / "files" / "aws" / "archiver.config"
BUCKET = "tablecast-archiver-test"
WRITE = """
import sys
from app.storage import resolve

location = resolve(sys.argv[1])
with location.fs.open_output_stream(location.path) as out:
    out.write(b"archived")
with location.fs.open_input_stream(location.path) as back:
    assert back.read() == b"archived"
"""


def _policy(*statements: dict[str, object]) -> str:
    """An IAM policy document of ``statements``."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


@pytest.fixture
def enforcing_moto(tmp_path: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """moto with the instance's user and the archiver's role; IAM enforced from then on.

    Yields the endpoint, the role's ARN and the instance's access key (as a
    shared credentials file's ``[default]`` would give it)."""
    with moto_server(tmp_path / "moto.log") as endpoint:
        client(endpoint, "s3").create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        iam = client(endpoint, "iam")
        role = iam.create_role(
            RoleName="archiver",
            AssumeRolePolicyDocument=_policy(
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ),
        )["Role"]["Arn"]
        iam.put_role_policy(
            RoleName="archiver",
            PolicyName="archive",
            PolicyDocument=_policy(
                {
                    "Effect": "Allow",
                    "Action": ["s3:PutObject", "s3:GetObject"],
                    "Resource": f"arn:aws:s3:::{BUCKET}/{layout.ARCHIVE_PREFIX}/*",
                },
                {
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": f"arn:aws:s3:::{BUCKET}",
                },
            ),
        )
        iam.create_user(UserName="instance")
        iam.put_user_policy(
            UserName="instance",
            PolicyName="assume-archiver",
            PolicyDocument=_policy(
                {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": role}
            ),
        )
        key = iam.create_access_key(UserName="instance")["AccessKey"]
        # From now on every request is authenticated and checked against IAM.
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth", data=b"0", headers={"Content-Type": "text/plain"}
        )
        urllib.request.urlopen(request, timeout=10).close()
        yield endpoint, role, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


def write_archive(
    tmp_path: Path, endpoint: str, role: str, key: dict[str, str], *, profile: bool
) -> subprocess.CompletedProcess[str]:
    """Write under ``archive/`` through app.storage, in a process with the node's environment."""
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {key['id']}\naws_secret_access_key = {key['secret']}\n",
        encoding="utf-8",
    )
    config = tmp_path / "archiver-aws.config"
    config.write_text(
        PROFILE.read_text(encoding="utf-8").replace(
            "/opt/tablecast/bin/archiver-credentials", str(CREDENTIALS_PROGRAM)
        ),
        encoding="utf-8",
    )
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "TABLECAST_"))
    }
    environ |= {
        # The instance's own credentials: on a node from its metadata, here from this file.
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "TABLECAST_ARCHIVER_ROLE_ARN": role,
        "TABLECAST_PYTHON": sys.executable,
    }
    if profile:
        environ |= {"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "archiver"}
    return subprocess.run(
        [sys.executable, "-c", WRITE, f"s3://{BUCKET}/{layout.ARCHIVE_PREFIX}/0/batch.bin"],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_pyarrow_writes_the_archive_with_the_role_its_profile_assumes(
    enforcing_moto: tuple[str, str, dict[str, str]], tmp_path: Path
) -> None:
    endpoint, role, key = enforcing_moto
    with_profile = write_archive(tmp_path, endpoint, role, key, profile=True)
    assert with_profile.returncode == 0, with_profile.stderr[-2000:]
    without = write_archive(tmp_path, endpoint, role, key, profile=False)
    assert without.returncode != 0
    assert "ACCESS_DENIED" in without.stderr, without.stderr[-2000:]
