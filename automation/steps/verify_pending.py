"""Why a Ray worker pod is not running yet, decided from the cluster's own objects as soon as it is certain.

- The scheduler's FailedScheduling event (``0/N nodes are available: <count> <reason>, ...`` then, since Kubernetes
  1.24, ``preemption: ...`` and later clauses): only the ``<count> <reason>`` items of the first clause are read,
  because the wording around them changes between versions (tests/fixtures/k8s/failed_scheduling.jsonl keeps real
  messages with their sources). A reason counts only when the GPU nodes confirm it (allocatable short of the request,
  an untolerated taint, labels the selector misses) and none could hold the pod: a node that has just joined reports
  ``Insufficient nvidia.com/gpu`` until its device plugin registers, so verify keeps waiting.
- An image is certainly unpullable once the kubelet backs off (ImagePullBackOff) or the name is invalid; the first
  ErrImagePull may be a passing registry error.
- KubeRay 1.5.2 injects the init container ``wait-gcs-ready`` into every worker (ray-project/kuberay
  ``ray-operator/controllers/ray/common/pod.go`` at v1.5.2): it has the Ray image, so a bad rayImage shows first as
  ``Init:ImagePullBackOff``; it prints "Waiting for GCS to be ready." for 120 s and "Still waiting for GCS to be
  ready." after, so that last log line is certain evidence that the workers cannot reach the head.

The Ray head pod is read the same way against the nodes its nodeSelector picks (the system node), so a head that
cannot pull or fit fails verify within seconds; what the nodes cannot confirm (a node full of other pods) is waited
out to the RayCluster's timeout, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from automation.pipeline import Finding
from automation.steps.verify_checks import HUGEPAGES_FIX, is_ready, name_of, quantity, selects, untolerated_taints
from infra.config import GpuNodesConfig, RayConfig, RayHeadConfig, SystemNodesConfig
from infra.eks_facts import EFA_HUGEPAGES_RESOURCE
from infra.names import EFA_RESOURCE, GPU_RESOURCE

CANNOT_START = "Ray worker pods cannot start"
HEAD_CANNOT_START = "Ray head pod cannot start"
CANNOT_START_CHECKS = frozenset({CANNOT_START, HEAD_CANNOT_START})
PULL_FAILED = ("ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# An init container that exits non-zero is restarted with back-off; these waiting reasons are certain.
INIT_BROKEN = ("CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError")
GCS_WAIT = "wait-gcs-ready"  # KubeRay 1.5.2's init container in every worker (pod.go)
GCS_STILL_WAITING = "Still waiting for GCS to be ready"  # what it prints once it has waited 120 s (pod.go)
IMAGE_FIX = (
    f"set {RayConfig.keyname('image')} in the stack config to an image the nodes can pull "
    "(public.ecr.aws needs no credentials; a private registry needs the node role's ECR read policy), "
    "then run `up` again"
)
TAINT, SELECTOR, NOT_READY = "untolerated taint", "node selector/affinity", "NotReady"
FIXES = {
    f"Insufficient {EFA_HUGEPAGES_RESOURCE}": HUGEPAGES_FIX,
    f"Insufficient {EFA_RESOURCE}": "the EFA device plugin advertises no EFA device: kubectl -n kube-system logs "
    f"ds/aws-efa-k8s-device-plugin; the launch template must attach an EFA interface "
    f"({GpuNodesConfig.keyname('efa_interfaces')})",
    f"Insufficient {GPU_RESOURCE}": "the NVIDIA device plugin advertises fewer GPUs than a worker requests: "
    "kubectl -n kube-system logs ds/nvidia-device-plugin; ray.worker num_gpus must not exceed the type's GPUs",
    TAINT: "give the worker group a toleration for the GPU nodes' taint, or take the taint off the node group",
    SELECTOR: "the worker group's nodeSelector must match the GPU nodes' labels (role=gpu-worker)",
    NOT_READY: "kubectl describe node <node>: the GPU nodes are not Ready",
}
# The head runs on the system node group (infra/manifests.py ray_head_template: nodeSelector role=system).
_HEAD_CPU, _HEAD_MEMORY = RayHeadConfig.keyname("cpu"), RayHeadConfig.keyname("memory")
_SYSTEM_TYPE = SystemNodesConfig.keyname("instance_type")
HEAD_FIXES = {
    "Insufficient cpu": f"the head's CPU request ({_HEAD_CPU}) exceeds the system node's allocatable: lower "
    f"{_HEAD_CPU} or choose a larger {_SYSTEM_TYPE}",
    "Insufficient memory": f"the head's memory request ({_HEAD_MEMORY}) exceeds the system node's allocatable: lower "
    f"{_HEAD_MEMORY} or choose a larger {_SYSTEM_TYPE}",
    TAINT: "the system node has a taint the head does not tolerate: kubectl describe node <node> (a "
    "node.kubernetes.io/* taint means the node is unhealthy; the system node group must not be tainted)",
    SELECTOR: "no node matches the head's nodeSelector: the system node group's nodes must carry role=system "
    "(kubectl get nodes -L role), and the head group's nodeSelector must ask for it",
    NOT_READY: "kubectl describe node <node>: the system node is not Ready",
}


def scheduling_reasons(message: str) -> dict[str, int]:
    """`{reason: node count}` from the first clause of a FailedScheduling message ({} if it is not one)."""
    if not (m := re.match(r"\s*0/\d+ nodes are available:\s*(.*)", message, re.S)):
        return {}
    first = re.split(r"\.(?:\s|$)", m.group(1), maxsplit=1)[0]
    items = re.split(r",\s*(?=\d+\s)", first)
    # A reason without its count (the message of a PreFilter plugin, which stands for every node) counts 0.
    found = (re.fullmatch(r"(?:(\d+)\s+)?(.+)", i.strip()) for i in items if i.strip())
    return {m.group(2).strip(): int(m.group(1) or 0) for m in found if m}


def normalise(reason: str) -> str:
    """A scheduler reason as verify names it: `Insufficient <resource>`, a taint, the selector."""
    if reason.startswith("Insufficient "):
        return "Insufficient " + reason.split()[1]
    if "taint" in reason:
        return TAINT
    if "didn't match" in reason and ("selector" in reason or "affinity" in reason):
        return SELECTOR
    return reason


def node_shortfalls(pod: Mapping, node: Mapping) -> set[str]:
    """What keeps `pod` off `node` by the node's own object (empty: the node could hold it)."""
    spec = pod.get("spec", {})
    judged = {NOT_READY: not is_ready(node), SELECTOR: not selects(spec, node), TAINT: untolerated_taints(spec, node)}
    short = {reason for reason, holds in judged.items() if holds}
    alloc = node.get("status", {}).get("allocatable", {})
    for container in spec.get("containers") or []:
        for key, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if quantity(alloc.get(key, 0)) < quantity(value):
                short.add(f"Insufficient {key}")
    return short


