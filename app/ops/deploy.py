"""Deploy the job: upload its wheel, record the version, restart, wait for a heartbeat.

The order of a deploy, each step checked before the next:

1. Read the environment's hand-off from SSM (artifacts prefix, driver, namespace).
2. Upload ``tablecast-<version>-py3-none-any.whl`` to the artifacts prefix, unless
   the same bytes are there (its SHA-256 is the object's metadata). A different
   wheel under the same version is refused: a version names one artifact.
   Each declared job's table schema given (``--schema JOB=FILE``), checked first:
   to ``<artifacts>/schemas/<sha256>.toml``, and its SHA-256 to the job's
   ``schema-sha256``, which run-job checks the document against.
   Each declared job's processor, where the deployment settings are read
   (``processors``, app/ops/processors.py), checked first too: its wheel to
   ``<artifacts>/processors/<sha256>/<file>``, and the class, the wheel's key,
   its SHA-256 and the job's integrity class to the job's parameters, which
   run-job reads (it installs only a wheel of that SHA-256); a job the settings
   give no schema gets ``schema-sha256`` ``processor-input`` (its processor's
   own input reads the messages), and ``--schema`` for it is refused.
3. Put the wheel's SHA-256 (``job-wheel-sha256``) and ``job-version`` in SSM;
   run-job installs exactly that version, and only a wheel of that hash (the
   nodes read ``artifacts/`` and SSM, they cannot write either).
4. Restart ``tablecast-job.service`` on the driver through SSM Run Command and
   wait until it is active with that version installed; where the deployment
   settings declare jobs (SSM ``jobs``), each job's ``tablecast-job@<name>.service``.
5. Wait for the job's ``Heartbeat`` metric newer than the restart (each declared
   job's, by its ``Job`` dimension): the job runs micro-batches again.
6. Arm the alarms that wait for the first deploy (``metric_names.ARMED_BY_DEPLOY``:
   the job's, or each declared job's, and the archiver's heartbeats, the
   checkpoint copies), which infra creates with their actions off; every later
   deploy finds them armed.

A failure after step 3 leaves ``job-version`` at the new version, and systemd
keeps restarting the service with it; roll back with ``deploy --version <old>``,
which repeats steps 3 to 5 with a wheel already uploaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from app import handoff
from app.contract.schema import parse_schema
from app.errors import ConfigurationError
from app.ops import metrics, processors, service
from app.ops.aws import AwsClients
from app.ops.environment import Handoff, find_driver, read_handoff, write_job_version
from app.ops.errors import ArtifactConflictError, ArtifactMissingError
from app.ops.wheel import Wheel, wheel_file_name

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SHA256_METADATA = "sha256"
COMMIT_METADATA = "git-commit"
UNRECORDED = "unrecorded"


@dataclass(frozen=True, slots=True)
class DeployReport:
    environment: str
    version: str
    previous_version: str
    artifact_uri: str
    uploaded: bool
    restart: service.ServiceAction
    heartbeat: metrics.Datapoint
    armed: tuple[str, ...] = ()
    """The alarms this deploy armed (the first deploy's)."""

    def lines(self) -> list[str]:
        return [
            f"environment:  {self.environment}",
            f"version:      {self.previous_version} -> {self.version}",
            f"artifact:     {self.artifact_uri} ("
            + ("uploaded" if self.uploaded else "already there, unchanged")
            + ")",
            f"restarted:    {self.restart.done_at.isoformat(timespec='seconds')} on "
            f"{self.restart.instance_id} (command {self.restart.command_id})",
            f"heartbeat:    {self.heartbeat.timestamp.isoformat(timespec='seconds')}",
            *([f"armed:        {', '.join(self.armed)}"] if self.armed else []),
        ]


def artifact_uri(artifacts_prefix: str, version: str) -> str:
    return f"{artifacts_prefix.rstrip('/')}/{wheel_file_name(version)}"


def upload_wheel(
    s3: S3Client, artifacts_prefix: str, wheel: Wheel, *, replace: bool = False, commit: str = ""
) -> tuple[str, bool]:
    """Put the wheel under the prefix; ``(uri, uploaded)``; refuse to change a version's bytes."""
    uri = artifact_uri(artifacts_prefix, wheel.version)
    bucket, key = _split(uri)
    existing = _object_sha256(s3, bucket, key)
    if existing == wheel.sha256:
        return uri, False
    if existing is not None and not replace:
        raise ArtifactConflictError(uri, existing, wheel.sha256)
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=wheel.path.read_bytes(),
        ContentType="application/zip",
        Metadata={SHA256_METADATA: wheel.sha256, COMMIT_METADATA: commit or "unknown"},
    )
    return uri, True


