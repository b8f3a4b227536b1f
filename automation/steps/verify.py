"""verify: the cluster is what the stack promised, checked from the Kubernetes API.

Node facts (count, AZ, GPU and EFA allocatable) are checked first and fail fast with a table of
every GPU node, because a missing device plugin otherwise shows up only as pods that never schedule.
Only then does the step wait for the device-plugin daemonsets, the KubeRay operator, the RayCluster
and its worker pods.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from automation.errors import DriverError
from automation.kube import PodExec
from automation.pipeline import Finding, Prior, StepResult, verdict
from infra.names import EFA_RESOURCE, GPU_NODE_SELECTOR, GPU_RESOURCE

if TYPE_CHECKING:
    from automation.targets import Target

ZONE_LABEL = "topology.kubernetes.io/zone"
DEVICE_PLUGINS = {"nvidia-device-plugin": "NVIDIA device plugin", "efa": "EFA device plugin"}
RESOURCES_MARK = "RAY_CLUSTER_RESOURCES "
# Run in the head pod: what Ray itself advertises, which is what Ray Train schedules against.
RAY_RESOURCES_SNIPPET = (
    "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
    f"print({RESOURCES_MARK!r} + json.dumps(ray.cluster_resources()))"
)


class KubeReader(Protocol):
    def list_nodes(self, label_selector: str = "") -> list[dict]: ...
    def list_pods(self, namespace: str, label_selector: str) -> list[dict]: ...
    def list_daemonsets(self) -> list[dict]: ...
    def list_deployments(self) -> list[dict]: ...
    def get_raycluster(self, namespace: str, name: str) -> dict: ...


@dataclass(frozen=True)
class Expectations:
    """What the stack promises about the cluster."""

    node_count: int
    gpu_az: str
    gpus_per_node: int
    efa_per_node: int
    namespace: str
    raycluster: str
    worker_replicas: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def expectations_from(cfg: Any, outputs: Mapping[str, Any]) -> Expectations:
    """Expectations from the stack config, with the stack outputs taking precedence where they exist."""
    return Expectations(
        node_count=int(cfg.gpu_nodes.node_count),
        gpu_az=str(outputs.get("gpu_az") or cfg.gpu_nodes.availability_zone),
        gpus_per_node=int(cfg.gpu_nodes.gpus_per_node),
        efa_per_node=int(cfg.gpu_nodes.efa_interfaces),
        namespace=str(outputs.get("raycluster_namespace") or cfg.ray.namespace),
        raycluster=str(outputs.get("raycluster_name") or cfg.ray.cluster_name),
        worker_replicas=int(cfg.ray.worker.replicas),
    )


def _quantity(value: Any) -> float:
    from kubernetes.utils.quantity import parse_quantity

    return float(parse_quantity(str(value)))


def _ready(obj: dict, kind: str = "Ready") -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions") or []
    )


def _name(obj: dict) -> str:
    return obj.get("metadata", {}).get("name", "?")


# ---- nodes ---------------------------------------------------------------------------------------
def check_nodes(nodes: Sequence[dict], exp: Expectations) -> list[Finding]:
    """One row per GPU node (zone, readiness, GPU and EFA allocatable) plus the count row."""
    rows = []
    ready = 0
    for node in sorted(nodes, key=_name):
        name = _name(node)
        zone = node.get("metadata", {}).get("labels", {}).get(ZONE_LABEL, "<none>")
        alloc = node.get("status", {}).get("allocatable", {})
        gpus = _quantity(alloc.get(GPU_RESOURCE, 0))
        efa = _quantity(alloc.get(EFA_RESOURCE, 0))
        is_ready = _ready(node)
        ready += is_ready
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
        rows.append(
            Finding(
                f"node {name}",
                "fail" if problems else "pass",
                detail + ("; " + "; ".join(problems) if problems else ""),
                "; ".join(fixes),
            )
        )
    count_ok = len(nodes) == exp.node_count and ready == exp.node_count
    rows.insert(
        0,
        Finding(
            "GPU nodes Ready",
            "pass" if count_ok else "fail",
            f"expected {exp.node_count} Ready nodes labelled {GPU_NODE_SELECTOR}, got {ready} Ready of {len(nodes)}",
            ""
            if count_ok
            else f"kubectl get nodes -l {GPU_NODE_SELECTOR}; the node group's last scaling activity: "
            "aws autoscaling describe-scaling-activities --auto-scaling-group-name <asg> --max-items 1",
        ),
    )
    return rows


# ---- add-ons -------------------------------------------------------------------------------------
def check_device_plugins(daemonsets: Sequence[dict], min_ready: int) -> list[Finding]:
    """Each device plugin's daemonset exists and has at least `min_ready` pods ready, all it wants."""
    rows = []
    for key, label in DEVICE_PLUGINS.items():
        found = [d for d in daemonsets if key in _name(d)]
        if not found:
            rows.append(
                Finding(label, "fail", f"no daemonset named like '{key}'", "install its Helm chart: run `up` again")
            )
            continue
        for ds in found:
            st = ds.get("status", {})
            want, ready = int(st.get("desiredNumberScheduled", 0)), int(st.get("numberReady", 0))
            ok = ready == want and ready >= min_ready
            rows.append(
                Finding(
                    label,
                    "pass" if ok else "fail",
                    f"daemonset {ds['metadata'].get('namespace')}/{_name(ds)}: {ready}/{want} ready, "
                    f"expected >= {min_ready}",
                    "" if ok else f"kubectl -n {ds['metadata'].get('namespace')} describe ds {_name(ds)}",
                )
            )
    return rows


