"""PodIdentity component: AWS credentials for the Ray pods, through EKS Pod Identity or, as a fallback,
IAM roles for service accounts (IRSA), chosen by the stack key podIdentityMode.

pod-identity: the EKS Pod Identity Agent add-on, an IAM role that only ``pods.eks.amazonaws.com`` may
assume, and the association that hands the role to the Ray pods' service account
(https://docs.aws.amazon.com/eks/latest/userguide/pod-identities.html).
irsa: a role that the cluster's OIDC provider (pulumi-eks creates it: infra/cluster.py,
``create_oidc_provider``) may assume with ``sts:AssumeRoleWithWebIdentity`` for that one service account
only, and no association; the ServiceAccount carries the ``eks.amazonaws.com/role-arn`` annotation
(https://docs.aws.amazon.com/eks/latest/userguide/iam-roles-for-service-accounts.html). It serves pods whose
AWS SDK predates Pod Identity (pyarrow's bundled SDK for C++ before 1.11.263:
https://docs.aws.amazon.com/eks/latest/userguide/pod-id-minimum-sdk.html).
Both modes attach the same policy document, which reaches nothing but the stack's prefix of the run bucket.
The ServiceAccount object itself lives beside the RayCluster (infra/raycluster.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.config import IRSA

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
    tags = {
        "aws:RequestTag/eks-cluster-name": cluster_name,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }
    principal = {"Service": POD_IDENTITY_PRINCIPAL}
    return _trust_document("AllowEksPodIdentity", principal, ["sts:AssumeRole", "sts:TagSession"], tags)


def _trust_document(sid: str, principal: dict[str, str], action: str | list[str], equals: dict[str, str]) -> dict:
    """A trust policy of one Allow statement whose StringEquals condition is ``equals``."""
    statement = {"Sid": sid, "Effect": "Allow", "Principal": principal, "Action": action}
    return {"Version": "2012-10-17", "Statement": [{**statement, "Condition": {"StringEquals": equals}}]}


# The audience EKS's pod identity webhook puts in the projected token (IRSA), and the annotation that names
# the role on a ServiceAccount (https://docs.aws.amazon.com/eks/latest/userguide/associate-service-account-role.html).
IRSA_AUDIENCE = "sts.amazonaws.com"
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def irsa_trust_policy(oidc_provider_arn: str, issuer: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Who may assume the role under IRSA: the cluster's OIDC provider, only for the Ray service account's token.

    ``issuer`` is the OIDC issuer without ``https://``; the ``:sub`` condition pins the one ServiceAccount and
    ``:aud`` the audience STS expects, as the EKS guide's trust policy does
    (https://docs.aws.amazon.com/eks/latest/userguide/associate-service-account-role.html).
    """
    equals = {f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}", f"{issuer}:aud": IRSA_AUDIENCE}
    principal = {"Federated": oidc_provider_arn}
    return _trust_document("AllowRayServiceAccountThroughOidc", principal, "sts:AssumeRoleWithWebIdentity", equals)


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
    mode: str  # POD_IDENTITY or IRSA (podIdentityMode)
    oidc_provider_arn: pulumi.Input[str] | None = None  # IRSA: the cluster's OIDC provider
    oidc_issuer: pulumi.Input[str] | None = None  # IRSA: its issuer, without https://


class PodIdentity(pulumi.ComponentResource):
    """Public outputs: ``role_arn``, ``role_name``, ``association_id`` ('' under IRSA). ``ready`` holds the
    resources the pods must wait for (the add-on and the association; under IRSA the role's policy), and
    ``service_account_annotations`` what the Ray ServiceAccount must carry ({} under Pod Identity)."""

    def __init__(self, name: str, args: PodIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:PodIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=self._trust(args),
            description="Ray pods: read and write the stack's prefix of the run bucket",
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-storage",
            role=role.id,
            policy=pulumi.Output.from_input(args.bucket_arn).apply(
                lambda arn: json.dumps(storage_access_policy(arn, args.prefix))
            ),
            opts=child,
        )
        if args.mode == IRSA:
            self.ready: tuple[pulumi.Resource, ...] = (policy,)
            self.service_account_annotations: dict[str, pulumi.Input[str]] = {IRSA_ROLE_ANNOTATION: role.arn}
            association_id: pulumi.Input[str] = ""
        else:
            addon = aws.eks.Addon(
                f"{name}-agent", cluster_name=args.cluster_name, addon_name=POD_IDENTITY_ADDON, opts=child
            )
            association = aws.eks.PodIdentityAssociation(
                f"{name}-association",
                cluster_name=args.cluster_name,
                namespace=args.namespace,
                service_account=args.service_account,
                role_arn=role.arn,
                opts=child,
            )
            # A pod gets Pod Identity credentials only if its association exists when the pod is created.
            self.ready = (addon, association, policy)
            self.service_account_annotations = {}
            association_id = association.association_id
        self.role_arn: pulumi.Output[str] = role.arn
        self.role_name: pulumi.Output[str] = role.name
        self.association_id: pulumi.Output[str] = pulumi.Output.from_input(association_id)
        self.register_outputs(
            {"role_arn": self.role_arn, "role_name": self.role_name, "association_id": self.association_id}
        )

    @staticmethod
    def _trust(args: PodIdentityArgs) -> pulumi.Output[str]:
        """The role's trust policy document for ``args.mode``."""
        if args.mode == IRSA:
            return pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                lambda v: json.dumps(irsa_trust_policy(v[0], v[1], args.namespace, args.service_account))
            )
        return pulumi.Output.from_input(args.cluster_name).apply(
            lambda c: json.dumps(trust_policy(c, args.namespace, args.service_account))
        )
