"""The IAM actions the identity that runs `up` and `destroy` needs, per Pulumi resource type the program declares,
and the page section docs/aws-first-run.md shows (``python -m infra.deploy_permissions --write`` regenerates it;
tests/infra/test_deploy_permissions.py fails when a type of the mock render has no entry,
tests/test_generated_pages.py when the page differs).

Each entry lists the create, read, update, delete and tag calls of that resource's API, by the action names of the
Service Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/reference/
reference_policies_actions-resources-contextkeys.html: Amazon EC2, Amazon EKS, IAM, AWS KMS, Amazon S3, CloudWatch
Logs). They are what the AWS APIs behind each resource call, read from those references and the providers' resource
pages; no real account has run `up` under exactly this list, so treat it as the least a policy must allow, and
widen it with what CloudTrail's AccessDenied names.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "aws-first-run.md"
BEGIN, END = "<!-- iam:begin (python -m infra.deploy_permissions --write) -->", "<!-- iam:end -->"

_EC2_TAGS = ("ec2:CreateTags", "ec2:DeleteTags")
_S3_BUCKET_READS = (  # the aws provider reads each of a bucket's settings back after every create and refresh
    "s3:GetBucketAcl",
    "s3:GetBucketCORS",
    "s3:GetBucketLocation",
    "s3:GetBucketLogging",
    "s3:GetBucketObjectLockConfiguration",
    "s3:GetBucketPolicy",
    "s3:GetBucketRequestPayment",
    "s3:GetBucketTagging",
    "s3:GetBucketVersioning",
    "s3:GetBucketWebsite",
    "s3:GetAccelerateConfiguration",
    "s3:GetEncryptionConfiguration",
    "s3:GetLifecycleConfiguration",
    "s3:GetReplicationConfiguration",
)

PERMISSIONS: dict[str, tuple[str, ...]] = {
    "aws:cloudwatch/logGroup:LogGroup": (
        "logs:CreateLogGroup",
        "logs:DeleteLogGroup",
        "logs:DescribeLogGroups",
        "logs:PutRetentionPolicy",
        "logs:DeleteRetentionPolicy",
        "logs:ListTagsForResource",
        "logs:TagResource",
        "logs:UntagResource",
    ),
    "aws:ec2/eip:Eip": ("ec2:AllocateAddress", "ec2:ReleaseAddress", "ec2:DescribeAddresses", *_EC2_TAGS),
    "aws:ec2/internetGateway:InternetGateway": (
        "ec2:CreateInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DetachInternetGateway",
        "ec2:DeleteInternetGateway",
        "ec2:DescribeInternetGateways",
        *_EC2_TAGS,
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        *_EC2_TAGS,
    ),
    "aws:ec2/natGateway:NatGateway": (
        "ec2:CreateNatGateway",
        "ec2:DeleteNatGateway",
        "ec2:DescribeNatGateways",
        *_EC2_TAGS,
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        "ec2:CreatePlacementGroup",
        "ec2:DeletePlacementGroup",
        "ec2:DescribePlacementGroups",
        *_EC2_TAGS,
    ),
    "aws:ec2/route:Route": ("ec2:CreateRoute", "ec2:ReplaceRoute", "ec2:DeleteRoute", "ec2:DescribeRouteTables"),
    "aws:ec2/routeTable:RouteTable": (
        "ec2:CreateRouteTable",
        "ec2:DeleteRouteTable",
        "ec2:DescribeRouteTables",
        *_EC2_TAGS,
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        "ec2:AssociateRouteTable",
        "ec2:DisassociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ec2:CreateSecurityGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeNetworkInterfaces",  # a delete waits for the group's interfaces to go
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupEgress",  # the provider removes the default allow-all egress rule
        *_EC2_TAGS,
    ),
    "aws:ec2/subnet:Subnet": (
        "ec2:CreateSubnet",
        "ec2:DeleteSubnet",
        "ec2:DescribeSubnets",
        "ec2:ModifySubnetAttribute",
        *_EC2_TAGS,
    ),
    "aws:ec2/vpc:Vpc": (
        "ec2:CreateVpc",
        "ec2:DeleteVpc",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpcAttribute",
        "ec2:ModifyVpcAttribute",
        *_EC2_TAGS,
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        "ec2:DescribeVpcEndpoints",
        "ec2:ModifyVpcEndpoint",
        "ec2:DescribePrefixLists",
        *_EC2_TAGS,
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": (
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:DescribeSecurityGroupRules",
        *_EC2_TAGS,
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:DescribeSecurityGroupRules",
        *_EC2_TAGS,
    ),
    "aws:eks/accessEntry:AccessEntry": (
        "eks:CreateAccessEntry",
        "eks:DeleteAccessEntry",
        "eks:DescribeAccessEntry",
        "eks:UpdateAccessEntry",
    ),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": (
        "eks:AssociateAccessPolicy",
        "eks:DisassociateAccessPolicy",
        "eks:ListAssociatedAccessPolicies",
    ),
    "aws:eks/addon:Addon": (
        "eks:CreateAddon",
        "eks:DeleteAddon",
        "eks:DescribeAddon",
        "eks:UpdateAddon",
        "eks:DescribeAddonVersions",
        "eks:TagResource",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "eks:CreateNodegroup",
        "eks:DeleteNodegroup",
        "eks:DescribeNodegroup",
        "eks:UpdateNodegroupConfig",
        "eks:UpdateNodegroupVersion",
        "eks:TagResource",
        "iam:PassRole",  # the node role
        "iam:CreateServiceLinkedRole",  # AWSServiceRoleForAmazonEKSNodegroup, on the account's first node group
        "ec2:RunInstances",  # launching from a launch template is checked against the caller too
        "ec2:DescribeLaunchTemplateVersions",
    ),
    # imageCache: the rule itself; the first pull's CreateRepository/BatchImportUpstreamImage are the node role's
    # (ECR user guide, pull-through-cache-iam.html), not the deployer's. `destroy` lists the repositories the rule
    # made, with their images' sizes, and deletes them (automation/steps/stack_steps.py, run_destroy).
    "aws:ecr/pullThroughCacheRule:PullThroughCacheRule": (
        "ecr:CreatePullThroughCacheRule",
        "ecr:DescribePullThroughCacheRules",
        "ecr:UpdatePullThroughCacheRule",
        "ecr:DeletePullThroughCacheRule",
        "ecr:DescribeRepositories",
        "ecr:DescribeImages",
        "ecr:DeleteRepository",
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": (
        "eks:CreatePodIdentityAssociation",
        "eks:DeletePodIdentityAssociation",
        "eks:DescribePodIdentityAssociation",
        "eks:UpdatePodIdentityAssociation",
        "eks:TagResource",
        "iam:PassRole",
        "iam:GetRole",
    ),
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:DeleteRole",
        "iam:GetRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
    ),
    "aws:iam/rolePolicy:RolePolicy": ("iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        "iam:ListAttachedRolePolicies",
    ),
    "aws:kms/key:Key": (
        "kms:CreateKey",
        "kms:DescribeKey",
        "kms:GetKeyPolicy",
        "kms:PutKeyPolicy",
        "kms:GetKeyRotationStatus",
        "kms:EnableKeyRotation",
        "kms:ListResourceTags",
        "kms:TagResource",
        "kms:ScheduleKeyDeletion",
    ),
    "aws:s3/bucket:Bucket": (
        "s3:CreateBucket",
        "s3:DeleteBucket",
        "s3:ListBucket",
        "s3:PutBucketTagging",
        *_S3_BUCKET_READS,
    ),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": (
        "s3:PutLifecycleConfiguration",
        "s3:GetLifecycleConfiguration",
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": (
        "s3:PutBucketOwnershipControls",
        "s3:GetBucketOwnershipControls",
    ),
    "aws:s3/bucketPolicy:BucketPolicy": ("s3:PutBucketPolicy", "s3:GetBucketPolicy", "s3:DeleteBucketPolicy"),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        "s3:PutBucketPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:PutEncryptionConfiguration",
        "s3:GetEncryptionConfiguration",
    ),
    # pulumi-eks's Cluster component: its inner aws.eks.Cluster, the cluster role, the OIDC provider, the creator's
    # access entry, and the kubeconfig's `aws eks get-token`.
    "eks:index:Cluster": (
        "eks:CreateCluster",
        "eks:DeleteCluster",
        "eks:DescribeCluster",
        "eks:UpdateClusterConfig",
        "eks:UpdateClusterVersion",
        "eks:DescribeUpdate",
        "eks:TagResource",
        "eks:CreateAccessEntry",
        "eks:DescribeAccessEntry",
        "eks:AssociateAccessPolicy",
        "iam:CreateRole",
        "iam:GetRole",
        "iam:AttachRolePolicy",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
        "iam:CreateOpenIDConnectProvider",
        "iam:GetOpenIDConnectProvider",
        "iam:DeleteOpenIDConnectProvider",
        "iam:TagOpenIDConnectProvider",
        "kms:CreateGrant",  # EKS envelope-encrypts secrets with the stack's key
        "kms:DescribeKey",
        "ec2:DescribeSubnets",
        "ec2:DescribeVpcs",
        "ec2:DescribeSecurityGroups",
    ),
}
# Types that make no AWS call of their own: Kubernetes objects go through the cluster's API as its creator (the EKS
# access entry EKS gives the creating principal), the providers and this project's components are bookkeeping.
NO_AWS_CALL = ("kubernetes:", "pulumi:providers:", "ray-efa-eks:")


def uncovered(types: Iterable[str]) -> list[str]:
    """The types of a render that neither PERMISSIONS nor NO_AWS_CALL covers."""
    return sorted({t for t in types if t not in PERMISSIONS and not t.startswith(NO_AWS_CALL)})


def policy_document() -> dict:
    actions = sorted({a for acts in PERMISSIONS.values() for a in acts})
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}


def section() -> str:
    """The page's generated part: a table of type -> actions, then the policy with their union."""
    rows = [f"| `{t}` | {', '.join(f'`{a}`' for a in acts)} |" for t, acts in sorted(PERMISSIONS.items())]
    return "\n".join(
        [
            BEGIN,
            "| resource type (Pulumi) | IAM actions |",
            "| --- | --- |",
            *rows,
            "",
            "The union, as one policy to attach to the deploying identity:",
            "",
            "```json",
            json.dumps(policy_document(), indent=2),
            "```",
            END,
        ]
    )


def page_with_section(text: str) -> str:
    return re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda m: section(), text, flags=re.S)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m infra.deploy_permissions --write  (rewrites docs/aws-first-run.md's IAM section)")
    DOC.write_text(page_with_section(DOC.read_text()))
    print(f"{DOC}: IAM section rewritten")
