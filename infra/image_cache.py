"""ImageCache component: an ECR pull-through cache rule for ECR Public, and the node role's right to fill it.

With it, the nodes pull the Ray image from the stack's own private registry: the first pull imports it from
public.ecr.aws into a repository under the stack's prefix, every later one (each cold start of a GPU node) is served by
ECR, whose image layers come from Amazon S3 and so over the stack's S3 gateway endpoint instead of the NAT gateway
(https://docs.aws.amazon.com/AmazonECR/latest/userguide/vpc-endpoints.html). docs/cost-and-capacity.md has the cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.config import ECR_PUBLIC
from infra.manifests import cached_image, image_cache_node_policy, registry_host


@dataclass(frozen=True)
class ImageCacheArgs:
    prefix: str  # the rule's ecrRepositoryPrefix (infra.manifests.image_cache_prefix)
    image: str  # the image on public.ecr.aws the Ray pods run
    region: str
    node_role_name: pulumi.Input[str]  # the role of the nodes that pull (system and GPU share it)


class ImageCache(pulumi.ComponentResource):
    """Public outputs: ``image`` (the Ray image's reference through the cache) and ``repository_prefix``; ``ready``
    holds the node role's policy, which the pods' first pull needs (no data dependency says so)."""

    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:ImageCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        rule = aws.ecr.PullThroughCacheRule(
            f"{name}-rule", ecr_repository_prefix=args.prefix, upstream_registry_url=ECR_PUBLIC, opts=child
        )
        policy = aws.iam.RolePolicy(
            f"{name}-node-pull",
            role=args.node_role_name,
            policy=rule.registry_id.apply(
                lambda account: json.dumps(image_cache_node_policy(args.region, account, args.prefix))
            ),
            opts=child,
        )
        self.image: pulumi.Output[str] = rule.registry_id.apply(
            lambda account: cached_image(args.image, registry_host(account, args.region), args.prefix)
        )
        self.repository_prefix: pulumi.Output[str] = rule.ecr_repository_prefix
        self.ready: tuple[pulumi.Resource, ...] = (policy,)
        self.register_outputs({"image": self.image, "repository_prefix": self.repository_prefix})
