"""RunBucket component: the private S3 bucket that holds every run's checkpoints, under one prefix
per stack (``s3://<bucket>/<stack>/runs``), which Ray Train uses as its shared ``storage_path``; the idle
guard's records (infra/idle_guard.py) land beside them, under ``s3://<bucket>/<stack>/idle-guard``.

Ray Train needs storage that every node reaches for multi-node checkpoints
(https://docs.ray.io/en/latest/train/user-guides/persistent-storage.html). The settings are
explicit ``aws.s3.*`` resources so each one is visible to a preview and testable under mocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.config import StorageConfig
from infra.names import IDLE_GUARD_S3_FOLDER

# Aborting after a day frees the parts of a checkpoint upload a killed worker left behind; they are
# billed as storage until aborted (https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpu-abort-incomplete-mpu-lifecycle-config.html).
ABORT_INCOMPLETE_UPLOAD_DAYS = 1


def runs_prefix(storage: StorageConfig) -> str:
    """The key prefix of Ray Train's runs in the bucket (no leading or trailing slash)."""
    return f"{storage.object_prefix}/runs"


def idle_guard_prefix(storage: StorageConfig) -> str:
    """The key prefix of the idle guard's records in the bucket (no leading or trailing slash); the stack's
    retention (lifecycle_rules) expires them with its runs."""
    return f"{storage.object_prefix}/{IDLE_GUARD_S3_FOLDER}"


def storage_uri(bucket: str, storage: StorageConfig) -> str:
    """What the cluster job gets as ``--storage-path``."""
    return f"s3://{bucket}/{runs_prefix(storage)}"


def tls_only_policy(bucket_arn: str) -> dict[str, Any]:
    """Bucket policy that denies every request not sent over TLS
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html#transit)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }


def lifecycle_rules(storage: StorageConfig) -> list[dict[str, Any]]:
    """Lifecycle rules (aws.s3.BucketLifecycleConfiguration's ``rules``): abort
    incomplete multipart uploads everywhere; expire the stack's objects after the retention."""
    rules: list[dict[str, Any]] = [
        {
            "id": "abort-incomplete-multipart-uploads",
            "status": "Enabled",
            "filter": {},
            "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_INCOMPLETE_UPLOAD_DAYS},
        }
    ]
    if storage.retention_days:
        rules.append(
            {
                "id": "expire-runs",
                "status": "Enabled",
                "filter": {"prefix": f"{storage.object_prefix}/"},
                "expiration": {"days": storage.retention_days},
            }
        )
    return rules


@dataclass(frozen=True)
class RunBucketArgs:
    storage: StorageConfig


class RunBucket(pulumi.ComponentResource):
    """One private bucket. Public outputs: ``bucket`` (name), ``arn``, ``uri`` (the storage path)."""

    def __init__(self, name: str, args: RunBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:RunBucket", name, None, opts)
        s = args.storage
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=s.bucket_name or None,
            bucket_prefix=None if s.bucket_name else s.bucket_prefix,
            force_destroy=s.force_destroy,
            # Unless told to force, `destroy` leaves the bucket and its checkpoints in the account
            # and only forgets it (https://www.pulumi.com/docs/iac/concepts/options/retainondelete/).
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=not s.force_destroy),
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},  # ACLs off: the bucket owner owns every object
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse",
            bucket=bucket.id,
            rules=[
                {"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}, "bucket_key_enabled": True}
            ],
            opts=child,
        )
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket.id,
            policy=bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn))),
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(f"{name}-lifecycle", bucket=bucket.id, rules=lifecycle_rules(s), opts=child)
        self.bucket: pulumi.Output[str] = bucket.bucket
        self.arn: pulumi.Output[str] = bucket.arn
        self.uri: pulumi.Output[str] = bucket.bucket.apply(lambda b: storage_uri(b, s))
        self.register_outputs({"bucket": self.bucket, "arn": self.arn, "uri": self.uri})
