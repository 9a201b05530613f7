"""Rewrites: new names published, old names retired, a crash finished by the next run.

Locally and on S3 (moto on loopback, with bucket versioning: an object
written twice under one key would show two versions).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.errors import OutputStateError
from app.sink import rewrite as rewrite_mod
from app.sink.rewrite import Rewrite, RewriteSteps
from app.sink.writer import visible_files
from app.storage import Location, resolve

_BLOCK = "part-t-0-00000000000000000000-00000000000000000010-000"
OLD = (f"date=2026-01-01/{_BLOCK}.parquet", f"date=2026-01-02/{_BLOCK}.parquet")
STAGED = f"_tablecast/recompute/k/date=2026-01-01/{_BLOCK}.parquet"


class Crash(Exception):
    pass


class CrashAfter(RewriteSteps):
    def __init__(self, step: int) -> None:
        self.step = step

    def recorded(self) -> None:
        if self.step == 1:
            raise Crash("after step 1")

    def published(self) -> None:
        if self.step == 2:
            raise Crash("after step 2")


@pytest.fixture(params=["local", "s3"])
def output(request: pytest.FixtureRequest, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Location]:  # fmt: skip
    if request.param == "local":
        yield resolve(str(tmp_path / "out"))
        return
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        request_ = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request_).close()
        settings = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_REGION": "us-east-1", "TABLECAST_S3_ENDPOINT": endpoint}  # fmt: skip
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="lake")
        client.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
        yield resolve("s3://lake/out")
    finally:
        server.stop()


def _visible(location: Location) -> dict[str, bytes]:
    return {p: location.read_bytes(location.child(p)) for p in visible_files(location)}


def _prepare(location: Location) -> Rewrite:
    for relative in OLD:
        location.write_bytes_atomic(location.child(relative), b"old " + relative.encode())
    location.write_bytes_atomic(location.child(STAGED), b"new")
    new = rewrite_mod.renamed(OLD[0], "r1")
    assert new == OLD[0].replace("-000.parquet", "-000~r1.parquet")
    assert rewrite_mod.block_of(new) == rewrite_mod.block_of(OLD[0])
    return Rewrite("r1", ((STAGED, new),), OLD)


@pytest.mark.parametrize("step", [1, 2])
def test_a_rewrite_crashed_after_a_step_is_finished_by_the_next_run(
    output: Location, step: int
) -> None:
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(step))
    seen = set(_visible(output))
    # Old names are still visible (step 2: beside the new one, its block twice).
    assert set(OLD) <= seen
    assert (rewrite.publish[0][1] in seen) == (step == 2)
    assert [r.key for r in rewrite_mod.open_rewrites(output)] == ["r1"]

    assert [r.key for r in rewrite_mod.finish_open(output)] == ["r1"]
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    assert rewrite_mod.open_rewrites(output) == []
    assert rewrite_mod.finish_open(output) == []  # nothing left to finish


def test_no_published_name_is_written_twice(output: Location) -> None:

    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(2))
    # The crashed attempt published the new name; finishing must not copy it again.
    output.write_bytes_atomic(output.child(STAGED), b"new")
    rewrite_mod.finish_open(output)
    assert _visible(output) == {rewrite.publish[0][1]: b"new"}
    if not output.is_local:  # S3: one version of the key (moto keeps each write)
        import os

        import boto3

        client = boto3.client("s3", endpoint_url=os.environ["TABLECAST_S3_ENDPOINT"],
                              region_name="us-east-1")  # fmt: skip
        versions = client.list_object_versions(Bucket="lake", Prefix="out/date=")["Versions"]
        new_key = "out/" + rewrite.publish[0][1]
        assert sum(1 for v in versions if v["Key"] == new_key) == 1


def test_a_rewrite_whose_staged_file_is_gone_keeps_the_old_names_and_says_so(
    output: Location,
) -> None:
    rewrite = _prepare(output)
    with pytest.raises(Crash):
        rewrite_mod.carry_out(output, rewrite, CrashAfter(1))
    output.delete_file(output.child(STAGED))
    with pytest.raises(OutputStateError) as refused:
        rewrite_mod.finish_open(output)
    assert "\n" not in str(refused.value) and "r1" in str(refused.value)
    assert set(_visible(output)) == set(OLD)  # nothing retired: no row lost
