"""Scale-to-zero between runs: the GPU node group's desired size, set by the driver (`run`, `scale`).

The Pulumi program leaves ``scalingConfig.desiredSize`` to the driver (infra/manifests.py,
``DRIVER_OWNED_PROPERTIES``), with ``minSize`` 0, so `up` neither fights a scaled-down group nor scales it
back. `run` scales the group to ``gpuNodeCount`` before `verify` and waits for the nodes; when it ends
(pass, fail or Ctrl-C) it scales to ``gpuIdleNodes`` (default 0) unless ``--keep-nodes``.

EKS's ``UpdateNodegroupConfig`` takes ``scalingConfig.desiredSize`` within ``minSize..maxSize``
(https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupConfig.html); a group that is
still CREATING or UPDATING answers ``ResourceInUseException``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from automation.errors import DriverError
from infra.config import GpuNodesConfig
from infra.names import GPU_NODE_SELECTOR, IDLE_GUARD_RECORD

NODE_WAIT_S = 1200.0  # a GPU node from a scaled-up group takes minutes to join; 20 min before giving up
POLL_S = 10.0


@dataclass(frozen=True)
class NodeGroupRef:
    cluster: str
    nodegroup: str
    region: str = ""


@dataclass(frozen=True)
class Scaled:
    """What a scale did: the desired size before and after, and seconds the nodes took (None: not waited)."""

    nodegroup: str
    before: int
    after: int
    seconds: float | None = None
    per_node: tuple[tuple[str, float], ...] = ()  # (node, seconds from the scale-up to its Ready)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def text(self) -> str:
        if not self.changed:
            return f"GPU node group {self.nodegroup} already at {self.after} node(s)"
        took = f", the nodes were Ready after {self.seconds:.0f} s" if self.seconds is not None else ""
        if self.per_node:
            took += " (" + ", ".join(f"{name} {s:.0f} s" for name, s in self.per_node) + ")"
        return f"GPU node group {self.nodegroup} scaled from {self.before} to {self.after} node(s){took}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodegroup": self.nodegroup,
            "before": self.before,
            "after": self.after,
            "seconds": self.seconds,
            "per_node": dict(self.per_node),
        }


def nodegroup_ref(outputs: dict, stack: str) -> NodeGroupRef:
    """The GPU node group named by the stack outputs; DriverError (exit 2) when the stack has none."""
    cluster, nodegroup = outputs.get("cluster_name"), outputs.get("nodegroup_name")
    if not cluster or not nodegroup:
        raise DriverError(
            f"stack {stack} exports no cluster_name/nodegroup_name: nothing is up; run "
            f"`python -m automation up --stack {stack}`",
            exit_code=2,
        )
    return NodeGroupRef(str(cluster), str(nodegroup), str(outputs.get("region") or ""))


def sizes(eks: Any, ref: NodeGroupRef) -> dict[str, int]:
    """The node group's scalingConfig now: desiredSize, minSize, maxSize."""
    group = eks.describe_nodegroup(clusterName=ref.cluster, nodegroupName=ref.nodegroup)["nodegroup"]
    return dict(group["scalingConfig"])


def set_desired(eks: Any, ref: NodeGroupRef, desired: int) -> Scaled:
    """Set the desired size to ``desired`` (no call when it already is); DriverError naming the fix on refusal."""
    try:
        now = sizes(eks, ref)
        if not now["minSize"] <= desired <= now["maxSize"]:
            raise DriverError(
                f"--gpu-nodes {desired} is outside node group {ref.nodegroup}'s {now['minSize']}..{now['maxSize']}: "
                f"pass a count within it (the maximum is {GpuNodesConfig.keyname('node_count')}; "
                "`up` applies a new one)",
                exit_code=2,
            )
        if now["desiredSize"] != desired:
            eks.update_nodegroup_config(
                clusterName=ref.cluster, nodegroupName=ref.nodegroup, scalingConfig={"desiredSize": desired}
            )
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        raise DriverError(f"EKS refused to scale node group {ref.nodegroup} to {desired}: {code}: {e}") from None
    except BotoCoreError as e:
        raise DriverError(f"EKS could not be reached to scale node group {ref.nodegroup}: {e}") from None
    return Scaled(ref.nodegroup, now["desiredSize"], desired)


def ready_count(nodes: list[dict]) -> int:
    """How many of ``nodes`` (Kubernetes Node objects) report Ready=True."""
    return sum(
        any(c.get("type") == "Ready" and c.get("status") == "True" for c in n.get("status", {}).get("conditions", []))
        for n in nodes
    )


