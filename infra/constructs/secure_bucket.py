"""An S3 bucket with every guard on: no public access, TLS only, SSE-KMS, versioning, lifecycle."""

from collections.abc import Sequence
from dataclasses import dataclass

from cdktf_cdktf_provider_aws.s3_bucket import S3Bucket
from cdktf_cdktf_provider_aws.s3_bucket_lifecycle_configuration import (
    S3BucketLifecycleConfiguration,
    S3BucketLifecycleConfigurationRule,
    S3BucketLifecycleConfigurationRuleAbortIncompleteMultipartUpload,
    S3BucketLifecycleConfigurationRuleExpiration,
    S3BucketLifecycleConfigurationRuleFilter,
    S3BucketLifecycleConfigurationRuleNoncurrentVersionExpiration,
    S3BucketLifecycleConfigurationRuleTransition,
)
from cdktf_cdktf_provider_aws.s3_bucket_object_lock_configuration import (
    S3BucketObjectLockConfigurationA,
)
from cdktf_cdktf_provider_aws.s3_bucket_ownership_controls import (
    S3BucketOwnershipControls,
    S3BucketOwnershipControlsRule,
)
from cdktf_cdktf_provider_aws.s3_bucket_policy import S3BucketPolicy
from cdktf_cdktf_provider_aws.s3_bucket_public_access_block import S3BucketPublicAccessBlock
from cdktf_cdktf_provider_aws.s3_bucket_server_side_encryption_configuration import (
    S3BucketServerSideEncryptionConfigurationA,
    S3BucketServerSideEncryptionConfigurationRuleA,
    S3BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultA,
)
from cdktf_cdktf_provider_aws.s3_bucket_versioning import (
    S3BucketVersioningA,
    S3BucketVersioningVersioningConfiguration,
)
from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.constructs.policies import tls_only_bucket_policy

# Parts of a failed multipart upload are billed until aborted.
ABORT_INCOMPLETE_UPLOADS_DAYS = 7


@dataclass(frozen=True, kw_only=True)
class Tiering:
    """Move objects under ``prefix`` to cheaper storage classes as they age."""

    prefix: str
    """Key prefix with its trailing ``/``, e.g. ``"archive/"``."""
    transitions: tuple[tuple[int, str], ...]
    """``(age in days, storage class)`` pairs, oldest last."""


class SecureBucket(Construct):
    """A private, encrypted, versioned bucket with lifecycle rules."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        bucket_name: str,
        kms_key_arn: str,
        noncurrent_version_days: int,
        tiering: Sequence[Tiering] = (),
        expiring: Sequence[tuple[str, int]] = (),
        force_destroy: bool = False,
        prevent_destroy: bool = False,
        object_lock: bool = False,
    ) -> None:
        """Create the bucket and its guards.

        :param bucket_name: globally unique bucket name.
        :param kms_key_arn: customer-managed key for default SSE-KMS encryption.
        :param noncurrent_version_days: days a replaced or deleted version is kept.
        :param tiering: storage-class transitions by prefix.
        :param expiring: ``(prefix with its /, days)``: objects there are deleted that old.
        :param force_destroy: let ``destroy`` empty the bucket (test environments only).
        :param prevent_destroy: refuse any plan that destroys the bucket.
        :param object_lock: S3 Object Lock on, with no default retention: the writer of
            what must be kept (the archiver) locks each object it writes. A default
            retention would lock every prefix's objects (the output's rewritten files, the
            checkpoint copies) and make every upload carry a checksum header.
        """
        super().__init__(scope, id_)
        self.bucket = S3Bucket(
            self,
            "bucket",
            bucket=bucket_name,
            force_destroy=force_destroy,
            object_lock_enabled=True if object_lock else None,
            lifecycle=TerraformResourceLifecycle(prevent_destroy=prevent_destroy),
        )
        bucket_id = self.bucket.id
        # ACLs off: the bucket owner owns every object, policies alone decide.
        S3BucketOwnershipControls(
            self,
            "ownership",
            bucket=bucket_id,
            rule=S3BucketOwnershipControlsRule(object_ownership="BucketOwnerEnforced"),
        )
        S3BucketPublicAccessBlock(
            self,
            "public-access-block",
            bucket=bucket_id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
        )
        versioning = S3BucketVersioningA(
            self,
            "versioning",
            bucket=bucket_id,
            versioning_configuration=S3BucketVersioningVersioningConfiguration(status="Enabled"),
        )
        if object_lock:
            # Object Lock needs versioning on: created after it, gone before it.
            S3BucketObjectLockConfigurationA(
                self,
                "object-lock",
                bucket=bucket_id,
                object_lock_enabled="Enabled",
                depends_on=[versioning],
            )
        S3BucketServerSideEncryptionConfigurationA(
            self,
            "encryption",
            bucket=bucket_id,
            rule=[
                S3BucketServerSideEncryptionConfigurationRuleA(
                    apply_server_side_encryption_by_default=(
                        S3BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultA(
                            sse_algorithm="aws:kms", kms_master_key_id=kms_key_arn
                        )
                    ),
                    # One KMS call per bucket and hour instead of one per object.
                    bucket_key_enabled=True,
                )
            ],
        )
        S3BucketPolicy(
            self, "policy", bucket=bucket_id, policy=tls_only_bucket_policy(self.bucket.arn)
        )
        S3BucketLifecycleConfiguration(
            self,
            "lifecycle",
            bucket=bucket_id,
            rule=[_housekeeping_rule(noncurrent_version_days)]
            + [_tiering_rule(tier) for tier in tiering]
            + [_expiry_rule(prefix, days) for prefix, days in expiring],
        )

    @property
    def name(self) -> str:
        """The bucket's name."""
        return str(self.bucket.bucket)

    @property
    def arn(self) -> str:
        """The bucket's ARN."""
        return str(self.bucket.arn)


def _housekeeping_rule(noncurrent_version_days: int) -> S3BucketLifecycleConfigurationRule:
    return S3BucketLifecycleConfigurationRule(
        id="housekeeping",
        status="Enabled",
        filter=[S3BucketLifecycleConfigurationRuleFilter(prefix="")],
        abort_incomplete_multipart_upload=[
            S3BucketLifecycleConfigurationRuleAbortIncompleteMultipartUpload(
                days_after_initiation=ABORT_INCOMPLETE_UPLOADS_DAYS
            )
        ],
        noncurrent_version_expiration=[
            S3BucketLifecycleConfigurationRuleNoncurrentVersionExpiration(
                noncurrent_days=noncurrent_version_days
            )
        ],
        # Once the versions behind a delete marker are gone, so is the marker.
        expiration=[
            S3BucketLifecycleConfigurationRuleExpiration(expired_object_delete_marker=True)
        ],
    )


def _expiry_rule(prefix: str, days: int) -> S3BucketLifecycleConfigurationRule:
    return S3BucketLifecycleConfigurationRule(
        id=f"expire-{prefix.strip('/')}",
        status="Enabled",
        filter=[S3BucketLifecycleConfigurationRuleFilter(prefix=prefix)],
        expiration=[S3BucketLifecycleConfigurationRuleExpiration(days=days)],
    )


def _tiering_rule(tier: Tiering) -> S3BucketLifecycleConfigurationRule:
    return S3BucketLifecycleConfigurationRule(
        id=f"tiering-{tier.prefix.strip('/')}",
        status="Enabled",
        filter=[S3BucketLifecycleConfigurationRuleFilter(prefix=tier.prefix)],
        transition=[
            S3BucketLifecycleConfigurationRuleTransition(days=days, storage_class=storage_class)
            for days, storage_class in tier.transitions
        ],
    )
