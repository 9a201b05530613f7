"""The job's defaults, in one place: ``JobConfig``, the engine's ``Rules``
and the command line take them from here (a light module: the CLI builds
its help from it without loading Spark)."""

from typing import Final

from app import handoff

TOPIC_PATTERN: Final = handoff.DEFAULT_TOPIC_PATTERN
TRIGGER: Final = "processing-time=1 minute"
MAX_OFFSETS_PER_TRIGGER: Final = 500_000
# Spark's maxTriggerDelay: the longest a batch waits for --min-offsets-per-trigger.
MAX_TRIGGER_DELAY: Final = "15 minutes"
MAX_TRIGGER_DELAY_S: Final = 900.0
# Idle sessions expire after this much partition time; the CLI's default
# spells it as SESSION_TIMEOUT (a test keeps the two equal).
SESSION_TIMEOUT: Final = "1 hour"
SESSION_TIMEOUT_MS: Final = 3_600_000
# How long files a rewrite or compaction replaced stay for readers of the snapshot
# before it (app.sink.rewrite, --retire-grace), and the most it may be: meanwhile a
# plain-listing reader sees the rewritten blocks twice.
RETIRE_GRACE_S: Final = 120.0
MAX_RETIRE_GRACE_S: Final = 3600.0
# How long a writer of an output (the live job, repair) may go without renewing its
# lease before another may take the output over (app.sink.fencing, --writer-lease):
# the longest a restart on another host waits for a holder that died without a word.
WRITER_LEASE: Final = "30 seconds"
WRITER_LEASE_S: Final = 30.0
# How far back the output's Iceberg table keeps snapshots for time travel
# (app.table.history, --table-history): Iceberg's own default age, 5 days.
TABLE_HISTORY: Final = "5 days"
TABLE_HISTORY_S: Final = 432_000.0
