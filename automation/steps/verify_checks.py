"""verify's pure checks over Kubernetes API objects (the wire JSON of `kubectl get -o json`): where a pod template may
land (rules: https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/ and
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/), the DaemonSets, huge pages, fi_info.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from automation.pipeline import Finding
from infra.config import RayConfig, RayWorkerConfig
from infra.eks_facts import EFA_HUGEPAGES_RESOURCE
from infra.names import EFA_COUNTER_READER, NODE_MONITORING_AGENT, NODE_MONITORING_NAMESPACE

# The device plugins verify requires on every GPU node, found among the DaemonSets that target them.
DEVICE_PLUGINS = {"nvidia-device-plugin": "NVIDIA device plugin", "efa": "EFA device plugin"}
# Other DaemonSets named in verify's rows. Like every DaemonSet that targets the GPU nodes, the EFA counter reader is
# waited for until ready there; where it is absent, `counters` fails naming each node without it.
LABELS = {**DEVICE_PLUGINS, EFA_COUNTER_READER: "EFA counter reader"}


def quantity(value: object) -> float:
    from kubernetes.utils.quantity import parse_quantity

    return float(parse_quantity(str(value)))


def name_of(obj: Mapping) -> str:
    return obj.get("metadata", {}).get("name", "?")


def condition(obj: Mapping, kind: str) -> Mapping:
    """`obj`'s status condition of type `kind` ({} when it has none)."""
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == kind), {})


def is_ready(obj: Mapping, kind: str = "Ready") -> bool:
    """Whether `obj` (a node, pod, deployment or RayCluster) has condition `kind` with status True."""
    return condition(obj, kind).get("status") == "True"


# ---- where a pod template may run ----------------------------------------------------------------
def _expression_holds(labels: Mapping[str, str], expr: Mapping) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", "In"), expr.get("values") or []
    if op in ("Gt", "Lt"):
        try:
            have, bound = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > bound if op == "Gt" else have < bound
    holds = {
        "In": key in labels and labels[key] in values,
        "NotIn": labels.get(key) not in values,
        "Exists": key in labels,
        "DoesNotExist": key not in labels,
    }
    return holds.get(op, False)


def selects(pod_spec: Mapping, node: Mapping) -> bool:
    """The node's labels satisfy the pod's nodeSelector and (any term of) its required node affinity."""
    labels = node.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return not terms or any(all(_expression_holds(labels, e) for e in t.get("matchExpressions") or []) for t in terms)