def deploy(
    clients: AwsClients,
    environment: str,
    *,
    wheel: Wheel | None = None,
    version: str | None = None,
    replace: bool = False,
    commit: str = "",
    heartbeat_timeout_s: float = 900.0,
    poll_s: float = 20.0,
    progress: Callable[[str], None] = lambda line: None,
    schemas: Mapping[str, Path] | None = None,
    job_processors: Sequence[processors.JobProcessor] | None = None,
) -> DeployReport:
    """Deploy ``wheel``, or re-deploy ``version`` already uploaded (exactly one of them);
    with ``schemas``, each declared job's table schema document, by job; with
    ``job_processors`` (the deployment settings'), every declared job's processor and
    integrity class (None: as recorded)."""
    if (wheel is None) == (version is None):
        raise ValueError("deploy takes a wheel or a version, not both")
    # Step 1: the hand-off.
    found = read_handoff(clients.ssm, environment)
    previous = found.job_version
    prefix = found.artifacts_uri
    documents = _read_schemas(found, schemas or {})
    shipped = (
        None
        if job_processors is None
        else processors.read_all(job_processors, found.jobs, environment)
    )
    for owner, (declared, _) in (shipped or {}).items():
        if declared.reads_own_input and owner in documents:
            raise ConfigurationError(
                f"--schema {owner}={(schemas or {})[owner]}: the deployment settings give job "
                f"{owner} no schema, so its processor {declared.processor} reads its messages "
                "with its own input schema: leave --schema out, or name the schema in the "
                "settings"
            )
    # Step 2: the artifact.
    if wheel is not None:
        uri, uploaded = upload_wheel(clients.s3, prefix, wheel, replace=replace, commit=commit)
        target, sha256 = wheel.version, wheel.sha256
        progress(f"{'uploaded' if uploaded else 'unchanged'} {uri}")
    elif version is not None:
        uri, uploaded, target = artifact_uri(prefix, version), False, version
        recorded = _object_sha256(clients.s3, *_split(uri))
        if recorded is None:
            raise ArtifactMissingError(uri)
        if recorded == UNRECORDED:
            raise ArtifactMissingError(uri, "no SHA-256 recorded with it: deploy it from the wheel")
        sha256 = recorded
        progress(f"found {uri}")
    for owner, (document, digest) in documents.items():
        schema_uri = upload_schema(clients.s3, prefix, document, digest)
        clients.ssm.put_parameter(
            Name=handoff.job_parameter_name(environment, owner, handoff.SCHEMA_SHA256),
            Value=digest,
            Type="String",
            Overwrite=True,
        )
        progress(f"job {owner}: schema {schema_uri}")
    for declared, user_wheel in (shipped or {}).values():
        _ship_processor(clients, environment, prefix, declared, user_wheel, progress)
        if not declared.reads_own_input and declared.job not in documents:
            _forget_processor_input(clients, environment, declared.job, progress)
    if shipped is None and found.jobs:
        progress("jobs' processors and integrity: as recorded (no deployment settings named)")
    # Step 3: the version the service installs, and the only bytes it installs.
    write_job_version(clients.ssm, environment, target, sha256)
    progress(f"job-version {previous} -> {target}")
    # Step 4: restart on the driver: the one job, or every declared job.
    jobs = found.jobs
    units = [handoff.job_unit(job) for job in jobs] or [service.UNIT]
    instance = find_driver(clients.ec2, found)
    progress(f"restarting {' '.join(units)} on {instance}")
    restarted = service.restart(
        clients.ssm, clients.ec2, instance, target, poll_s=min(poll_s, 5.0), units=units
    )
    progress(
        f"restarted at {restarted.done_at.isoformat(timespec='seconds')}; waiting for a heartbeat"
    )
    # Step 5: each job's heartbeat after the restart.
    for job in jobs or (None,):
        heartbeat = metrics.wait_for_heartbeat(
            clients.cloudwatch,
            namespace=found.metric_namespace,
            environment=environment,
            after=restarted.done_at,
            timeout_s=heartbeat_timeout_s,
            poll_s=poll_s,
            job=job,
        )
        if job is not None:
            progress(f"job {job}: heartbeat {heartbeat.timestamp.isoformat(timespec='seconds')}")
    # Step 6: what runs now may page.
    armed = metrics.arm_alarms(clients.cloudwatch, environment, jobs)
    if armed:
        progress(f"armed {', '.join(armed)}")
    return DeployReport(
        environment=environment,
        version=target,
        previous_version=previous,
        artifact_uri=uri,
        uploaded=uploaded,
        restart=restarted,
        heartbeat=heartbeat,
        armed=armed,
    )


