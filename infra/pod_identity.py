"""PodIdentity component: AWS credentials for the Ray pods through EKS Pod Identity.

The EKS Pod Identity Agent add-on, an IAM role that only ``pods.eks.amazonaws.com`` may assume,
a policy that reaches nothing but the stack's prefix of the run bucket, and the association that
hands the role to the Ray pods' service account
(https://docs.aws.amazon.com/eks/latest/userguide/pod-identities.html). The ServiceAccount object
itself lives beside the RayCluster (infra/raycluster.py), in the namespace that component creates;
the association only names it, so it can exist first and the pods get credentials from their start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

POD_IDENTITY_ADDON = "eks-pod-identity-agent"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"

# What Ray Train's storage (pyarrow's S3 filesystem) does with objects: read, write (multipart for
# large shards), delete old checkpoints (CheckpointConfig.num_to_keep), abort an upload a dead
# worker left. https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-actions.html
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")


def trust_policy(cluster_name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Who may assume the role: EKS Pod Identity, and only for this cluster's Ray service account.

    ``sts:TagSession`` is required because Pod Identity passes session tags, and those tags are what
    the condition checks (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html).
    """
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowEksPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-name": cluster_name,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    }
                },
            }
        ],
    }


def storage_access_policy(bucket_arn: str, prefix: str) -> dict[str, Any]:
    """Object actions on ``<bucket>/<prefix>/*`` and listing of that prefix only: no ``s3:*``, no
    ``Resource: *``. ListBucket's ``s3:prefix`` condition is how S3 scopes a listing to a folder
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html).

    Why ``StringLikeIfExists`` and not ``StringLike`` (issue 26 asked): pyarrow's ``create_dir``, which
    Ray Train calls on its storage path, first sends HeadBucket to see whether the bucket exists
    (apache/arrow cpp/src/arrow/filesystem/s3fs.cc, CreateDir; seen against moto: ``HEAD /<bucket>``
    before the directory markers). S3 authorises HeadBucket as ``s3:ListBucket``
    (https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html) and the request carries no
    ``s3:prefix``, exactly like a listing of the whole bucket, so no IAM condition can allow the one and
    deny the other: ``StringLike`` would deny HeadBucket and Ray Train could not start. What the
    ``IfExists`` form lets through is a listing of key names (not contents: object actions stay under
    the prefix) of a bucket that by default holds this stack's keys only; a listing that names another
    prefix is denied. The policy pack (``iam-s3-scoped-to-a-prefix``) holds both halves.
    """
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "RunObjects",
                "Effect": "Allow",
                "Action": list(OBJECT_ACTIONS),
                "Resource": [f"{bucket_arn}/{prefix}/*"],
            },
            {
                "Sid": "ListRunPrefix",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [bucket_arn],
                "Condition": {"StringLikeIfExists": {"s3:prefix": [prefix, f"{prefix}/*"]}},
            },
        ],
    }


@dataclass(frozen=True)
class PodIdentityArgs:
    cluster_name: pulumi.Input[str]
    namespace: str
    service_account: str
    bucket_arn: pulumi.Input[str]
    prefix: str  # object key prefix the pods may use, without slashes at either end


class PodIdentity(pulumi.ComponentResource):
    """Public outputs: ``role_arn``, ``role_name``, ``association_id``; ``addon`` and ``association``
    are the resources the pods must wait for."""

    def __init__(self, name: str, args: PodIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:PodIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.addon = aws.eks.Addon(
            f"{name}-agent", cluster_name=args.cluster_name, addon_name=POD_IDENTITY_ADDON, opts=child
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=pulumi.Output.from_input(args.cluster_name).apply(
                lambda c: json.dumps(trust_policy(c, args.namespace, args.service_account))
            ),
            description="Ray pods: read and write the stack's prefix of the run bucket",
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-storage",
            role=role.id,
            policy=pulumi.Output.from_input(args.bucket_arn).apply(
                lambda arn: json.dumps(storage_access_policy(arn, args.prefix))
            ),
            opts=child,
        )
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association",
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            service_account=args.service_account,
            role_arn=role.arn,
            opts=child,
        )
        self.role_arn: pulumi.Output[str] = role.arn
        self.role_name: pulumi.Output[str] = role.name
        self.association_id: pulumi.Output[str] = self.association.association_id
        self.register_outputs(
            {"role_arn": self.role_arn, "role_name": self.role_name, "association_id": self.association_id}
        )