def _latest_scheduling_message(pod: Mapping, events: Sequence[Mapping]) -> str:
    mine = [
        e
        for e in events
        if e.get("reason") == "FailedScheduling" and e.get("involvedObject", {}).get("name") == name_of(pod)
    ]
    mine.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return mine[-1].get("message", "") if mine else ""


def unschedulable(
    pod: Mapping,
    events: Sequence[Mapping],
    gpu_nodes: Sequence[Mapping],
    check: str = CANNOT_START,
    fixes: Mapping[str, str] = FIXES,
    nodes_are: str = "GPU nodes",
) -> Finding | None:
    """A failing finding when the scheduler's event and the nodes agree the pod fits nowhere, else None."""
    per_node = {name_of(n): node_shortfalls(pod, n) for n in gpu_nodes}
    if not per_node or any(not s for s in per_node.values()):
        return None
    message = _latest_scheduling_message(pod, events)
    said = [normalise(r) for r in scheduling_reasons(message)]
    seen = set().union(*per_node.values())
    confirmed = [r for r in dict.fromkeys(said) if r in seen]
    if not confirmed:
        return None
    nodes = "; ".join(f"{n}: {', '.join(sorted(s))}" for n, s in sorted(per_node.items()))
    evidence = f"scheduler: {message.strip()!r}; {nodes_are}: {nodes}"
    fix = "; ".join(fixes.get(r, f"kubectl describe pod {name_of(pod)}") for r in confirmed)
    return Finding(check, "fail", f"pod {name_of(pod)} is Pending: {', '.join(confirmed)} ({evidence})", fix)


def head_unschedulable(pod: Mapping, events: Sequence[Mapping], nodes: Sequence[Mapping]) -> Finding | None:
    """The head's certain FailedScheduling cause, judged against the nodes its selector picks. With none picked only
    the selector is certain (the scheduler must say so too): the event's other reasons are of nodes the head never
    meant to use (the GPU nodes' taint)."""
    spec = pod.get("spec", {})
    picked = [n for n in nodes if selects(spec, n)]
    if picked:
        return unschedulable(pod, events, picked, HEAD_CANNOT_START, HEAD_FIXES, "its nodes")
    message = _latest_scheduling_message(pod, events)
    if not nodes or SELECTOR not in {normalise(r) for r in scheduling_reasons(message)}:
        return None
    wanted = ", ".join(f"{k}={v}" for k, v in sorted((spec.get("nodeSelector") or {}).items())) or "its affinity"
    detail = f"{SELECTOR}: no node of {len(nodes)} matches {wanted} (scheduler: {message.strip()!r})"
    return Finding(HEAD_CANNOT_START, "fail", f"pod {name_of(pod)} is Pending: {detail}", HEAD_FIXES[SELECTOR])