def _tolerated(taint: Mapping, tolerations: Sequence[Mapping]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taints(pod_spec: Mapping, node: Mapping) -> list[str]:
    """The node's scheduling taints (NoSchedule, NoExecute) the pod does not tolerate, as key=value:effect."""
    tolerations = pod_spec.get("tolerations") or []
    return [
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
        for t in node.get("spec", {}).get("taints") or []
        if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(t, tolerations)
    ]


def targets(pod_spec: Mapping, node: Mapping) -> bool:
    """Whether the scheduler may place a pod of `pod_spec` on `node` (labels and taints; not resources)."""
    return selects(pod_spec, node) and not untolerated_taints(pod_spec, node)


def check_daemonsets(daemonsets: Sequence[Mapping], gpu_nodes: Sequence[Mapping]) -> list[Finding]:
    """Every DaemonSet that targets a GPU node is ready there; each device plugin targets them all. A DaemonSet is
    judged by where it may run, not by its name: one that targets none of the GPU nodes (the NVIDIA chart's MPS
    control daemon selects `nvidia.com/mps.capable=true`) is listed as skipped."""
    rows, covering = [], {k: False for k in DEVICE_PLUGINS}
    for ds in sorted(daemonsets, key=name_of):
        ns, name = ds.get("metadata", {}).get("namespace"), name_of(ds)
        pod_spec = ds.get("spec", {}).get("template", {}).get("spec") or {}
        targeted = sum(targets(pod_spec, n) for n in gpu_nodes)
        if not targeted:
            why = f"targets none of the {len(gpu_nodes)} GPU nodes (nodeSelector {pod_spec.get('nodeSelector') or '{}'}"
            rows.append(
                Finding(f"daemonset {name}", "skip", f"{why}, node affinity or taints exclude them): not required")
            )
            continue
        # The LABELS key that names it: the longest it contains (efa-counter-reader is not the EFA plugin).
        st, kind = ds.get("status", {}), max((k for k in LABELS if k in name), key=len, default=None)
        want, ready = int(st.get("desiredNumberScheduled", 0)), int(st.get("numberReady", 0))
        fix = f"kubectl -n {ns} describe ds {name}; kubectl -n {ns} get pods -o wide | grep {name}"
        detail = f"daemonset {ns}/{name}: {ready}/{want} ready, targets {targeted} GPU node(s)"
        rows.append(
            Finding.judged(LABELS.get(kind or "", "DaemonSet"), ready == want and ready >= targeted, detail, fix)
        )
        if kind in covering:
            covering[kind] |= targeted == len(gpu_nodes)
    for key, label in DEVICE_PLUGINS.items():
        if not covering[key]:
            fix = "install its Helm chart with the GPU nodes' nodeSelector and taint toleration: run `up` again"
            rows.append(
                Finding(label, "fail", f"no daemonset named like '{key}' targets all {len(gpu_nodes)} GPU nodes", fix)
            )
    return rows


# ---- the node monitoring agent --------------------------------------------------------------------
# Its pods carry the chart's app.kubernetes.io/name label (infra/names.py says where that is read).
AGENT_SELECTOR = f"app.kubernetes.io/name={NODE_MONITORING_AGENT}"
# The condition the agent sets on a node with NVIDIA GPUs: True (reason NvidiaGPUIsReady) while its nvidia monitor
# runs, False with the fault (an Xid, DCGM) as reason; absent on a node where the agent does not run or sees no GPU
# (aws/eks-node-monitoring-agent v1.7.0, pkg/conditions/conditions.go, cmd/eks-node-monitoring-agent/main.go).
GPU_HEALTH_CONDITION = "AcceleratedHardwareReady"


def gpu_health(node: Mapping) -> str:
    """What the node shows of the agent's GPU condition: '' when True, else what is wrong."""
    c = condition(node, GPU_HEALTH_CONDITION)
    if not c:
        return f"no {GPU_HEALTH_CONDITION} condition"
    return "" if c.get("status") == "True" else f"{GPU_HEALTH_CONDITION} {c.get('status')} ({c.get('reason')})"


def check_node_agent(agent_pods: Sequence[Mapping], gpu_nodes: Sequence[Mapping]) -> Finding:
    """One row: each GPU node runs a Ready monitoring agent pod and shows its GPU condition True, else what it lacks."""
    ready_on = {p.get("spec", {}).get("nodeName") for p in agent_pods if is_ready(p)}
    problems = []
    for node in sorted(gpu_nodes, key=name_of):
        lacks = [f"no Ready {NODE_MONITORING_AGENT} pod"] if name_of(node) not in ready_on else []
        lacks += [h] if (h := gpu_health(node)) else []
        problems += [f"{name_of(node)}: {', '.join(lacks)}"] if lacks else []
    fix = (
        f"kubectl -n {NODE_MONITORING_NAMESPACE} get pods -l {AGENT_SELECTOR} -o wide; kubectl describe node <node>: a "
        "GPU condition False names the fault, for which EKS node auto repair reboots or replaces the node after 10 "
        "minutes (https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html)"
    )
    detail = "; ".join(problems) or f"Ready on all {len(gpu_nodes)} GPU nodes, each {GPU_HEALTH_CONDITION}=True"
    return Finding.judged("node monitoring agent", not problems, detail, fix)


# ---- huge pages ------------------------------------------------------------------------------------
HUGEPAGES_FIX = (
    "the GPU nodes reserve huge pages in their launch template's user data (vm.nr_hugepages, read once by the "
    "kubelet at start): run `up` again so the node group rolls to that template, or turn the workers' huge-page "
    f"request off with `{RayWorkerConfig.keyname('hugepages', prefixed=True)}: false` in the stack file"
)


def worker_requests(raycluster: Mapping) -> dict[str, str]:
    """The resource requests of the RayCluster's first worker group's first container ({} if none)."""
    groups = raycluster.get("spec", {}).get("workerGroupSpecs") or [{}]
    containers = groups[0].get("template", {}).get("spec", {}).get("containers") or [{}]
    return dict((containers[0].get("resources") or {}).get("requests") or {})


def check_hugepages(gpu_nodes: Sequence[Mapping], requests: Mapping[str, str]) -> list[Finding]:
    """One row: each GPU node's allocatable hugepages-2Mi holds what one worker pod requests (skip if none)."""
    key = EFA_HUGEPAGES_RESOURCE
    want = quantity(requests.get(key, 0))
    if not want:
        return [Finding(f"GPU nodes {key}", "skip", f"the worker pods request no {key}")]
    have = {name_of(n): quantity(n.get("status", {}).get("allocatable", {}).get(key, 0)) for n in gpu_nodes}
    short = [f"{n} has {v / 2**20:g}Mi" for n, v in sorted(have.items()) if v < want]
    if not short:
        return [Finding(f"GPU nodes {key}", "pass", f"{len(have)} GPU nodes hold a worker's {requests[key]}")]
    detail = f"a worker pod requests {key} {requests[key]}, allocatable: {'; '.join(short)}"
    return [Finding(f"GPU nodes {key}", "fail", detail, HUGEPAGES_FIX)]


# ---- libfabric inside a worker pod ----------------------------------------------------------------
# List the EFA devices in the pod, then run `fi_info -p efa` (the EFA installer's /opt/amazon/efa/bin).
FI_INFO_COMMAND = [
    "sh",
    "-c",
    'export PATH="$PATH:/opt/amazon/efa/bin"; '
    "if ls /dev/infiniband/uverbs* >/dev/null 2>&1; then echo EFA_DEVICES present; else echo EFA_DEVICES none; fi; "
    "command -v fi_info >/dev/null 2>&1 || { echo FI_INFO missing; exit 0; }; "
    "fi_info -p efa 2>&1; echo FI_INFO_RC $?",
]


def efa_endpoints(output: str) -> list[tuple[str, str]]:
    """(provider, endpoint type) of each fi_info entry in `output` (`provider: efa` then `    type: FI_EP_RDM`)."""
    found, provider = [], None
    for line in output.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "provider":
            provider = value.strip()
        elif key == "type" and provider is not None:
            found.append((provider, value.strip()))
    return found


def check_fi_info(pod: str, node: str, rc: int, output: str) -> Finding:
    """An FI_EP_RDM endpoint of the efa provider in `pod`, else the cause: no device, no tool, no provider."""
    check = f"EFA RDM endpoint in {pod}"
    lines = output.splitlines()
    rdm = [p for p, t in efa_endpoints(output) if (p, t) == ("efa", "FI_EP_RDM")]
    if rdm:
        return Finding(check, "pass", f"on {node}: fi_info -p efa lists {len(rdm)} FI_EP_RDM endpoint(s) of efa")
    if "EFA_DEVICES none" in lines:
        why = "no EFA device in the pod (/dev/infiniband/uverbs* absent)"
        fix = (
            "the worker must request vpc.amazonaws.com/efa and the EFA device plugin must run on "
            f"{node} (kubectl -n kube-system get pods -o wide | grep efa)"
        )
    elif "FI_INFO missing" in lines:
        why = "fi_info is not in the image (no libfabric from the EFA installer)"
        image = RayConfig.keyname("image")
        fix = f"use a training image with the EFA installer's libfabric ({image} in the stack config)"
    else:
        why = f"libfabric's efa provider offers no FI_EP_RDM endpoint: {' '.join(lines[-3:]) or f'rc {rc}'}"
        fix = f"check the EFA kernel module and the launch template's EFA interface on {node}: fi_info -p efa -v"
    return Finding(check, "fail", f"on {node}: {why}", fix)
