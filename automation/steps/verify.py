"""verify: the cluster is what the stack promised, checked from the Kubernetes API (the pure checks: verify_checks.py).

Node facts (count, AZ, GPU and EFA allocatable) come first and fail fast with a row per GPU node, because a missing
device plugin otherwise shows up only as pods that never schedule. Then the DaemonSets on the GPU nodes, the node
monitoring agent, the KubeRay operator, huge pages, the RayCluster and its workers (a Pending worker fails as soon as
its cause is certain: verify_pending.py), `fi_info -p efa` in one worker per node, and the GPUs Ray advertises.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from automation.errors import DriverError
from automation.kube import KubeApi, PodExec, RayClusterPods
from automation.pipeline import Expectations, Finding, Prior, StepResult, verdict
from automation.ray_head import RAY_RESOURCES_SNIPPET, parse_ray_resources
from automation.steps.place import by_place
from automation.steps.verify_checks import (
    AGENT_SELECTOR,
    FI_INFO_COMMAND,
    check_daemonsets,
    check_fi_info,
    check_hugepages,
    check_node_agent,
    condition,
    worker_requests,
)
from automation.steps.verify_checks import is_ready as _ready
from automation.steps.verify_checks import name_of as _name
from automation.steps.verify_checks import quantity as _quantity
from automation.steps.verify_pending import CANNOT_START_CHECKS, diagnose, diagnose_head
from automation.storage import Identity, verify_storage
from automation.targets.aws import AwsTarget
from automation.targets.local import LocalTarget
from infra.names import EFA_RESOURCE, GPU_NODE_SELECTOR, GPU_RESOURCE, NODE_MONITORING_NAMESPACE

ZONE_LABEL = "topology.kubernetes.io/zone"
RAY_GPUS = "Ray GPUs == Kubernetes GPU requests"


# ---- nodes ---------------------------------------------------------------------------------------
def check_nodes(nodes: Sequence[dict], exp: Expectations) -> list[Finding]:
    """The count row, then one row per GPU node (zone, readiness, GPU and EFA allocatable)."""
    # The count row fails only on the count: a NotReady node fails its own row, once.
    fix = (
        f"kubectl get nodes -l {GPU_NODE_SELECTOR}; the node group's last scaling activity: "
        "aws autoscaling describe-scaling-activities --auto-scaling-group-name <asg> --max-items 1"
    )
    got = f"got {len(nodes)} ({sum(_ready(n) for n in nodes)} Ready)"
    detail = f"expected {exp.node_count} nodes labelled {GPU_NODE_SELECTOR}, {got}"
    rows = [Finding.judged("GPU nodes Ready", len(nodes) == exp.node_count, detail, fix)]
    for node in sorted(nodes, key=_name):
        name = _name(node)
        zone = node.get("metadata", {}).get("labels", {}).get(ZONE_LABEL, "<none>")
        alloc = node.get("status", {}).get("allocatable", {})
        gpus = _quantity(alloc.get(GPU_RESOURCE, 0))
        efa = _quantity(alloc.get(EFA_RESOURCE, 0))
        is_ready = _ready(node)
        detail = f"zone {zone}, {'Ready' if is_ready else 'NotReady'}, {GPU_RESOURCE} {gpus:g}, {EFA_RESOURCE} {efa:g}"
        problems, fixes = [], []
        if not is_ready:
            problems.append("not Ready")
            fixes.append(f"kubectl describe node {name}")
        if zone != exp.gpu_az:
            problems.append(f"zone {zone} is not the GPU AZ {exp.gpu_az}")
            fixes.append("give the GPU node group only the subnet of gpu_nodes.availability_zone and run `up` again")
        if gpus != exp.gpus_per_node:
            problems.append(f"expected {GPU_RESOURCE} {exp.gpus_per_node}, got {gpus:g}")
            fixes.append(
                f"check the NVIDIA device plugin pod on {name} (kubectl -n kube-system get pods -o wide | grep nvidia)"
            )
        if efa < exp.efa_per_node:
            problems.append(f"expected {EFA_RESOURCE} >= {exp.efa_per_node}, got {efa:g}")
            fixes.append(
                f"check the EFA device plugin pod on {name} (kubectl -n kube-system get pods -o wide | grep efa) "
                "and that the launch template attaches EFA interfaces"
            )
        rows.append(Finding.judged(f"node {name}", not problems, "; ".join([detail, *problems]), "; ".join(fixes)))
    return rows


# ---- add-ons -------------------------------------------------------------------------------------
def check_operator(deployments: Sequence[dict]) -> Finding:
    dep = next((d for d in deployments if "kuberay-operator" in _name(d)), None)
    if dep is None:
        return Finding(
            "KubeRay operator",
            "fail",
            "no deployment named like 'kuberay-operator'",
            "install the kuberay-operator chart: run `up` again",
        )
    name, ns, ok = _name(dep), dep["metadata"].get("namespace"), _ready(dep, "Available")
    return Finding.judged(
        "KubeRay operator", ok, f"deployment {ns}/{name} Available={ok}", f"kubectl -n {ns} logs deploy/{name}"
    )


def check_addons(kube: KubeApi) -> list[Finding]:
    """The DaemonSets on the GPU nodes, the node monitoring agent on each of them, the KubeRay operator."""
    gpu_nodes = kube.list_nodes(GPU_NODE_SELECTOR)
    return [
        *check_daemonsets(kube.list_daemonsets(), gpu_nodes),
        check_node_agent(kube.list_pods(NODE_MONITORING_NAMESPACE, AGENT_SELECTOR), gpu_nodes),
        check_operator(kube.list_deployments()),
    ]


def check_raycluster(rc: dict, exp: Expectations) -> list[Finding]:
    rows, ns = [], exp.namespace
    fix = f"kubectl -n {ns} describe raycluster {exp.raycluster}; kubectl -n {ns} get pods"
    for kind in ("HeadPodReady", "RayClusterProvisioned"):
        c = condition(rc, kind)
        ok = c.get("status") == "True"
        why = f" ({c.get('reason')}: {c.get('message')})" if c and not ok else ""
        detail = f"{ns}/{exp.raycluster}: {kind}={c.get('status', 'absent')}{why}"
        rows.append(Finding.judged(f"RayCluster {kind}", ok, detail, fix))
    return rows


def _container_resources(pod: dict) -> tuple[dict, dict]:
    container = pod.get("spec", {}).get("containers", [{}])[0]
    res = container.get("resources", {})
    return res.get("requests", {}) or {}, res.get("limits", {}) or {}


def check_worker_pods(pods: Sequence[dict], exp: Expectations) -> list[Finding]:
    """Worker pods are Running, as many as the worker group asks, each with requests equal to limits."""
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running" and _ready(p)]
    fix = f"kubectl -n {exp.namespace} get pods -l ray.io/node-type=worker -o wide"
    detail = f"expected {exp.worker_replicas} Ready worker pods, got {len(running)} of {len(pods)}"
    rows = [Finding.judged("Ray worker pods Running", len(running) == exp.worker_replicas, detail, fix)]
    for pod in sorted(pods, key=_name):
        req, lim = _container_resources(pod)
        keys = sorted(set(req) | set(lim))
        diff = [
            f"{k}: request {req.get(k, '-')} limit {lim.get(k, '-')}"
            for k in keys
            if k not in req or k not in lim or _quantity(req[k]) != _quantity(lim[k])
        ]
        fix = "set the worker group's requests equal to its limits (Guaranteed QoS)"
        detail = "; ".join(diff) if diff else (", ".join(f"{k}={req[k]}" for k in keys) or "no requests or limits set")
        rows.append(Finding.judged(f"pod {_name(pod)} requests == limits", bool(keys) and not diff, detail, fix))
    return rows


def check_ray_gpus(ray_resources: Mapping[str, float], pods: Sequence[dict]) -> Finding:
    want = sum(_quantity(_container_resources(p)[0].get(GPU_RESOURCE, 0)) for p in pods)
    got = float(ray_resources.get("GPU", 0))
    return Finding.judged(
        RAY_GPUS,
        got == want and want > 0,
        f"Ray advertises GPU {got:g}, worker pods request {GPU_RESOURCE} {want:g}",
        "set the worker group's rayStartParams num-gpus to its nvidia.com/gpu limit",
    )


# ---- the step ------------------------------------------------------------------------------------
def _failed(rows: Sequence[Finding]) -> bool:
    return any(r.status == "fail" for r in rows)


def poll(
    check: Callable[[], list[Finding]],
    wait_s: float,
    sleep: Callable[[float], None],
    interval_s: float = 10,
    decisive: Callable[[list[Finding]], bool] = lambda rows: False,
) -> list[Finding]:
    """Re-run `check` until none of its findings fail, a decisive failure comes or `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        rows = check()
        if not _failed(rows) or decisive(rows) or time.monotonic() >= deadline:
            return rows
        sleep(interval_s)


def check_workers(kube: KubeApi, exp: Expectations) -> list[Finding]:
    """The RayCluster and its workers, or the one certain reason its Pending workers cannot start."""
    ray = RayClusterPods(kube, exp.namespace, exp.raycluster)
    pods, heads = (kube.list_pods(exp.namespace, ray.selector(node_type)) for node_type in ("worker", "head"))
    if any(p.get("status", {}).get("phase") == "Pending" for p in [*heads, *pods]):
        events = kube.list_events(exp.namespace)
        blocked = diagnose_head(heads, events, kube.list_nodes()) or diagnose(
            pods, events, kube.list_nodes(GPU_NODE_SELECTOR), partial(last_log_line, kube, exp.namespace)
        )
        if blocked:
            return blocked
    return [*check_raycluster(kube.get_raycluster(exp.namespace, exp.raycluster), exp), *check_worker_pods(pods, exp)]


def last_log_line(kube: KubeApi, namespace: str, pod: Mapping, container: str) -> str:
    """The container's last log line; '' when the log cannot be read (not started yet)."""
    try:
        text = kube.pod_log(namespace, _name(pod), container, tail_lines=1)
    except DriverError:
        return ""
    return (text.strip().splitlines() or [""])[-1]


def check_in_pods(kube: KubeApi, exp: Expectations, pod_exec: PodExec) -> list[Finding]:
    """`fi_info -p efa` in one worker pod per GPU node (an FI_EP_RDM endpoint before any training), then the GPUs Ray
    advertises against those the worker pods request."""
    ray = RayClusterPods(kube, exp.namespace, exp.raycluster)
    pods = kube.list_pods(exp.namespace, ray.selector("worker"))
    # In reverse name order, so the first pod by name on each node is the one kept.
    per_node = {p.get("spec", {}).get("nodeName", "?"): _name(p) for p in sorted(pods, key=_name, reverse=True)}
    rows = []
    for node, name in sorted(per_node.items()):
        res = pod_exec(name, exp.namespace, FI_INFO_COMMAND, timeout_s=60)
        rows.append(check_fi_info(name, node, res.rc, res.stdout + res.stderr))
    if _failed(rows):
        return rows
    head = ray.head_pod()
    res = pod_exec(head, exp.namespace, ["python", "-c", RAY_RESOURCES_SNIPPET], timeout_s=120)
    try:
        resources = parse_ray_resources(res.stdout)
    except ValueError as e:
        detail = f"cannot read Ray's resources in {head} (rc {res.rc}): {e} {res.stderr[-300:]}"
        return [*rows, Finding(RAY_GPUS, "fail", detail, f"kubectl -n {exp.namespace} exec {head} -- ray status")]
    return [*rows, check_ray_gpus(resources, pods)]


def verify_cluster(
    kube: KubeApi,
    exp: Expectations,
    pod_exec: PodExec | None,
    node_wait_s: float = 180,
    pod_wait_s: float = 900,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: Callable[[str], None] = lambda s: None,
) -> StepResult:
    """Nodes (fail fast), add-ons, huge pages, then the workers (failing as soon as a cause is certain),
    EFA inside them and Ray's GPUs."""
    on_progress("GPU nodes: count, AZ, GPU and EFA allocatable")
    rows = poll(lambda: check_nodes(kube.list_nodes(GPU_NODE_SELECTOR), exp), node_wait_s, sleep)
    if _failed(rows):
        return verdict("verify", rows, exp)

    on_progress("device plugins, node monitoring agent, KubeRay operator, huge pages")
    rows += poll(lambda: check_addons(kube), pod_wait_s, sleep)
    if not _failed(rows):
        rc = kube.get_raycluster(exp.namespace, exp.raycluster)
        rows += check_hugepages(kube.list_nodes(GPU_NODE_SELECTOR), worker_requests(rc))
    if _failed(rows):
        return verdict("verify", rows, exp)

    on_progress("RayCluster and its worker pods")
    rows += poll(
        lambda: check_workers(kube, exp),
        pod_wait_s,
        sleep,
        decisive=lambda r: any(f.check in CANNOT_START_CHECKS for f in r),
    )
    if _failed(rows) or pod_exec is None:
        return verdict("verify", rows, exp)

    on_progress("EFA inside the worker pods, GPUs Ray advertises")
    rows += check_in_pods(kube, exp, pod_exec)
    fit = f"{exp.node_count} GPU nodes in {exp.gpu_az}, RayCluster {exp.raycluster} provisioned"
    return verdict("verify", rows, exp, ok_summary=fit)


def run_aws(target: AwsTarget, prior: Prior) -> StepResult:
    """The stack's cluster (`verify_cluster`), then a marker object written to the run bucket from a worker pod (which
    writes checkpoint shards) and from the head pod (where the job's driver and Ray Train's controller write state)."""
    kube = target.kube()
    exp = target.expectations()
    # A run that holds the idle guard's lease (its `scale-up` step took it) renews it at each poll.
    lease = target.handles.lease
    sleep = lease.renewing(time.sleep) if lease is not None else time.sleep
    cluster = verify_cluster(
        kube, exp, kube.exec, target.run.node_wait_s, target.run.pod_wait_s, sleep=sleep, on_progress=target.on_progress
    )
    if not cluster.ok:
        return cluster
    out = target.outputs()
    ray = RayClusterPods(kube, exp.namespace, exp.raycluster)
    worker = ray.pods("worker")[0]
    identity = Identity(
        str(out.get("pod_role_arn")),
        str(out.get("pod_identity_association_id")),
        str(out.get("ray_service_account")),
        exp.namespace,
    )
    for pod in (worker, ray.head_pod()):
        target.on_progress(f"writing a marker object to the run bucket from {pod}")
        storage = verify_storage(kube.exec, pod, identity, target.storage_uri(), target.run_id, target.stack_name)
        if not storage.ok:
            return storage
    return dataclasses.replace(cluster, summary=f"{cluster.summary}; {storage.summary} (and from {worker})")


def run_local(target: LocalTarget, prior: Prior) -> StepResult:
    """Ray's advertised CPUs (and GPUs, for a GPU run) on the local head cover the workers."""
    resources, plan = target.ray_resources(), target.plan
    needs = [("CPU", plan.cpus_needed)] + ([("GPU", plan.gpus_needed)] if plan.use_gpu else [])
    rows = [
        Finding.judged(
            f"Ray {kind}s",
            resources.get(kind, 0) >= need,
            f"Ray advertises {kind} {resources.get(kind, 0):g}, the workers need {need:g}",
            "use fewer --num-workers",
        )
        for kind, need in needs
    ]
    return verdict("verify", rows, dict(resources), ok_summary=f"Ray's resources cover {plan.num_workers} workers")


run = by_place(
    "verify: the target's cluster is what it promised (on AWS the cluster and the bucket; locally Ray's resources).",
    run_aws,
    run_local,
)
