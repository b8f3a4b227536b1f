"""preview, up, destroy (the AWS target's stack) and start (the local target's Ray head): the steps that
make or unmake the place the job runs. The Pulumi calls are automation/pulumi_stack.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from pulumi.automation import ConfigValue

from automation.aws_clients import Ecr
from automation.az_fallback import up_with_fallback
from automation.capacity_finder import up_watch
from automation.errors import DriverError
from automation.pipeline import Prior, StepResult
from automation.pulumi_stack import StackLike, run_op, up
from automation.scaling import live_desired_size
from automation.storage import kept_bucket_line
from automation.targets.aws import API_CIDRS_KEY, GPU_AZ_KEY, AwsTarget
from automation.targets.local import LocalTarget
from infra.config import GpuNodesConfig
from infra.manifests import image_cache_prefix

LIVE_SIZE_KEY = GpuNodesConfig.keyname("live_desired_size", prefixed=True)


def settle_gpu_az(target: AwsTarget, prior: Prior) -> None:
    """Before preview/up: a stack that leaves its GPU AZ empty gets the AZ a passing preflight chose.
    Without such a preflight result the program could not build: DriverError naming the commands that fix it."""
    cfg = target.cfg
    if cfg.gpu_nodes.availability_zone:
        return
    s = cfg.stack
    checked = prior.preflight
    az = checked.data.gpu_az if checked is not None and checked.ok and checked.data is not None else None
    if not az:
        raise DriverError(
            f"stack {s} leaves {GPU_AZ_KEY} empty and no preflight of this run chose one: run "
            f"`python -m automation run --stack {s}` (preflight chooses an AZ that offers "
            f"{cfg.gpu_nodes.instance_type} and sets it) or set '{GPU_AZ_KEY}: <az>' in Pulumi.{s}.yaml",
            exit_code=2,
        )
    target.set_gpu_az(az)
    target.note(f"set {GPU_AZ_KEY} = {az} in stack {s} (Pulumi.{s}.yaml), the AZ preflight chose")


def settle_api_cidrs(target: AwsTarget) -> None:
    """Before preview/up: an empty public API allow-list gets this machine's address (x.x.x.x/32), which also replaces
    the driver's entry from an earlier run at another address; said in one line. A user's own list is preflight's."""
    c, s = target.cfg.cluster, target.cfg.stack
    if c.needs_address:
        cidr = target.deployer_cidr()
        target.set_api_cidr(0, cidr)
        target.note(f"set {API_CIDRS_KEY} = [{cidr}] in stack {s} (Pulumi.{s}.yaml): this machine's address")
        return
    if not (c.endpoint_public_access and c.driver_cidr in c.public_access_cidrs):
        return
    cidr = target.deployer_cidr()
    if c.admits(cidr):
        return
    # In place: the AWS provider sends a changed public_access_cidrs with UpdateClusterConfig, no replacement
    # (hashicorp/terraform-provider-aws internal/service/eks/cluster.go, resourceClusterUpdate; pulumi-aws bridges it).
    target.set_api_cidr(c.public_access_cidrs.index(c.driver_cidr), cidr)
    target.note(
        f"replaced {c.driver_cidr}, the address an earlier run wrote, with {cidr}, this machine's, in {API_CIDRS_KEY} "
        f"of stack {s} (Pulumi.{s}.yaml): `up` updates the cluster's endpoint access in place"
    )


def settle_stack(target: AwsTarget, prior: Prior) -> None:
    """What the driver fills in a stack before the program reads it: the GPU AZ, the API endpoint's allow-list."""
    settle_gpu_az(target, prior)
    settle_api_cidrs(target)


def run_preview(target: AwsTarget, prior: Prior) -> StepResult:
    settle_stack(target, prior)
    return run_op(target.stack(), "preview", target.on_progress)