def _ship_processor(
    clients: AwsClients,
    environment: str,
    artifacts_prefix: str,
    declared: processors.JobProcessor,
    user_wheel: processors.ProcessorWheel | None,
    progress: Callable[[str], None],
) -> None:
    """Upload a job's processor wheel (unless there) and record its parameters."""
    if user_wheel is not None:
        uri = f"{artifacts_prefix.rstrip('/')}/{user_wheel.key}"
        bucket, key = _split(uri)
        if _object_sha256(clients.s3, bucket, key) != user_wheel.sha256:
            clients.s3.put_object(
                Bucket=bucket,
                Key=key,
                Body=user_wheel.path.read_bytes(),
                ContentType="application/zip",
                Metadata={SHA256_METADATA: user_wheel.sha256},
            )
        what = f"processor {declared.processor} from {uri}"
    else:
        what = "the built-in processor"
    for name, value in processors.parameters(declared, user_wheel).items():
        clients.ssm.put_parameter(
            Name=handoff.job_parameter_name(environment, declared.job, name),
            Value=value,
            Type="String",
            Overwrite=True,
        )
    progress(f"job {declared.job}: {what}, integrity {declared.integrity}")


def _forget_processor_input(
    clients: AwsClients, environment: str, job: str, progress: Callable[[str], None]
) -> None:
    """A job the settings give a schema again reads with no processor's own input: until
    ``--schema`` ships the document, run-job refuses to start it (``none``)."""
    name = handoff.job_parameter_name(environment, job, handoff.SCHEMA_SHA256)
    try:
        recorded = clients.ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except clients.ssm.exceptions.ParameterNotFound:
        return
    if recorded == handoff.PROCESSOR_INPUT:
        clients.ssm.put_parameter(Name=name, Value=handoff.NO_SCHEMA, Type="String", Overwrite=True)
        progress(
            f"job {job}: the settings name a schema, none is deployed: deploy it with "
            f"--schema {job}=FILE (the job does not start until then)"
        )


def _read_schemas(found: Handoff, schemas: Mapping[str, Path]) -> dict[str, tuple[bytes, str]]:
    """Each job's schema document and its SHA-256, every one checked before any upload."""
    documents: dict[str, tuple[bytes, str]] = {}
    for job, path in schemas.items():
        if job not in found.jobs:
            declared = ", ".join(found.jobs) or "none"
            raise ConfigurationError(
                f"--schema {job}={path}: environment {found.environment} declares no job "
                f"{job} (its jobs: {declared})"
            )
        try:
            document = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"--schema {job}={path}: {exc.strerror}") from None
        parse_schema(document, str(path))  # a malformed one names its column, here
        documents[job] = (document, hashlib.sha256(document).hexdigest())
    return documents


def upload_schema(s3: S3Client, artifacts_prefix: str, document: bytes, sha256: str) -> str:
    """Put a table schema document under ``schemas/``, named by its SHA-256; its URI."""
    uri = f"{artifacts_prefix.rstrip('/')}/{handoff.SCHEMAS_FOLDER}/{sha256}.toml"
    bucket, key = _split(uri)
    if _object_sha256(s3, bucket, key) != sha256:
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=document,
            ContentType="application/toml",
            Metadata={SHA256_METADATA: sha256},
        )
    return uri


def _split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _object_sha256(s3: S3Client, bucket: str, key: str) -> str | None:
    """The SHA-256 recorded on the object; ``None`` when there is no object."""
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in {"404", "NoSuchKey", "NotFound"}:
            return None
        raise
    return head.get("Metadata", {}).get(SHA256_METADATA, UNRECORDED)