def wait_ready(
    list_nodes: Callable[[], list[dict]],
    want: int,
    timeout_s: float = NODE_WAIT_S,
    on_progress: Callable[[str], None] = lambda s: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Seconds until ``want`` GPU nodes are Ready; DriverError when ``timeout_s`` passes first."""
    start = clock()
    while True:
        ready = ready_count(list_nodes())
        waited = clock() - start
        if ready >= want:
            return waited
        if waited >= timeout_s:
            raise DriverError(
                f"{ready} of {want} GPU nodes Ready after {waited:.0f} s: the node group may lack capacity in its "
                "AZ; `python -m automation status --stack STACK` and `python -m automation capacity` say more"
            )
        on_progress(f"waiting for GPU nodes: {ready} of {want} Ready after {waited:.0f} s")
        sleep(POLL_S)


def ready_after(nodes: list[dict], started: datetime) -> tuple[tuple[str, float], ...]:
    """Each Ready node's seconds from ``started`` to its Ready condition's lastTransitionTime (nodes that were
    Ready before ``started`` are left out: they did not come up for this scale)."""
    out = []
    for n in nodes:
        for c in n.get("status", {}).get("conditions", []):
            if c.get("type") == "Ready" and c.get("status") == "True" and c.get("lastTransitionTime"):
                at = datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))
                if at >= started:
                    out.append((n["metadata"]["name"], round((at - started).total_seconds(), 1)))
    return tuple(sorted(out))


def scale_up_for_run(eks: Any, ref: NodeGroupRef, count: int, list_nodes, on_progress, **wait) -> Scaled:
    """Before `verify`: the group at ``count`` (gpuNodeCount) and its nodes Ready, with how long they took, all
    together and each node."""
    started = datetime.now(UTC)
    scaled = set_desired(eks, ref, count)
    if not scaled.changed and ready_count(list_nodes()) >= count:
        return scaled
    on_progress(f"scaling GPU node group {ref.nodegroup} from {scaled.before} to {count} node(s)")
    seconds = wait_ready(list_nodes, count, on_progress=on_progress, **wait)
    return Scaled(ref.nodegroup, scaled.before, count, round(seconds, 1), ready_after(list_nodes(), started))


def before_verify(target: Any) -> Scaled | None:
    """`run` on AWS, before `verify`: the GPU nodes back at gpuNodeCount; None when the stack's outputs are not
    read (--kubeconfig), since the node group's name comes from them."""
    outputs = target.outputs()
    if not outputs:
        return None
    ref = nodegroup_ref(outputs, target.cfg.stack)
    kube = target.kube()
    scaled = scale_up_for_run(
        target.deps.client("eks"),
        ref,
        target.cfg.gpu_nodes.node_count,
        lambda: kube.list_nodes(GPU_NODE_SELECTOR),
        target.on_progress,
    )
    return scaled


def after_run(target: Any, keep_nodes: bool) -> str:
    """When `run` on AWS ends (pass, fail or Ctrl-C): the GPU nodes at gpuIdleNodes unless ``keep_nodes``; the
    line that says what happened and what runs now."""
    stack, idle = target.cfg.stack, target.cfg.gpu_nodes.idle_nodes
    if keep_nodes:
        return (
            f"GPU nodes kept (--keep-nodes): they cost money until `python -m automation scale --stack {stack} "
            f"--gpu-nodes {idle}` (or the idle guard, after "
            f"{GpuNodesConfig.keyname('idle_minutes')} {target.cfg.gpu_nodes.idle_minutes})"
        )
    by_hand = f"`python -m automation scale --stack {stack} --gpu-nodes {idle}`"
    try:
        outputs = target.outputs()
        if not outputs:
            return f"GPU nodes not scaled: no stack outputs were read (--kubeconfig); they cost money until {by_hand}"
        scaled = set_desired(target.deps.client("eks"), nodegroup_ref(outputs, stack), idle)
    except DriverError as e:
        return f"GPU nodes NOT scaled down ({e}); any that run cost money until {by_hand}"
    except Exception as e:  # noqa: BLE001 - the clean-up of any exit must not hide the run's own failure
        return f"GPU nodes NOT scaled down ({type(e).__name__}: {e}); any that run cost money until {by_hand}"
    keep = f"pass --keep-nodes to keep them, `python -m automation scale --stack {stack} --gpu-nodes N` by hand"
    return f"{scaled.text()} ({GpuNodesConfig.keyname('idle_nodes')} {idle}); {running_line(target, idle)}; {keep}"


def running_line(target: Any, gpu_nodes: int) -> str:
    est = target.price(gpu_nodes)
    cfg = target.cfg
    what = (
        f"{gpu_nodes} x {cfg.gpu_nodes.instance_type} and {cfg.system_nodes.count} x {cfg.system_nodes.instance_type}"
    )
    return f"running now: {what}, {est.text()} On-Demand (plus the EKS control plane and the NAT gateway)"


def now_running(target: Any) -> dict[str, Any]:
    """What runs now and its On-Demand cost per hour (`status`): the GPU node group's desired size from EKS."""
    outputs = target.outputs()
    if not outputs.get("nodegroup_name"):
        return {"gpu_nodes": None, "note": "the GPU node group's name comes from the stack outputs (not read)"}
    try:
        gpu = sizes(target.deps.client("eks"), nodegroup_ref(outputs, target.cfg.stack))["desiredSize"]
    except (ClientError, BotoCoreError, DriverError) as e:
        return {"gpu_nodes": None, "note": f"EKS: {e}"}
    est = target.price(gpu)
    return {"gpu_nodes": gpu, "text": running_line(target, gpu), "cost": est.to_dict()}


def guard_record(kube: Any, namespace: str) -> dict[str, Any] | str:
    """The idle guard's last decision (its record ConfigMap), or why there is none."""
    try:
        data = kube.get_configmap(namespace, IDLE_GUARD_RECORD).get("data") or {}
    except DriverError as e:
        return f"no record ({e}): {GpuNodesConfig.keyname('idle_minutes')} 0 renders no guard"
    try:
        return json.loads(data.get("last", "{}"))
    except ValueError:
        return f"the record {namespace}/{IDLE_GUARD_RECORD} is not JSON: {data.get('last')!r}"
