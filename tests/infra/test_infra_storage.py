"""The pipeline's bucket: private, TLS only, SSE-KMS, versioned, with lifecycle rules."""

from infra.testing import SynthesizedEnvironment, policy_statements


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


def test_only_test_buckets_can_be_destroyed_with_their_data(env: SynthesizedEnvironment) -> None:
    (bucket,) = env["storage"].resources("aws_s3_bucket").values()
    assert bucket["force_destroy"] is (not env.config.is_production)
    assert bucket["lifecycle"] == {"prevent_destroy": env.config.is_production}
    assert bucket["bucket"].startswith(f"tablecast-{env.config.name}-")


def test_checkpoint_backups_expire(env: SynthesizedEnvironment) -> None:
    (lifecycle,) = env["storage"].resources("aws_s3_bucket_lifecycle_configuration").values()
    rules = {rule["id"]: rule for rule in lifecycle["rule"]}
    backups = rules["expire-checkpoint-backups"]
    assert backups["filter"] == [{"prefix": "checkpoint-backups/"}]
    assert backups["expiration"] == [{"days": env.config.checkpoint_backup_days}]
