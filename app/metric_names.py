"""Names of the job's CloudWatch metrics, shared by ``app`` and ``infra``.

The job publishes these and the infrastructure's alarms watch them; both
import this module so that an alarm can never watch a metric nobody publishes.
Every metric carries the ``Environment`` dimension; those of :data:`BY_SOURCE`
also a ``Source`` dimension.
"""

from typing import Final

NAMESPACE: Final = "Tablecast"
ENVIRONMENT_DIMENSION: Final = "Environment"
# A declared job's metrics (``tablecast run --job NAME``) carry its name beside the
# environment; the environment's one job publishes without it.
JOB_DIMENSION: Final = "Job"

# Published once per micro-batch; its absence means the job is not running.
HEARTBEAT: Final = "Heartbeat"
INPUT_MESSAGES: Final = "InputMessages"
ROWS_WRITTEN: Final = "RowsWritten"
BATCH_DURATION_MS: Final = "BatchDurationMs"
# Records between the last processed offset and the newest readable offset (the
# last stable offset under read_committed).
RECORDS_BEHIND: Final = "RecordsBehind"
RECORDS_BEHIND_WORST_PARTITION: Final = "RecordsBehindWorstPartition"
# Records between the last processed offset and the high watermark: beyond the
# readable end they are records of transactions still open.
RECORDS_BEHIND_HIGH_WATERMARK: Final = "RecordsBehindHighWatermark"
# The longest any partition's last stable offset has stayed where it is with
# records beyond it, in seconds: a transaction left open stops it there while
# the high watermark moves on.
STABLE_OFFSET_STALLED_SECONDS: Final = "StableOffsetStalledSeconds"
SESSIONS_IN_STATE: Final = "SessionsInState"
STATE_BYTES: Final = "StateBytes"
INTEGRITY_VIOLATIONS: Final = "IntegrityViolations"
QUARANTINED_MESSAGES: Final = "QuarantinedMessages"
# Integrity classes ordered and once (``run --integrity``): messages dropped for their seq
# (at or below the last applied, or applied before), and seqs that never arrived (skipped
# under ordered; missing when a session ended or timed out, under once). 0 otherwise.
DROPPED_MESSAGES: Final = "DroppedMessages"
MISSING_SEQS: Final = "MissingSeqs"
OUTPUT_FILES: Final = "OutputFiles"
OUTPUT_BYTES: Final = "OutputBytes"

ALL: Final = (
    HEARTBEAT,
    INPUT_MESSAGES,
    ROWS_WRITTEN,
    BATCH_DURATION_MS,
    RECORDS_BEHIND,
    RECORDS_BEHIND_WORST_PARTITION,
    RECORDS_BEHIND_HIGH_WATERMARK,
    STABLE_OFFSET_STALLED_SECONDS,
    SESSIONS_IN_STATE,
    STATE_BYTES,
    INTEGRITY_VIOLATIONS,
    QUARANTINED_MESSAGES,
    DROPPED_MESSAGES,
    MISSING_SEQS,
    OUTPUT_FILES,
    OUTPUT_BYTES,
)

# Records read in a micro-batch from each tier, by a job that reads Kafka and
# the raw archive (``tablecast run --bootstrap-servers ... --archive ...``):
# one datum per tier, 0 included, with the dimension Source=archive|kafka.
# A job reading one source does not publish it: InputMessages is all of it.
SOURCE_DIMENSION: Final = "Source"
RECORDS_SERVED: Final = "RecordsServed"
# The Source dimension's values: the tiers of app.sources.records.Tier, named
# here so that infra's dashboard need not import the job's data libraries.
SOURCE_ARCHIVE: Final = "archive"
SOURCE_KAFKA: Final = "kafka"
SOURCES: Final = (SOURCE_ARCHIVE, SOURCE_KAFKA)

# Published only by a job reading both tiers, hence not in ALL (what every
# run publishes, with the Environment dimension alone).
BY_SOURCE: Final = (RECORDS_SERVED,)

# The archiver's (``tablecast-ops archive --follow --metrics cloudwatch``, the driver's
# service), every minute with the Environment dimension: a heartbeat while it runs, and
# the records Kafka holds that the archive does not yet (over every partition).
ARCHIVER_HEARTBEAT: Final = "ArchiverHeartbeat"
ARCHIVER_RECORDS_BEHIND: Final = "ArchiverRecordsBehind"
ARCHIVER: Final = (ARCHIVER_HEARTBEAT, ARCHIVER_RECORDS_BEHIND)

# Alarms (named ``tablecast-<env>-<name>``) whose silence is normal until the job's first
# deploy: there is no job, no checkpoint to copy and no archiver (it runs the deployed
# wheel) before it. infra creates them with their actions off; ``tablecast-ops deploy``
# turns them on, so nobody is paged for an environment that runs nothing yet.
ARMED_BY_DEPLOY: Final = (
    "job-heartbeat-missing",
    "checkpoint-backup-missing",
    "archiver-heartbeat-missing",
)


JOB_ALARM_PREFIX: Final = "job-"


def job_alarm(alarm: str, job: str | None) -> str:
    """A job alarm's name (``job-heartbeat-missing``) for the environment's one job, or for
    a declared job: ``job-<name>-heartbeat-missing``."""
    if not alarm.startswith(JOB_ALARM_PREFIX):
        raise ValueError(f"{alarm!r} is not a job alarm")
    return alarm if job is None else f"{JOB_ALARM_PREFIX}{job}-{alarm[len(JOB_ALARM_PREFIX) :]}"


def armed_by_deploy(job: str | None) -> tuple[str, ...]:
    """The alarms a deploy of ``job`` arms: its heartbeat's, and the environment's own."""
    return tuple(
        job_alarm(name, job) if name.startswith(JOB_ALARM_PREFIX) else name
        for name in ARMED_BY_DEPLOY
    )
