"""`up --auto-az`: when EC2 has no capacity for the GPU node group in its AZ, move it to the next ranked AZ of the
stack's network and run `up` again, a bounded number of times, saying each move.

The AWS sample's `deploy_all.sh` deletes and recreates in the next AZ (aws-samples/sample-aws-deep-learning-containers,
training/ray-train). Here the move is one stack key, gpuAvailabilityZone (`AwsTarget.set_gpu_az`): the program puts
the node group and a new placement group in that AZ's existing private subnet; the NAT gateway stays (infra/network.py
says why). The failed AZ's GPU node group is emptied first. Only AZs of networkAzs have a private subnet, and the
control plane's subnets cannot change in place. Without --auto-az the move is asked on a terminal, else left to the
user (UpWatch's line names the AZ).
"""

from __future__ import annotations

from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from automation.capacity_finder import NO_CAPACITY, next_az, stack_zones
from automation.errors import DriverError
from automation.pipeline import StepResult
from automation.scaling import BROKEN, BUSY_WAIT_S, EksWait, NodeGroupRef, describe, set_desired
from automation.targets.aws import GPU_AZ_KEY, AwsTarget
from infra.names import GPU_ROLE, ROLE_LABEL

MAX_MOVES = 2  # at most this many other AZs are tried after the first: a region rarely has more in the network
# What says "no capacity": EC2's error code in the node group's health issue, or the Auto Scaling group's activity
# message (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/troubleshooting-launch.html#troubleshooting-launch-capacity).
SHORT_WORDS = (NO_CAPACITY, "do not have sufficient")


def capacity_short(error: str) -> bool:
    """Whether a failed `up`'s error (the node group's cause appended) says EC2 had no capacity."""
    return any(w in error for w in SHORT_WORDS)


def retire_gpu_groups(target: AwsTarget) -> None:
    """Before a move: each GPU node group (label role=gpu-worker) at 0 nodes, or deleted where EKS takes no size
    change, each wait bounded and shown, so the group without capacity starts no node while the next `up` replaces
    it, nor stays billing if that `up` fails too (Pulumi's replacement deletes an empty group). DriverError, and
    nothing moves, when EKS cannot be asked."""
    eks, cluster, clock = target.deps.client("eks"), target.cfg.cluster.name, target.deps.clock
    try:
        for name in eks.list_nodegroups(clusterName=cluster).get("nodegroups", []):
            ref = NodeGroupRef(cluster, name)
            group = describe(eks, ref)
            if group.get("labels", {}).get(ROLE_LABEL) != GPU_ROLE:
                continue
            if group.get("status") not in BROKEN:
                target.note(set_desired(eks, ref, 0, target.on_progress, clock).text())
                continue
            if group["status"] != "DELETING":
                eks.delete_nodegroup(clusterName=cluster, nodegroupName=name)
            EksWait(eks, ref, clock, target.on_progress, clock.now(), BUSY_WAIT_S).gone()
            target.note(f"deleted GPU node group {name}: it was {group['status']}, and EKS scales no such group")
    except (ClientError, BotoCoreError, DriverError) as e:
        raise DriverError(
            f"nothing moved: the GPU node groups of cluster {cluster} could not be emptied first: {e}"
        ) from None


def up_with_fallback(target: AwsTarget, attempt: Callable[[], StepResult]) -> StepResult:
    """``attempt()`` (one `up`), and after each failure for want of capacity, the next AZ and ``attempt()`` again, at
    most MAX_MOVES times; any other failure, a refused move or no AZ left raises the failure as it came."""
    tried = [target.cfg.gpu_nodes.availability_zone]
    while True:
        try:
            return attempt()
        except DriverError as e:
            if not capacity_short(str(e)) or len(tried) > MAX_MOVES:
                raise
            here = tried[-1]
            question = (
                f"EC2 has no capacity for the GPU nodes in {here}: move them to the next ranked AZ of the stack's "
                "network and run `up` again?"
            )
            try:  # --auto-az moves without asking; else the terminal is asked, and without one nothing moves
                moving = target.run.auto_az or target.deps.confirm(question)
            except DriverError:
                moving = False
            if not moving:
                raise
            there = next_az(stack_zones(target), tried, within=target.cfg.network.azs)
            if there is None:
                target.note(f"no other AZ of the stack's network {list(target.cfg.network.azs)} offers capacity")
                raise
            target.note(
                f"moving the GPU node group from {here} to {there} (no capacity in {here}): {GPU_AZ_KEY}={there}"
            )
            retire_gpu_groups(target)
            target.set_gpu_az(there)
            tried.append(there)
