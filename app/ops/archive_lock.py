"""Each archive file under S3 Object Lock, where the environment's archive is locked.

Production's bucket has Object Lock on and no default retention (a default
would lock every prefix, and make every upload of pyarrow and Spark carry a
checksum header): the archiver locks each file it writes, in governance mode,
for the days the hand-off's ``archive-lock-days`` names. Until then nobody
deletes a version of it for good without ``s3:BypassGovernanceRetention``,
which no role of the environment has (docs/operations.md, "Break glass").

A file written and not yet locked when the archiver died is the last of its
partition: the archiver locks each partition's last file when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from app.errors import ConfigurationError
from app.ops.errors import OpsError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectLockRetentionTypeDef


class ArchiveLockError(OpsError):
    """S3 refused to lock an archive file (the bucket has no Object Lock, or the role may not)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"could not lock archive file {path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class ArchiveLock:
    """Locks archive files, given as pyarrow's S3 paths (``bucket/key``)."""

    s3: S3Client
    days: int

    @classmethod
    def of(cls, s3: S3Client, days: int, archive_uri: str) -> ArchiveLock:
        if days < 1:
            raise ConfigurationError(f"archive-lock-days must be positive (got {days})")
        if not archive_uri.startswith("s3://"):
            raise ConfigurationError(f"{archive_uri}: only an s3:// archive is put under lock")
        return cls(s3, days)

    def lock(self, path: str, now: datetime | None = None) -> datetime:
        """Lock ``path`` for :attr:`days` from ``now``; the moment it is locked until."""
        until = (now or datetime.now(UTC)) + timedelta(days=self.days)
        bucket, key = _split(path)
        retention: ObjectLockRetentionTypeDef = {"Mode": "GOVERNANCE", "RetainUntilDate": until}
        try:
            self.s3.put_object_retention(Bucket=bucket, Key=key, Retention=retention)
        except ClientError as exc:
            raise ArchiveLockError(path, str(exc)) from None
        return until

    def ensure_locked(self, path: str) -> bool:
        """Lock ``path`` unless it has a retention already; whether it had to.

        HeadObject names an object's lock to whom may read its retention
        (``s3:GetObjectRetention``, which the archiver's role has).
        """
        bucket, key = _split(path)
        try:
            head = self.s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            raise ArchiveLockError(path, str(exc)) from None
        if head.get("ObjectLockMode"):
            return False
        self.lock(path)
        return True


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key
