"""IAM and resource policy documents as plain dicts, serialised with ``policy_json``.

Plain dicts keep the documents readable here and checkable in tests with
``json.loads``; values may be cdktf tokens (ARNs of resources), which cdktf
resolves inside the serialised string.
"""

import json
from collections.abc import Sequence
from typing import Any

PolicyDocument = dict[str, Any]
Statement = dict[str, Any]


def policy_json(statements: Sequence[Statement]) -> str:
    """A policy document holding ``statements``."""
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def allow(
    sid: str,
    actions: Sequence[str],
    resources: Sequence[str],
    condition: dict[str, dict[str, Any]] | None = None,
) -> Statement:
    """An Allow statement for identity policies."""
    statement: Statement = {
        "Sid": sid,
        "Effect": "Allow",
        "Action": sorted(actions),
        "Resource": list(resources),
    }
    if condition is not None:
        statement["Condition"] = condition
    return statement


def assume_role_policy(service: str, *, source_account: str | None = None) -> str:
    """Trust policy that lets ``service`` (e.g. ``ec2.amazonaws.com``) assume a role."""
    statement: Statement = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if source_account is not None:
        # Confused-deputy guard: only on behalf of this account.
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": source_account}}
    return policy_json([statement])


def trust_role_policy(role_arn: str) -> str:
    """Trust policy that lets one role (and nothing else) assume a role."""
    return policy_json(
        [{"Effect": "Allow", "Principal": {"AWS": role_arn}, "Action": "sts:AssumeRole"}]
    )


def tls_only_bucket_policy(bucket_arn: str) -> str:
    """Bucket policy that refuses every request not made over TLS."""
    return policy_json(
        [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    )
