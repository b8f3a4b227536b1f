"""The image cache under Pulumi's mock engine: with imageCache (the default) the stack declares an ECR pull-through
cache rule for ECR Public, lets the node role fill it, and the RayCluster's containers pull the Ray image through it;
with imageCache false none of that exists and the pods pull from public.ecr.aws as before. The mock's registryId is
the account id the provider reads back (infra/mock_render.py)."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from infra.config import PROJECT, stack_config_values
from infra.mock_render import Render, run_program

# Program renders under Pulumi's mock engine take tens of seconds on 2 cores: the slow tier runs them.
pytestmark = pytest.mark.slow

RULE = "aws:ecr/pullThroughCacheRule:PullThroughCacheRule"
ACCOUNT = "123456789012"


def render(**overrides) -> Render:
    values = stack_config_values("us-east-2", REPO)
    values.update({f"{PROJECT}:{k}": str(v).lower() for k, v in overrides.items()})
    return run_program("us-east-2", REPO, config=values)


@pytest.fixture(scope="module")
def cached() -> Render:
    return render()


@pytest.fixture(scope="module")
def direct() -> Render:
    return render(imageCache=False)


def ray_images(r: Render) -> list[str]:
    rc = next(x for x in r.records if x.type == "kubernetes:ray.io/v1:RayCluster")
    spec = rc.inputs["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [c["image"] for g in groups for c in g["template"]["spec"]["containers"]]


def test_the_rule_caches_ecr_public_under_the_stacks_prefix(cached):
    rules = [x.inputs for x in cached.records if x.type == RULE]
    got = [(r["upstreamRegistryUrl"], r["ecrRepositoryPrefix"]) for r in rules]
    assert got == [("public.ecr.aws", "ray-efa-eks-us-east-2")], got


def test_every_ray_container_pulls_through_the_cache(cached):
    want = f"{ACCOUNT}.dkr.ecr.us-east-2.amazonaws.com/ray-efa-eks-us-east-2/deep-learning-containers/ray:"
    wrong = [i for i in ray_images(cached) if not i.startswith(want)]
    assert not wrong, f"expected every Ray image under {want}, got {wrong}"


def test_the_node_role_may_create_and_import_only_under_the_prefix(cached):
    policies = [json.loads(x.inputs["policy"]) for x in cached.records if x.name.endswith("-image-cache-node-pull")]
    statement = policies[0]["Statement"][0] if policies else {}
    got = (sorted(statement.get("Action", [])), statement.get("Resource"))
    want = (
        ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
        f"arn:aws:ecr:us-east-2:{ACCOUNT}:repository/ray-efa-eks-us-east-2/*",
    )
    assert got == want, got


def test_the_ray_cluster_waits_for_the_node_roles_pull_policy(cached):
    rc = next(x for x in cached.records if x.type == "kubernetes:ray.io/v1:RayCluster")
    policy = next(x for x in cached.records if x.name.endswith("-image-cache-node-pull"))
    assert policy.name in rc.depends_on, rc.depends_on


def test_without_the_cache_no_rule_and_the_public_image(direct):
    got = ([x.name for x in direct.records if x.type == RULE], {i.split("/")[0] for i in ray_images(direct)})
    assert got == ([], {"public.ecr.aws"}), got


def guard_images(r: Render) -> list[str]:
    guards = [x for x in r.records if x.type == "kubernetes:batch/v1:CronJob"]
    pods = [g.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"] for g in guards]
    return [c["image"] for p in pods for c in p["containers"]]


def test_the_idle_guard_pulls_the_ray_image_through_the_cache(cached):
    got, want = guard_images(cached), sorted(set(ray_images(cached)))
    assert got == want and len(want) == 1, f"expected the guard on the Ray pods' cached image {want}, got {got}"