def image_pull_failure(pod: Mapping, check: str = CANNOT_START) -> Finding | None:
    """A failing finding when a container of `pod` waits on an image the kubelet has given up pulling."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILED:
            why = f"{waiting.get('reason')}: {waiting.get('message', '')}"
            return Finding(
                check, "fail", f"pod {name_of(pod)} cannot pull image {status.get('image')}: {why}", IMAGE_FIX
            )
    return None


LogOf = Callable[[Mapping, str], str]  # (pod, container) -> the container's last log line ('' if none)


def init_failure(pod: Mapping, log_of: LogOf | None = None, check: str = CANNOT_START) -> Finding | None:
    """A failing finding when an init container of `pod` is certainly stuck: its image cannot be pulled, it
    crash-loops, or (``log_of`` given) KubeRay's wait-gcs-ready says it is still waiting for the head's GCS."""
    pod_name, ns = name_of(pod), pod.get("metadata", {}).get("namespace", "ray")
    for status in pod.get("status", {}).get("initContainerStatuses") or []:
        name, state = status.get("name", "?"), status.get("state") or {}
        waiting, restarts = state.get("waiting") or {}, status.get("restartCount", 0)
        reason = waiting.get("reason", "")
        if reason in PULL_FAILED:
            detail = f"init container {name} cannot pull image {status.get('image')}: {waiting.get('message', '')}"
            return Finding(check, "fail", f"pod {pod_name} is stuck at Init:{reason}: {detail}", IMAGE_FIX)
        if reason in INIT_BROKEN:
            ended = (status.get("lastState") or {}).get("terminated") or {}
            exited = f"exited {ended.get('exitCode', '?')} ({ended.get('reason', '?')}), {restarts} restart(s)"
            fix = f"kubectl -n {ns} logs {pod_name} -c {name} --previous shows why it exits"
            stuck = f"pod {pod_name} is stuck at Init:{reason}: init container {name} {exited}"
            return Finding(check, "fail", stuck, fix)
        last = log_of(pod, name) if log_of and name == GCS_WAIT and "running" in state else ""
        if GCS_STILL_WAITING in last:
            stuck = f"pod {pod_name} is stuck at Init: its {name} init container cannot reach the Ray head's GCS"
            fix = (
                f"the head pod must be Running and Ready (kubectl -n {ns} get pods -l ray.io/node-type=head; kubectl "
                f"-n {ns} logs <head pod>); the workers reach its GCS through the head Service on port 6379, so the "
                "GPU nodes' security groups must allow traffic to the system node (the cluster security group)"
            )
            return Finding(check, "fail", f"{stuck} ({restarts} restart(s); its last log line: {last.strip()!r})", fix)
    return None


def diagnose(
    pods: Sequence[Mapping], events: Sequence[Mapping], gpu_nodes: Sequence[Mapping], log_of: LogOf | None = None
) -> list[Finding]:
    """One failing finding for the first worker pod whose cause is certain; [] while waiting may still help."""
    pending = [p for p in sorted(pods, key=name_of) if p.get("status", {}).get("phase") == "Pending"]
    for pod in pending:
        row = init_failure(pod, log_of) or image_pull_failure(pod) or unschedulable(pod, events, gpu_nodes)
        if row:
            more = f" ({len(pending) - 1} more worker pod(s) Pending)" if len(pending) > 1 else ""
            return [Finding(row.check, row.status, row.detail + more, row.fix)]
    return []


def diagnose_head(heads: Sequence[Mapping], events: Sequence[Mapping], nodes: Sequence[Mapping]) -> list[Finding]:
    """One failing finding when the Ray head pod is Pending for a certain cause; [] while waiting may still help.
    `nodes` are all the cluster's nodes: the head's own nodeSelector picks among them."""
    pending = (p for p in sorted(heads, key=name_of) if p.get("status", {}).get("phase") == "Pending")
    rows = (image_pull_failure(p, HEAD_CANNOT_START) or head_unschedulable(p, events, nodes) for p in pending)
    return [row for row in rows if row][:1]