def run_up(target: AwsTarget, prior: Prior) -> StepResult:
    """`up`, after asking unless preview saw nothing that costs money; DriverError when declined. When
    it fails, the cause the node group's Auto Scaling group reports is added."""
    settle_stack(target, prior)
    summary = prior.preview.data if prior.preview is not None else None
    if summary is None or summary.costs_money:
        g = target.cfg.gpu_nodes
        changes = summary.line() if summary is not None else "changes not previewed"
        target.go_ahead(
            f"`up` on stack {target.cfg.stack} ({changes}) creates resources that cost money "
            f"({g.node_count} x {g.instance_type}). Go ahead?"
        )

    live = live_desired_size(target.deps.client("eks"), target.outputs(), target.cfg.stack)

    def attempt() -> StepResult:
        # a GPU node group stuck for want of capacity is said while `up` runs
        with up_watch(target), live_size_for_up(target.stack(), live):
            return up(target.stack(), target.on_progress, target.deps.client, target.cfg.cluster.name)

    result = up_with_fallback(target, attempt)  # --auto-az: the next AZ when EC2 has no capacity (az_fallback.py)
    if result.data is not None:
        target.stack_changed(result.data)
    return result


@contextmanager
def live_size_for_up(stack: StackLike, live: int | None) -> Iterator[None]:
    """For one `up`, the GPU node group's live desired size in the stack's config, so the program sends it rather than
    Pulumi's stale one (infra/efa_nodegroup.py ``driver_scaling``); removed after, so a later `pulumi up` by hand never
    sends a size read long ago. Nothing when there is no group yet."""
    if live is None:
        yield
        return
    stack.set_config(LIVE_SIZE_KEY, ConfigValue(value=str(live)))
    try:
        yield
    finally:
        stack.remove_config(LIVE_SIZE_KEY)


def run_destroy(target: AwsTarget, prior: Prior) -> StepResult:
    if not target.confirm(f"destroy every resource of stack {target.stack_name}?"):
        raise DriverError("not confirmed: nothing was deleted")
    # Read before: a destroyed stack has no outputs left.
    kept = kept_bucket_line(target.outputs(), target.cfg.storage.force_destroy)
    ecr, prefix = target.deps.client("ecr"), image_cache_prefix(target.cfg.cluster.name, target.cfg.stack)
    cached = cached_repositories(ecr, prefix)
    listing = ", ".join(f"{name} ({size / 1e9:.1f} GB)" for name, size in cached.items())
    # Asked before the long destroy, so the answer need not wait for it; deleted after it, once the cache rule that
    # would refill them is gone.
    delete = bool(cached) and target.confirm(f"also delete the image cache's ECR repositories {listing}?")
    done = run_op(target.stack(), "destroy", target.on_progress)
    for name in cached if delete else ():
        ecr.delete_repository(repositoryName=name, force=True)
    said = [done.summary, kept]
    if cached:
        said.append(
            f"deleted ECR repositories {listing}"
            if delete
            else f"kept the image cache's ECR repositories {listing}, billed for storage until deleted; delete each "
            f"with: aws ecr delete-repository --region {target.cfg.region} --force --repository-name NAME"
        )
    return dataclasses.replace(done, summary="; ".join(filter(None, said)))


def cached_repositories(ecr: Ecr, prefix: str) -> dict[str, int]:
    """The repositories the stack's pull-through cache made (``<prefix>/...``; infra/image_cache.py), which Pulumi does
    not own, each with the bytes ECR bills for: the sum of its images' imageSizeInBytes. DescribeRepositories has no
    name filter, so every repository is read and the prefix kept (botocore data/ecr/2015-09-21/service-2.json)."""
    pages = ecr.get_paginator("describe_repositories").paginate()
    names = [r["repositoryName"] for page in pages for r in page["repositories"]]

    def size(name: str) -> int:
        pages = ecr.get_paginator("describe_images").paginate(repositoryName=name)
        return sum(image.get("imageSizeInBytes", 0) for page in pages for image in page["imageDetails"])

    return {name: size(name) for name in names if name.startswith(f"{prefix}/")}


def run_start(target: LocalTarget, prior: Prior) -> StepResult:
    """The local target's `up`: a Ray head on 127.0.0.1 for this run only."""
    head = target.start()
    where = {"job_server": head.dashboard_url, "temp_dir": head.temp_dir}
    said = f"Ray head on 127.0.0.1, job server {head.dashboard_url}, temp dir {head.temp_dir}"
    return StepResult("start", "pass", said, data=where)
