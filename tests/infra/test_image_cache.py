"""The image cache's pure parts: the repository prefix ECR accepts, the image reference through the cache, and the
config rule that the cache serves only ECR Public.

ECR's rules for a pull-through cache rule's ecrRepositoryPrefix (ECR API reference, CreatePullThroughCacheRule): 2 to
30 characters matching ``(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*``; a pull through the rule is
``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<upstream repository>:<tag>`` (ECR user guide,
pull-through-cache-working-pulling.html).
"""

from __future__ import annotations

import re
import warnings

import pytest

from infra import manifests as m
from infra.config import ConfigWarning, StackConfigError, validate

ECR_PREFIX = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")


@pytest.mark.parametrize(
    ("cluster", "stack"), [("ray-efa-eks", "us-west-2"), ("Ray_EFA", "dev"), ("a-very-long-cluster-name", "eu-north-1")]
)
def test_cache_prefix_is_one_ecr_accepts(cluster, stack):
    prefix = m.image_cache_prefix(cluster, stack)
    assert 2 <= len(prefix) <= 30 and ECR_PREFIX.fullmatch(prefix), f"ECR would refuse prefix {prefix!r}"


@pytest.mark.parametrize("cluster", ["ray-efa-eks", "a-cluster-name-of-thirty-chars"])
def test_two_stacks_of_one_cluster_get_two_prefixes(cluster):
    # A prefix is unique in the account's registry of a region: two stacks there must not collide, even when cut.
    got = {m.image_cache_prefix(cluster, s) for s in ("us-west-2", "us-west-2-dev")}
    assert len(got) == 2, got


def test_cached_image_keeps_the_upstream_path_and_tag():
    got = m.cached_image(
        "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0",
        m.registry_host("123456789012", "us-west-2"),
        "ray-efa-eks-us-west-2",
    )
    host = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    want = f"{host}/ray-efa-eks-us-west-2/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
    assert got == want, got


def test_an_image_from_another_registry_cannot_be_cached():
    with pytest.raises(ValueError, match="not on public.ecr.aws"):
        m.cached_image("nvcr.io/nvidia/pytorch:25.01-py3", "h", "p")


def test_image_cache_with_an_image_off_ecr_public_is_refused_naming_both_keys():
    with warnings.catch_warnings(), pytest.raises(StackConfigError, match="imageCache is true but rayImage"):
        warnings.simplefilter("ignore", ConfigWarning)
        validate({"rayImage": "nvcr.io/nvidia/pytorch:25.01-py3"}, stack="test", region="us-west-2")


def test_image_off_ecr_public_is_accepted_without_the_cache():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = validate(
            {"rayImage": "nvcr.io/nvidia/pytorch:25.01-py3", "imageCache": False}, stack="test", region="us-west-2"
        )
    assert cfg.ray.image_cache is False, cfg.ray