def check_operator(deployments: Sequence[dict]) -> Finding:
    found = [d for d in deployments if "kuberay-operator" in _name(d)]
    if not found:
        return Finding(
            "KubeRay operator",
            "fail",
            "no deployment named like 'kuberay-operator'",
            "install the kuberay-operator chart: run `up` again",
        )
    dep = found[0]
    ok = _ready(dep, "Available")
    return Finding(
        "KubeRay operator",
        "pass" if ok else "fail",
        f"deployment {dep['metadata'].get('namespace')}/{_name(dep)} Available={ok}",
        "" if ok else f"kubectl -n {dep['metadata'].get('namespace')} logs deploy/{_name(dep)}",
    )


def check_raycluster(rc: dict, exp: Expectations) -> list[Finding]:
    conds = {c.get("type"): c for c in rc.get("status", {}).get("conditions") or []}
    rows = []
    for kind in ("HeadPodReady", "RayClusterProvisioned"):
        c = conds.get(kind, {})
        ok = c.get("status") == "True"
        rows.append(
            Finding(
                f"RayCluster {kind}",
                "pass" if ok else "fail",
                f"{exp.namespace}/{exp.raycluster}: {kind}={c.get('status', 'absent')}"
                + (f" ({c.get('reason')}: {c.get('message')})" if c and not ok else ""),
                ""
                if ok
                else f"kubectl -n {exp.namespace} describe raycluster {exp.raycluster}; "
                f"kubectl -n {exp.namespace} get pods",
            )
        )
    return rows


def _container_resources(pod: dict) -> tuple[dict, dict]:
    container = pod.get("spec", {}).get("containers", [{}])[0]
    res = container.get("resources", {})
    return res.get("requests", {}) or {}, res.get("limits", {}) or {}


def check_worker_pods(pods: Sequence[dict], exp: Expectations) -> list[Finding]:
    """Worker pods are Running, as many as the worker group asks, each with requests equal to limits."""
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running" and _ready(p)]
    rows = [
        Finding(
            "Ray worker pods Running",
            "pass" if len(running) == exp.worker_replicas else "fail",
            f"expected {exp.worker_replicas} Ready worker pods, got {len(running)} of {len(pods)}",
            ""
            if len(running) == exp.worker_replicas
            else f"kubectl -n {exp.namespace} get pods -l ray.io/node-type=worker -o wide",
        )
    ]
    for pod in sorted(pods, key=_name):
        req, lim = _container_resources(pod)
        keys = sorted(set(req) | set(lim))
        diff = [
            f"{k}: request {req.get(k, '-')} limit {lim.get(k, '-')}"
            for k in keys
            if k not in req or k not in lim or _quantity(req[k]) != _quantity(lim[k])
        ]
        rows.append(
            Finding(
                f"pod {_name(pod)} requests == limits",
                "fail" if diff or not keys else "pass",
                "; ".join(diff) if diff else (", ".join(f"{k}={req[k]}" for k in keys) or "no requests or limits set"),
                "" if not diff and keys else "set the worker group's requests equal to its limits (Guaranteed QoS)",
            )
        )
    return rows


def requested_gpus(pods: Sequence[dict]) -> float:
    return sum(_quantity(_container_resources(p)[0].get(GPU_RESOURCE, 0)) for p in pods)


def parse_ray_resources(output: str) -> dict[str, float]:
    """The resource dict printed by RAY_RESOURCES_SNIPPET; ValueError when it is not in `output`."""
    for line in output.splitlines():
        if line.startswith(RESOURCES_MARK):
            return json.loads(line[len(RESOURCES_MARK) :])
    raise ValueError(f"no line starting with {RESOURCES_MARK.strip()!r} in: {output.strip()[-300:]!r}")


