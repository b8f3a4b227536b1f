"""preview, up, destroy (the AWS target's stack) and start (the local target's Ray head): the steps that
make or unmake the place the job runs. The Pulumi calls are automation/pulumi_stack.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from pulumi.automation import ConfigValue

from automation.az_fallback import up_with_fallback
from automation.capacity import up_watch
from automation.errors import DriverError
from automation.pipeline import Prior, StepResult
from automation.pulumi_stack import StackLike, destroy, nodegroup_failure_cause, preview, up
from automation.scaling import live_desired_size
from automation.storage import kept_bucket_line
from automation.targets.aws import API_CIDRS_KEY, GPU_AZ_KEY, AwsTarget
from automation.targets.local import LocalTarget
from infra.config import GpuNodesConfig

LIVE_SIZE_KEY = GpuNodesConfig.keyname("live_desired_size", prefixed=True)


# ---- the steps ---------------------------------------------------------------------------------------
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
    """Before preview/up: a public API endpoint whose allow-list the stack leaves empty gets this machine's
    address (x.x.x.x/32), written into the stack and said in one line."""
    if not target.cfg.cluster.needs_address:
        return
    cidr, s = target.deployer_cidr(), target.cfg.stack
    target.set_api_cidrs(cidr)
    target.note(f"set {API_CIDRS_KEY} = [{cidr}] in stack {s} (Pulumi.{s}.yaml): this machine's address")


def settle_stack(target: AwsTarget, prior: Prior) -> None:
    """What the driver fills in a stack before the program reads it: the GPU AZ, the API endpoint's allow-list."""
    settle_gpu_az(target, prior)
    settle_api_cidrs(target)


def run_preview(target: AwsTarget, prior: Prior) -> StepResult:
    settle_stack(target, prior)
    return preview(target.stack(), target.on_progress)


def run_up(target: AwsTarget, prior: Prior) -> StepResult:
    """`up`, after asking unless preview saw nothing that costs money; DriverError when declined. When
    it fails, the cause the node group's Auto Scaling group reports is added."""
    settle_stack(target, prior)
    previewed = prior.preview
    summary = previewed.data if previewed is not None else None
    if summary is None or summary.costs_money:
        g = target.cfg.gpu_nodes
        changes = summary.line() if summary is not None else "changes not previewed"
        question = (
            f"`up` on stack {target.cfg.stack} ({changes}) creates resources that cost money "
            f"({g.node_count} x {g.instance_type}). Go ahead?"
        )
        target.go_ahead(question)

    def cause() -> str:
        c = target.deps.client
        return nodegroup_failure_cause(c("eks"), c("autoscaling"), target.cfg.cluster.name)

    live = live_desired_size(target.deps.client("eks"), target.outputs(), target.cfg.stack)

    def attempt() -> StepResult:
        # a GPU node group stuck for want of capacity is said while `up` runs
        with up_watch(target), live_size_for_up(target.stack(), live):
            return up(target.stack(), target.on_progress, explain_failure=cause)

    result = up_with_fallback(target, attempt)  # --auto-az: the next AZ when EC2 has no capacity (az_fallback.py)
    if result.data is not None:
        target.stack_changed(result.data)
    return result


@contextmanager
def live_size_for_up(stack: StackLike, live: int | None) -> Iterator[None]:
    """For the length of one `up`: the GPU node group's live desired size in the stack's config (the program
    then sends it, not the stale one in Pulumi's state: infra/efa_nodegroup.py ``driver_scaling``), removed
    after, so a later `pulumi up` by hand never sends a size read long ago. Nothing when there is no group yet."""
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
    done = destroy(target.stack(), target.on_progress)
    return dataclasses.replace(done, summary=f"{done.summary}; {kept}") if kept else done


def run_start(target: LocalTarget, prior: Prior) -> StepResult:
    """The local target's `up`: a Ray head on 127.0.0.1 for this run only."""
    head = target.start()
    where = {"job_server": head.dashboard_url, "temp_dir": head.temp_dir}
    return StepResult(
        "start", "pass", f"Ray head on 127.0.0.1, job server {head.dashboard_url}, temp dir {head.temp_dir}", data=where
    )
