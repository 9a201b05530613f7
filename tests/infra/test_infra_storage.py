"""The pipeline's bucket: private, TLS only, SSE-KMS, versioned, with lifecycle rules."""

from app import handoff
from infra.testing import SynthesizedEnvironment, policy_statements
from tests.infra.synthesized_documents import parameters


def test_all_public_access_blocked(env: SynthesizedEnvironment) -> None:
    assert env["storage"].has_resource(
        "aws_s3_bucket_public_access_block",
        {
            "block_public_acls": True,
            "block_public_policy": True,
            "ignore_public_acls": True,
            "restrict_public_buckets": True,
        },
    )
    assert env["storage"].has_resource(
        "aws_s3_bucket_ownership_controls", {"rule": {"object_ownership": "BucketOwnerEnforced"}}
    )


def test_tls_only_bucket_policy(env: SynthesizedEnvironment) -> None:
    (policy,) = env["storage"].resources("aws_s3_bucket_policy").values()
    (statement,) = policy_statements(policy["policy"])
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statement["Action"] == "s3:*"
    assert len(statement["Resource"]) == 2


def test_sse_kms_with_our_key_and_versioning(env: SynthesizedEnvironment) -> None:
    (encryption,) = (
        env["storage"].resources("aws_s3_bucket_server_side_encryption_configuration").values()
    )
    (rule,) = encryption["rule"]
    default = rule["apply_server_side_encryption_by_default"]
    assert default["sse_algorithm"] == "aws:kms"
    assert default["kms_master_key_id"].startswith("${aws_kms_key.")
    assert env["storage"].has_resource(
        "aws_s3_bucket_versioning", {"versioning_configuration": {"status": "Enabled"}}
    )


def test_lifecycle_moves_the_archive_to_cheaper_storage(env: SynthesizedEnvironment) -> None:
    (lifecycle,) = env["storage"].resources("aws_s3_bucket_lifecycle_configuration").values()
    rules = {rule["id"]: rule for rule in lifecycle["rule"]}
    archive = rules["tiering-archive"]
    assert archive["status"] == "Enabled"
    assert archive["filter"] == [{"prefix": "archive/"}]
    transitions = {t["storage_class"]: t["days"] for t in archive["transition"]}
    assert transitions == {
        "STANDARD_IA": env.config.archive_infrequent_access_days,
        "GLACIER_IR": env.config.archive_glacier_days,
    }
    housekeeping = rules["housekeeping"]
    assert housekeeping["abort_incomplete_multipart_upload"][0]["days_after_initiation"] > 0
    assert (
        housekeeping["noncurrent_version_expiration"][0]["noncurrent_days"]
        == env.config.noncurrent_version_days
    )


def test_only_throwaway_buckets_can_be_destroyed_with_their_data(
    env: SynthesizedEnvironment,
) -> None:
    (bucket,) = env["storage"].resources("aws_s3_bucket").values()
    assert bucket["force_destroy"] is env.config.throwaway
    (workgroup,) = env["storage"].resources("aws_athena_workgroup").values()
    assert workgroup["force_destroy"] is env.config.throwaway
    assert bucket["lifecycle"] == {"prevent_destroy": env.config.is_production}
    assert bucket["bucket"].startswith(f"tablecast-{env.config.name}-")
    assert {"dev", "staging", "prod"} & {env.config.name} == (
        set() if env.config.throwaway else {env.config.name}
    )


def test_the_production_archive_is_under_object_lock(env: SynthesizedEnvironment) -> None:
    """Object Lock on the bucket, no default retention (it would lock every prefix): the
    archiver locks each archive file in governance mode for the days SSM names."""
    storage = env["storage"]
    (bucket,) = storage.resources("aws_s3_bucket").values()
    locks = list(storage.resources("aws_s3_bucket_object_lock_configuration").values())
    parameter = handoff.parameter_name(env.config.name, handoff.ARCHIVE_LOCK_DAYS)
    if not env.config.is_production:
        assert "object_lock_enabled" not in bucket and not locks
        assert parameter not in parameters(env)
        return
    assert env.config.name == "prod" and env.config.archive_locked
    assert bucket["object_lock_enabled"] is True
    (lock,) = locks
    assert lock["object_lock_enabled"] == "Enabled"
    assert "rule" not in lock
    # Object Lock needs versioning on: applied after it, destroyed before it.
    (versioning,) = storage.resources("aws_s3_bucket_versioning")
    assert lock["depends_on"] == [f"aws_s3_bucket_versioning.{versioning}"]
    assert parameters(env)[parameter]["value"] == str(env.config.archive_lock_days)
    # Versioning stays on (Object Lock needs it); nothing may lift a lock.
    assert storage.has_resource(
        "aws_s3_bucket_versioning", {"versioning_configuration": {"status": "Enabled"}}
    )


def test_checkpoint_backups_expire(env: SynthesizedEnvironment) -> None:
    (lifecycle,) = env["storage"].resources("aws_s3_bucket_lifecycle_configuration").values()
    rules = {rule["id"]: rule for rule in lifecycle["rule"]}
    backups = rules["expire-checkpoint-backups"]
    assert backups["filter"] == [{"prefix": "checkpoint-backups/"}]
    assert backups["expiration"] == [{"days": env.config.checkpoint_backup_days}]