def check_ray_gpus(ray_resources: Mapping[str, float], pods: Sequence[dict]) -> Finding:
    want = requested_gpus(pods)
    got = float(ray_resources.get("GPU", 0))
    ok = got == want and want > 0
    return Finding(
        "Ray GPUs == Kubernetes GPU requests",
        "pass" if ok else "fail",
        f"Ray advertises GPU {got:g}, worker pods request {GPU_RESOURCE} {want:g}",
        "" if ok else "set the worker group's rayStartParams num-gpus to its nvidia.com/gpu limit",
    )


# ---- the step ------------------------------------------------------------------------------------
def poll(
    check: Callable[[], list[Finding]], wait_s: float, sleep: Callable[[float], None], interval_s: float = 10
) -> list[Finding]:
    """Re-run `check` until none of its findings fail or `wait_s` has passed; return the last findings."""
    deadline = time.monotonic() + wait_s
    while True:
        rows = check()
        if all(r.status != "fail" for r in rows) or time.monotonic() >= deadline:
            return rows
        sleep(interval_s)


def head_pod_name(kube: KubeReader, exp: Expectations) -> str:
    pods = kube.list_pods(exp.namespace, f"ray.io/cluster={exp.raycluster},ray.io/node-type=head")
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    if not running:
        raise DriverError(
            f"no running head pod of RayCluster {exp.namespace}/{exp.raycluster}: "
            f"kubectl -n {exp.namespace} get pods -l ray.io/cluster={exp.raycluster}"
        )
    return _name(running[0])


def verify_cluster(
    kube: KubeReader,
    exp: Expectations,
    pod_exec: PodExec | None,
    node_wait_s: float = 180,
    pod_wait_s: float = 900,
    sleep: Callable[[float], None] = time.sleep,
    on_progress: Callable[[str], None] = lambda s: None,
) -> StepResult:
    """Check nodes (fail fast), then wait for add-ons, the RayCluster and its workers, then Ray's GPUs."""
    on_progress("GPU nodes: count, AZ, GPU and EFA allocatable")
    node_rows = poll(lambda: check_nodes(kube.list_nodes(GPU_NODE_SELECTOR), exp), node_wait_s, sleep)
    if any(r.status == "fail" for r in node_rows):
        return verdict("verify", node_rows, exp)

    on_progress("device plugins, KubeRay operator, RayCluster")
    addon_rows = poll(
        lambda: [
            *check_device_plugins(kube.list_daemonsets(), exp.node_count),
            check_operator(kube.list_deployments()),
            *check_raycluster(kube.get_raycluster(exp.namespace, exp.raycluster), exp),
        ],
        pod_wait_s,
        sleep,
    )
    rows = node_rows + addon_rows
    if any(r.status == "fail" for r in addon_rows):
        return verdict("verify", rows, exp)

    on_progress("Ray worker pods")
    selector = f"ray.io/cluster={exp.raycluster},ray.io/node-type=worker"
    pod_rows = poll(lambda: check_worker_pods(kube.list_pods(exp.namespace, selector), exp), pod_wait_s, sleep)
    rows += pod_rows
    if any(r.status == "fail" for r in pod_rows) or pod_exec is None:
        return verdict("verify", rows, exp)

    on_progress("GPUs Ray advertises")
    head = head_pod_name(kube, exp)
    res = pod_exec(head, exp.namespace, ["python", "-c", RAY_RESOURCES_SNIPPET], timeout_s=120)
    try:
        resources = parse_ray_resources(res.stdout)
    except ValueError as e:
        rows.append(
            Finding(
                "Ray GPUs == Kubernetes GPU requests",
                "fail",
                f"cannot read Ray's resources in {head} (rc {res.rc}): {e} {res.stderr[-300:]}",
                f"kubectl -n {exp.namespace} exec {head} -- ray status",
            )
        )
        return verdict("verify", rows, exp)
    rows.append(check_ray_gpus(resources, kube.list_pods(exp.namespace, selector)))
    return verdict(
        "verify",
        rows,
        exp,
        ok_summary=f"{exp.node_count} GPU nodes in {exp.gpu_az}, RayCluster {exp.raycluster} provisioned",
    )


def run(target: Target, prior: Prior) -> StepResult:
    """verify: the target's cluster is what it promised (on AWS `verify_cluster`; locally Ray's resources)."""
    return target.verify(prior)
