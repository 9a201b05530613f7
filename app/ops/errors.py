"""The operator tools' exceptions: one root, each carrying its facts.

Every one is a :class:`app.errors.TablecastError`, so the command line prints
it as one line and exits with its ``exit_code``.
"""

from __future__ import annotations

from app.errors import ExitCode, TablecastError


class OpsError(TablecastError):
    """Root of every error an operator tool reports."""

    exit_code = ExitCode.CHECK_FAILED


class HandoffError(OpsError):
    """The environment's SSM hand-off lacks a parameter or holds a bad value."""

    exit_code = ExitCode.USAGE

    def __init__(self, environment: str, parameter: str, problem: str) -> None:
        super().__init__(f"SSM parameter /tablecast/{environment}/{parameter}: {problem}")
        self.environment = environment
        self.parameter = parameter
        self.problem = problem


class BuildError(OpsError):
    """The job's wheel could not be built or is not a tablecast wheel."""


class ArtifactConflictError(OpsError):
    """A different wheel is already uploaded under the same version."""

    def __init__(self, uri: str, existing_sha256: str, new_sha256: str) -> None:
        super().__init__(
            f"{uri} already holds a different wheel (sha256 {existing_sha256[:12]}..., "
            f"this one {new_sha256[:12]}...): bump the version in pyproject.toml, "
            "or pass --replace to overwrite it"
        )
        self.uri = uri
        self.existing_sha256 = existing_sha256
        self.new_sha256 = new_sha256


class ArtifactMissingError(OpsError):
    """The version to deploy has no wheel under the artifacts prefix."""

    def __init__(self, uri: str, why: str = "deploy it from a build first") -> None:
        super().__init__(f"no wheel at {uri}: {why}")
        self.uri = uri


class DriverStateError(OpsError):
    """The driver node is not in a state to run a command."""

    def __init__(self, instance_id: str, state: str) -> None:
        super().__init__(f"driver instance {instance_id} is {state}, not running")
        self.instance_id = instance_id
        self.state = state


class CommandError(OpsError):
    """An SSM Run Command on the driver did not succeed."""

    exit_code = ExitCode.UNAVAILABLE

    def __init__(
        self, instance_id: str, command_id: str, status: str, what: str, output: str
    ) -> None:
        tail = " | ".join(line for line in output.strip().splitlines()[-3:] if line)
        super().__init__(
            f"{what} on {instance_id} ended {status} (command {command_id})"
            + (f": {tail}" if tail else "")
        )
        self.instance_id = instance_id
        self.command_id = command_id
        self.status = status
        self.output = output


class HeartbeatTimeoutError(OpsError):
    """The job published no heartbeat newer than its (re)start in time."""

    exit_code = ExitCode.UNAVAILABLE

    def __init__(
        self, environment: str, since: str, waited_s: float, last_seen: str, job: str | None = None
    ) -> None:
        whose = "" if job is None else f", job {job}"
        super().__init__(
            f"environment {environment}{whose}: no Heartbeat metric newer than {since} after "
            f"{waited_s:.0f} s (last heartbeat: {last_seen}); see the log group "
            f"/tablecast/{environment}/job"
        )
        self.environment = environment
        self.job = job
        self.since = since
        self.waited_s = waited_s
        self.last_seen = last_seen


class TopicPolicyError(OpsError):
    """A topic request breaks the environment's topic policy; nothing was created."""

    exit_code = ExitCode.USAGE


class KafkaAdminError(OpsError):
    """The brokers refused or failed a topic operation."""

    def __init__(self, topic: str, action: str, reason: str) -> None:
        super().__init__(f"{action} topic {topic!r} failed: {reason}")
        self.topic = topic
        self.action = action
        self.reason = reason


class ProduceError(OpsError):
    """Messages were not delivered, or not in the order they were produced."""

    def __init__(self, failed: int, total: int, first_error: str) -> None:
        super().__init__(f"{failed} of {total} messages not delivered in order: {first_error}")
        self.failed = failed
        self.total = total
        self.first_error = first_error


class ArchiveConflictError(OpsError):
    """Another writer extended the archive: two archivers must never run at once."""

    exit_code = ExitCode.DATA_LOSS

    def __init__(self, topic: str, partition: int, expected_start: int, found_end: int) -> None:
        super().__init__(
            f"archive of topic {topic} partition {partition} now ends at {found_end}, "
            f"but this archiver was about to write from {expected_start}: "
            "is a second archiver running?"
        )
        self.topic = topic
        self.partition = partition
        self.expected_start = expected_start
        self.found_end = found_end


class KafkaClientError(OpsError):
    """The consumer or producer reported an error it cannot recover from."""
