"""automation/steps/verify.py: its check functions on hand-made Kubernetes objects, its flow on an in-memory
cluster (polling, the order of its phases, early stops), and `verify_cluster` against recorded API objects read
through the real kubernetes client (tests/fixtures/k8s/, tests/support/_driver_helpers.py).

Hand-made objects carry only the fields verify reads, in the Kubernetes API's shapes
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus,
.../deployment-v1/#DeploymentStatus, .../pod-v1/#PodStatus) and KubeRay's RayCluster status conditions. The pods
answer typed requests (tests/support/_pod_requests.py): verify's fi_info check in a worker, Ray's resources
in the head.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field, replace

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import _worlds as worlds
import pytest
from _pod_requests import PodAction, PodRequest, pod_request

from automation.errors import DriverError
from automation.kube import ExecResult, KubeApi, RayClusterPods
from automation.pipeline import Expectations, Finding
from automation.ray_head import RESOURCES_MARK, parse_ray_resources
from automation.steps.verify import (
    check_nodes,
    check_operator,
    check_ray_gpus,
    check_raycluster,
    check_worker_pods,
    poll,
    verify_cluster,
)

EXP = Expectations(
    node_count=2,
    gpu_az="us-west-2a",
    gpus_per_node=4,
    efa_per_node=1,
    namespace="ray",
    raycluster="ray-efa",
    worker_replicas=2,
)
EXP_RC = replace(EXP, raycluster="rc")  # the hand-made objects' RayCluster
EXP_ONE_NODE = replace(EXP_RC, node_count=1, worker_replicas=1)  # the in-memory cluster
GPU_NODE = "ip-10-30-1-17.us-west-2.compute.internal"
GPU = "nvidia.com/gpu"


@dataclass
class FakePods:
    """The Ray pods as verify execs into them: a worker answers the fi_info check with `fi_info`, the head
    answers Ray's resources with `ray`; every exec is recorded as (pod, namespace, request, timeout_s)."""

    ray: ExecResult
    fi_info: ExecResult = field(default_factory=helpers.fi_info_answer)
    calls: list[tuple[str, str, PodRequest, float]] = field(default_factory=list)

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600) -> ExecResult:
        request = pod_request(list(command))
        assert request is not None, f"verify sent a command no pod knows: {command}"
        self.calls.append((pod, namespace, request, timeout_s))
        return {PodAction.FI_INFO: self.fi_info, PodAction.RAY_RESOURCES: self.ray}[request.action]

    def asked(self, action: PodAction) -> list[str]:
        """The pods asked for `action`, in order."""
        return [pod for pod, _, request, _ in self.calls if request.action is action]


def ray_says(gpus: float, fi_info: ExecResult | None = None) -> FakePods:
    """Pods whose Ray advertises `gpus` GPUs (and 82 CPUs); the workers answer `fi_info` (default: EFA's RDM)."""
    ray = ExecResult(0, f"{RESOURCES_MARK}{json.dumps({'CPU': 82.0, 'GPU': gpus})}\n", "")
    return FakePods(ray, fi_info or helpers.fi_info_answer())


def run_verify(objects, pod_exec=None):
    with helpers.FakeKubeApi(objects) as api:
        kube = KubeApi(api.kubeconfig())
        return verify_cluster(kube, EXP, pod_exec or ray_says(8), node_wait_s=0, pod_wait_s=0, sleep=lambda s: None)


def failing(result):
    return {f.check: f.detail for f in result.findings if f.status == "fail"}


def node(objects, name=GPU_NODE):
    return next(n for n in objects["nodes"]["items"] if n["metadata"]["name"] == name)


# =========================================================================== check functions, hand-made objects


def deployment(name: str, available: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "kuberay-system"},
        "status": {"conditions": [{"type": "Available", "status": available}]},
    }


def pod(name: str, requests: dict | None, limits: dict | None, ready: str = "True", phase: str = "Running") -> dict:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "ray-worker", "resources": resources}]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready}],
        },
    }


WORKER = {"cpu": "40", "memory": "160Gi", GPU: "4"}

# --------------------------------------------------------------------------- KubeRay operator


def test_missing_operator_fails_naming_the_chart():
    row = check_operator([deployment("coredns", "True")])
    got = (row.check, row.status, row.fix)
    expected = ("KubeRay operator", "fail", "install the kuberay-operator chart: run `up` again")
    assert got == expected, f"expected {expected}, got {got}"


def test_unavailable_operator_fails_pointing_at_its_logs():
    row = check_operator([deployment("coredns", "True"), deployment("kuberay-operator", "False")])
    got = (row.status, row.detail, row.fix)
    expected = (
        "fail",
        "deployment kuberay-system/kuberay-operator Available=False",
        "kubectl -n kuberay-system logs deploy/kuberay-operator",
    )
    assert got == expected, f"expected {expected}, got {got}"


def test_available_operator_passes_with_no_fix():
    row = check_operator([deployment("kuberay-operator", "True")])
    assert (row.status, row.fix) == ("pass", ""), f"expected ('pass', ''), got {(row.status, row.fix)}"


# --------------------------------------------------------------------------- RayCluster


def test_raycluster_without_status_fails_both_conditions_as_absent():
    rows = check_raycluster({}, EXP_RC)
    got = [(r.status, r.detail) for r in rows]
    expected = [("fail", "ray/rc: HeadPodReady=absent"), ("fail", "ray/rc: RayClusterProvisioned=absent")]
    assert got == expected, f"expected {expected}, got {got}"


def test_false_raycluster_condition_shows_reason_and_message_and_the_fix():
    conds = [
        {"type": "HeadPodReady", "status": "True"},
        {"type": "RayClusterProvisioned", "status": "False", "reason": "PodsPending", "message": "2 pods pending"},
    ]
    rows = check_raycluster({"status": {"conditions": conds}}, EXP_RC)
    got = [(r.status, r.detail, r.fix) for r in rows]
    expected = [
        ("pass", "ray/rc: HeadPodReady=True", ""),
        (
            "fail",
            "ray/rc: RayClusterProvisioned=False (PodsPending: 2 pods pending)",
            "kubectl -n ray describe raycluster rc; kubectl -n ray get pods",
        ),
    ]
    assert got == expected, f"expected {expected}, got {got}"


# --------------------------------------------------------------------------- worker pods


def test_running_pod_that_is_not_ready_does_not_count():
    rows = check_worker_pods([pod("w0", WORKER, WORKER), pod("w1", WORKER, WORKER, ready="False")], EXP_RC)
    got = (rows[0].status, rows[0].detail, rows[0].fix)
    expected = (
        "fail",
        "expected 2 Ready worker pods, got 1 of 2",
        "kubectl -n ray get pods -l ray.io/node-type=worker -o wide",
    )
    assert got == expected, f"expected {expected}, got {got}"


def test_enough_ready_pods_pass_with_no_fix():
    rows = check_worker_pods([pod("w0", WORKER, WORKER), pod("w1", WORKER, WORKER)], EXP_RC)
    got = [(r.status, r.fix) for r in rows]
    assert got == [("pass", "")] * 3, f"expected three pass rows with no fix, got {got}"


def test_a_request_without_its_limit_fails_naming_the_key():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "40"})], EXP_RC)[1]
    expected = (
        "fail",
        f"{GPU}: request 4 limit -",
        "set the worker group's requests equal to its limits (Guaranteed QoS)",
    )
    got = (row.status, row.detail, row.fix)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_limit_without_its_request_fails_naming_the_key():
    row = check_worker_pods([pod("w0", {"cpu": "40"}, {"cpu": "40", GPU: "4"})], EXP_RC)[1]
    assert (row.status, row.detail) == ("fail", f"{GPU}: request - limit 4"), f"got {row}"


def test_pod_without_requests_or_limits_fails_saying_so():
    row = check_worker_pods([pod("w0", None, None)], EXP_RC)[1]
    expected = (
        "fail",
        "no requests or limits set",
        "set the worker group's requests equal to its limits (Guaranteed QoS)",
    )
    got = (row.status, row.detail, row.fix)
    assert got == expected, f"expected {expected}, got {got}"


def test_equal_requests_and_limits_list_them_in_the_detail():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "40", GPU: "4"})], EXP_RC)[1]
    got = (row.status, row.detail)
    assert got == ("pass", f"cpu=40, {GPU}=4"), f"expected ('pass', 'cpu=40, {GPU}=4'), got {got}"


@pytest.mark.parametrize(
    "obj", [{"metadata": {"name": "w0"}}, {"metadata": {"name": "w0"}, "spec": {"containers": [{}]}}]
)
def test_pod_without_spec_or_resources_fails_instead_of_crashing(obj):
    rows = check_worker_pods([obj], EXP_RC)
    assert [r.status for r in rows] == ["fail", "fail"], f"expected two fail rows, got {rows}"


# --------------------------------------------------------------------------- Ray's GPUs


def test_gpus_are_counted_from_requests_and_missing_ones_count_zero():
    pods = [pod("w0", {GPU: "2"}, {GPU: "4"}), pod("w1", {"cpu": "1"}, {"cpu": "1"})]
    row = check_ray_gpus({"GPU": 2.0}, pods)
    assert row.status == "pass", f"expected Ray's 2 GPUs to match the 2 requested (requests, not limits), got {row}"


def test_ray_without_gpus_fails_against_requested_gpus():
    row = check_ray_gpus({"CPU": 82.0}, [pod("w0", {GPU: "1"}, {GPU: "1"})])
    expected = ("fail", "set the worker group's rayStartParams num-gpus to its nvidia.com/gpu limit")
    assert (row.status, row.fix) == expected, f"expected {expected}, got {(row.status, row.fix)}"


def test_zero_gpus_on_both_sides_fails():
    row = check_ray_gpus({"CPU": 82.0, "GPU": 0.0}, [pod("w0", {"cpu": "1"}, {"cpu": "1"})])
    assert row.status == "fail", f"expected no GPUs anywhere to fail, got {row}"


def test_one_gpu_on_both_sides_passes_with_no_fix():
    row = check_ray_gpus({"GPU": 1.0}, [pod("w0", {GPU: "1"}, {GPU: "1"})])
    assert (row.status, row.fix) == ("pass", ""), f"expected ('pass', ''), got {(row.status, row.fix)}"


def test_missing_resources_line_error_quotes_the_last_300_characters():
    output = "@" + "b" * 300
    with pytest.raises(ValueError) as err:
        parse_ray_resources(output)
    text = str(err.value)
    assert "'RAY_CLUSTER_RESOURCES'" in text and repr("b" * 300) in text and "@" not in text, (
        f"expected the marker and exactly the last 300 characters quoted, got {text!r}"
    )


# --------------------------------------------------------------------------- head pod


class Pods:
    def __init__(self, pods: list[dict]):
        self.pods = pods
        self.calls: list = []

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        self.calls.append((namespace, label_selector))
        return self.pods


def test_head_pod_is_looked_up_by_kuberay_labels():
    kube = Pods([{"metadata": {"name": "rc-head-x"}, "status": {"phase": "Running"}}])
    name = RayClusterPods(kube, EXP_RC.namespace, EXP_RC.raycluster).head_pod()
    got = (name, kube.calls)
    expected = ("rc-head-x", [("ray", "ray.io/cluster=rc,ray.io/node-type=head")])
    assert got == expected, f"expected {expected}, got {got}"


def test_no_running_head_pod_is_a_driver_error_with_the_command():
    kube = Pods([{"metadata": {"name": "rc-head-x"}}])
    with pytest.raises(DriverError, match=r"no running head pod of RayCluster ray/rc: kubectl -n ray get pods"):
        RayClusterPods(kube, EXP_RC.namespace, EXP_RC.raycluster).head_pod()


# --------------------------------------------------------------------------- nodes and row wording


def test_bare_node_fails_on_every_fact_with_each_fix():
    rows = check_nodes([{"metadata": {"name": "n1"}}], replace(EXP_RC, node_count=1))
    row = rows[1]
    expected_detail = (
        "zone <none>, NotReady, nvidia.com/gpu 0, vpc.amazonaws.com/efa 0; not Ready; "
        "zone <none> is not the GPU AZ us-west-2a; expected nvidia.com/gpu 4, got 0; "
        "expected vpc.amazonaws.com/efa >= 1, got 0"
    )
    assert (row.check, row.status, row.detail) == ("node n1", "fail", expected_detail), f"got {row}"
    expected_fix = (
        "kubectl describe node n1; "
        "give the GPU node group only the subnet of gpu_nodes.availability_zone and run `up` again; "
        "check the NVIDIA device plugin pod on n1 (kubectl -n kube-system get pods -o wide | grep nvidia); "
        "check the EFA device plugin pod on n1 (kubectl -n kube-system get pods -o wide | grep efa) "
        "and that the launch template attaches EFA interfaces"
    )
    assert row.fix == expected_fix, f"expected {expected_fix!r}, got {row.fix!r}"


def test_healthy_node_row_says_ready_with_no_fix():
    labels = {"topology.kubernetes.io/zone": "us-west-2a"}
    status = {
        "conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {GPU: "4", "vpc.amazonaws.com/efa": "1"},
    }
    rows = check_nodes([{"metadata": {"name": "n1", "labels": labels}, "status": status}], EXP_ONE_NODE)
    got = [(r.check, r.status, r.detail, r.fix) for r in rows]
    expected = [
        ("GPU nodes Ready", "pass", "expected 1 nodes labelled role=gpu-worker, got 1 (1 Ready)", ""),
        ("node n1", "pass", "zone us-west-2a, Ready, nvidia.com/gpu 4, vpc.amazonaws.com/efa 1", ""),
    ]
    assert got == expected, f"expected {expected}, got {got}"


def test_one_not_ready_node_fails_its_own_row_and_not_the_count_row():
    nodes = [
        {"metadata": {"name": f"n{i}"}, "status": {"conditions": [{"type": "Ready", "status": s}]}}
        for i, s in enumerate(("True", "False"))
    ]
    rows = check_nodes(nodes, EXP_RC)
    got = [(r.check, r.status, "not Ready" in r.detail) for r in rows]
    expected = [("GPU nodes Ready", "pass", False), ("node n0", "fail", False), ("node n1", "fail", True)]
    assert got == expected, f"expected {expected} (n0 fails on its zone and devices only), got {got}"


def test_too_few_nodes_fails_the_count_row_first_with_the_scaling_activity_command():
    row = check_nodes([{"metadata": {"name": "n0"}}], EXP_RC)[0]
    assert (row.check, row.status) == ("GPU nodes Ready", "fail"), f"expected the count row first and failing: {row}"
    expected_fix = (
        "kubectl get nodes -l role=gpu-worker; the node group's last scaling activity: "
        "aws autoscaling describe-scaling-activities --auto-scaling-group-name <asg> --max-items 1"
    )
    assert row.fix == expected_fix, f"expected {expected_fix!r}, got {row.fix!r}"


def test_available_operator_row_is_named():
    row = check_operator([deployment("kuberay-operator", "True")])
    assert row.check == "KubeRay operator", f"expected the row 'KubeRay operator', got {row.check!r}"


def test_worker_pod_count_row_is_named_and_pods_without_a_name_show_a_question_mark():
    rows = check_worker_pods(
        [{"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}], EXP_RC
    )
    got = [r.check for r in rows]
    assert got == ["Ray worker pods Running", "pod ? requests == limits"], f"got {got}"


def test_every_request_limit_difference_is_listed():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "20", GPU: "2"})], EXP_RC)[1]
    expected = f"cpu: request 40 limit 20; {GPU}: request 4 limit 2"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"


# =========================================================================== the flow, an in-memory cluster
READY = [{"type": "Ready", "status": "True"}]
# The node monitoring agent's GPU condition on a healthy NVIDIA node (tests/fixtures/k8s/README.md, nodes.json).
GPU_HEALTHY = {"type": "AcceleratedHardwareReady", "status": "True", "reason": "NvidiaGPUIsReady"}


def healthy_node() -> dict:
    return {
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "us-west-2a"}},
        "status": {"conditions": [*READY, GPU_HEALTHY], "allocatable": {GPU: "4", "vpc.amazonaws.com/efa": "1"}},
    }


class Cluster(KubeApi):
    """A healthy one-node cluster, overriding what verify reads of KubeApi; `broken` names the reads that fail
    once before they succeed."""

    def __init__(self, broken: tuple[str, ...] = ()):
        self.broken = set(broken)

    def _once(self, what: str) -> bool:
        if what in self.broken:
            self.broken.discard(what)
            return True
        return False

    def list_nodes(self, label_selector: str = "") -> list[dict]:
        return [] if self._once("nodes") else [healthy_node()]

    def list_daemonsets(self) -> list[dict]:
        ready = 0 if self._once("daemonsets") else 1
        status = {"desiredNumberScheduled": 1, "numberReady": ready}
        return [
            {"metadata": {"name": n, "namespace": "kube-system"}, "status": status}
            for n in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")
        ]

    def list_deployments(self) -> list[dict]:
        return [
            {
                "metadata": {"name": "kuberay-operator"},
                "status": {"conditions": [{"type": "Available", "status": "True"}]},
            }
        ]

    def get_raycluster(self, namespace: str, name: str) -> dict:
        conds = [{"type": t, "status": "True"} for t in ("HeadPodReady", "RayClusterProvisioned")]
        return {"status": {"conditions": conds}}

    def list_events(self, namespace: str) -> list[dict]:
        return []

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        if label_selector == "app.kubernetes.io/name=eks-node-monitoring-agent" and namespace == "kube-system":
            agent = {"metadata": {"name": "eks-node-monitoring-agent-k7m2p"}, "spec": {"nodeName": "n1"}}
            return [{**agent, "status": {"phase": "Running", "conditions": READY}}]
        if "node-type=head" in label_selector:
            return [{"metadata": {"name": "rc-head"}, "status": {"phase": "Running"}}]
        res = {"cpu": "1", GPU: "4"}
        phase = "Pending" if self._once("pods") else "Running"
        pod = {"spec": {"containers": [{"resources": {"requests": res, "limits": res}}]}}
        return [{"metadata": {"name": "w0"}, **pod, "status": {"phase": phase, "conditions": READY}}]

    def pod_log(self, namespace: str, name: str, container: str, tail_lines: int = 1) -> str:
        # read only for a container that has started and stopped (diagnose's crash row); none here has
        raise AssertionError(f"verify read the log of {namespace}/{name} container {container}")


def ray_has(gpus: float) -> FakePods:
    """The head answers Ray's resources (`gpus` GPUs); a worker answers verify's fi_info script with EFA's RDM."""
    return FakePods(ExecResult(0, f'{RESOURCES_MARK}{{"GPU": {gpus}}}\n', ""))


def verify_in_memory(cluster: Cluster, pod_exec=None, sleeps: list | None = None, progress: list | None = None):
    return verify_cluster(
        cluster,
        EXP_ONE_NODE,
        pod_exec,
        node_wait_s=60,
        pod_wait_s=60,
        sleep=(sleeps if sleeps is not None else []).append,
        on_progress=(progress if progress is not None else []).append,
    )


def test_each_phase_polls_with_the_given_sleep_until_it_passes():
    sleeps = []
    result = verify_in_memory(Cluster(broken=("nodes", "daemonsets", "pods")), ray_has(4), sleeps=sleeps)
    assert (result.status, sleeps) == ("pass", [10, 10, 10]), (
        f"expected pass after 3 sleeps of 10 s, got {result.status}, {sleeps}"
    )


def test_progress_names_each_phase_in_order():
    progress = []
    verify_in_memory(Cluster(), ray_has(4), progress=progress)
    expected = [
        "GPU nodes: count, AZ, GPU and EFA allocatable",
        "device plugins, node monitoring agent, KubeRay operator, huge pages",
        "RayCluster and its worker pods",
        "EFA inside the worker pods, GPUs Ray advertises",
    ]
    assert progress == expected, f"expected {expected}, got {progress}"


def test_without_pod_exec_verify_stops_after_the_worker_pods():
    result = verify_in_memory(Cluster())
    checks = [f.check for f in result.findings]
    assert result.status == "pass" and "Ray GPUs == Kubernetes GPU requests" not in checks, (
        f"expected a pass without the Ray GPU row, got {result.status}, {checks}"
    )


def test_result_is_the_verify_step_carrying_the_expectations():
    for cluster, pod_exec in ((Cluster(), ray_has(4)), (Cluster(), ray_has(1)), (Cluster(), None)):
        result = verify_in_memory(cluster, pod_exec)
        got = (result.step, result.data)
        assert got == ("verify", EXP_ONE_NODE), f"expected ('verify', {EXP_ONE_NODE}), got {got}"


def test_node_failure_returns_the_verify_step_with_expectations():
    result = verify_cluster(Cluster(broken=("nodes",)), EXP_ONE_NODE, None, node_wait_s=0, sleep=lambda s: None)
    assert (result.step, result.status, result.data) == ("verify", "fail", EXP_ONE_NODE), f"got {result}"


def test_addon_failure_returns_the_verify_step_with_expectations():
    result = verify_cluster(Cluster(broken=("daemonsets",)), EXP_ONE_NODE, None, pod_wait_s=0, sleep=lambda s: None)
    assert (result.step, result.status, result.data) == ("verify", "fail", EXP_ONE_NODE), f"got {result}"


def test_failing_worker_pods_keep_the_node_and_addon_rows():
    result = verify_cluster(Cluster(broken=("pods",)), EXP_ONE_NODE, None, pod_wait_s=0, sleep=lambda s: None)
    checks = [f.check for f in result.findings]
    assert result.status == "fail" and checks[0] == "GPU nodes Ready" and "KubeRay operator" in checks, (
        f"expected a fail listing the node and add-on rows before the pod rows, got {result.status}, {checks}"
    )


# --------------------------------------------------------------------------- poll


def test_poll_gives_up_at_the_deadline_with_the_last_findings():
    calls = []

    def check():
        calls.append(1)
        return [Finding("x", "fail", str(len(calls)))]

    rows = poll(check, wait_s=0, sleep=lambda s: None)
    assert [r.detail for r in rows] == ["1"], f"expected one check and its findings at wait_s=0, got {rows}"


def test_poll_returns_at_once_when_nothing_fails():
    sleeps = []
    rows = poll(lambda: [Finding("x", "pass", "ok"), Finding("y", "skip", "-")], wait_s=60, sleep=sleeps.append)
    assert (len(rows), sleeps) == (2, []), f"expected the 2 findings and no sleep, got {rows}, {sleeps}"


# --------------------------------------------------------------------------- early stops and the exec


def test_addon_failure_stops_before_the_worker_pods():
    result = verify_cluster(Cluster(broken=("daemonsets",)), EXP_ONE_NODE, None, pod_wait_s=0, sleep=lambda s: None)
    checks = [f.check for f in result.findings]
    assert "Ray worker pods Running" not in checks, f"expected no worker-pod rows after an add-on failure, got {checks}"


def test_worker_pod_failure_stops_before_asking_ray():
    pod_exec = ray_has(4)
    verify_cluster(Cluster(broken=("pods",)), EXP_ONE_NODE, pod_exec, pod_wait_s=0, sleep=lambda s: None)
    assert pod_exec.calls == [], f"expected no exec into a pod after a worker-pod failure, got {pod_exec.calls}"


def test_ray_resources_are_read_by_python_in_the_head_pods_namespace():
    pod_exec = ray_has(4)
    verify_in_memory(Cluster(), pod_exec)
    asked = [(p, ns, t > 0) for p, ns, req, t in pod_exec.calls if req.action is PodAction.RAY_RESOURCES]
    assert asked == [("rc-head", "ray", True)], f"expected one read in rc-head in ray, with a timeout; got {asked}"


def test_unreadable_ray_resources_fail_quoting_rc_and_stderr_tail():
    pod_exec = FakePods(ExecResult(1, "Traceback ...", "@" + "e" * 300))
    result = verify_in_memory(Cluster(), pod_exec)
    row = result.findings[-1]
    got = (result.step, result.status, result.data, row.check, row.status, row.fix)
    expected = (
        "verify",
        "fail",
        EXP_ONE_NODE,
        "Ray GPUs == Kubernetes GPU requests",
        "fail",
        "kubectl -n ray exec rc-head -- ray status",
    )
    assert got == expected, f"expected {expected}, got {got}"
    assert row.detail.startswith("cannot read Ray's resources in rc-head (rc 1): no line starting with"), row.detail
    assert row.detail.endswith(" " + "e" * 300) and "@" not in row.detail, (
        f"expected the last 300 stderr chars: {row.detail!r}"
    )
    assert len(result.findings) > 3, f"expected the earlier rows kept, got {result.findings}"


def test_passing_verify_summarises_nodes_az_and_raycluster():
    result = verify_in_memory(Cluster(), ray_has(4))
    expected = "1 GPU nodes in us-west-2a, RayCluster rc provisioned"
    assert (result.status, result.summary) == ("pass", expected), f"expected pass, {expected!r}; got {result}"


# =========================================================================== recorded API objects, the real client


def test_healthy_cluster_passes_every_check():
    result = run_verify(helpers.load_k8s())
    assert result.status == "pass", f"expected pass, got {result.status}: {failing(result)}"


def test_healthy_cluster_shows_the_node_monitoring_agent_on_every_gpu_node():
    row = next(f for f in run_verify(helpers.load_k8s()).findings if f.check == "node monitoring agent")
    expected = ("pass", "Ready on all 2 GPU nodes, each AcceleratedHardwareReady=True")
    assert (row.status, row.detail) == expected, f"expected {expected}, got {row}"


def test_a_gpu_node_whose_agent_crash_loops_is_named():
    objects = helpers.load_k8s()
    worlds.node_agent_crashlooping(objects)
    detail = failing(run_verify(objects)).get("node monitoring agent", "")
    assert detail == f"{GPU_NODE}: no Ready eks-node-monitoring-agent pod", f"got {failing(run_verify(objects))}"


def test_a_gpu_the_agent_reads_as_failed_fails_verify_naming_the_node_and_the_xid():
    objects = helpers.load_k8s()
    worlds.gpu_fallen_off_the_bus(objects)
    rows = failing(run_verify(objects))
    expected = f"{GPU_NODE}: AcceleratedHardwareReady False (NvidiaXID79Error)"
    assert rows.get("node monitoring agent") == expected, f"expected {expected!r}, got {rows}"


def test_node_without_efa_allocatable_fails_with_node_row():
    objects = helpers.load_k8s()
    del node(objects)["status"]["allocatable"]["vpc.amazonaws.com/efa"]
    result = run_verify(objects)
    rows = failing(result)
    assert f"node {GPU_NODE}" in rows, f"expected a failing row for {GPU_NODE}, got {rows}"
    assert "vpc.amazonaws.com/efa >= 1, got 0" in rows[f"node {GPU_NODE}"], rows


def test_missing_efa_fails_before_waiting_on_pods():
    objects = helpers.load_k8s()
    del node(objects)["status"]["allocatable"]["vpc.amazonaws.com/efa"]
    with helpers.FakeKubeApi(objects) as api:
        verify_cluster(KubeApi(api.kubeconfig()), EXP, ray_says(8), node_wait_s=0, pod_wait_s=0, sleep=lambda s: None)
        later = [p for p in api.requests if "/pods" in p or "rayclusters" in p or "daemonsets" in p]
    assert later == [], f"expected no pod/RayCluster/daemonset reads after the node check failed, got {later}"


def test_node_in_another_az_fails():
    objects = helpers.load_k8s()
    node(objects)["metadata"]["labels"]["topology.kubernetes.io/zone"] = "us-west-2b"
    rows = failing(run_verify(objects))
    assert "zone us-west-2b is not the GPU AZ us-west-2a" in rows.get(f"node {GPU_NODE}", ""), rows


def test_gpu_count_mismatch_fails():
    objects = helpers.load_k8s()
    node(objects)["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    rows = failing(run_verify(objects))
    assert "expected nvidia.com/gpu 4, got 2" in rows.get(f"node {GPU_NODE}", ""), rows


def test_wrong_number_of_gpu_nodes_fails():
    objects = helpers.load_k8s()
    objects["nodes"]["items"] = [n for n in objects["nodes"]["items"] if n["metadata"]["name"] != GPU_NODE]
    rows = failing(run_verify(objects))
    assert "expected 2 nodes labelled role=gpu-worker, got 1 (1 Ready)" in rows.get("GPU nodes Ready", ""), rows


def test_raycluster_not_provisioned_fails():
    objects = helpers.load_k8s()
    for c in objects["raycluster"]["status"]["conditions"]:
        if c["type"] == "RayClusterProvisioned":
            c.update(status="False", reason="AllPodRunningAndReadyFirstTime", message="not all pods are ready")
    rows = failing(run_verify(objects))
    assert set(rows) == {"RayCluster RayClusterProvisioned"}, f"expected only RayClusterProvisioned to fail, got {rows}"


def test_device_plugin_not_ready_fails():
    objects = helpers.load_k8s()
    ds = next(d for d in objects["daemonsets"]["items"] if "efa" in d["metadata"]["name"])
    ds["status"]["numberReady"] = 1
    rows = failing(run_verify(objects))
    assert "EFA device plugin" in rows and "1/2 ready" in rows["EFA device plugin"], rows


def test_worker_requests_not_equal_to_limits_fail():
    objects = helpers.load_k8s()
    worker = next(p for p in objects["pods"]["items"] if p["metadata"]["labels"].get("ray.io/node-type") == "worker")
    worker["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "30"
    rows = failing(run_verify(objects))
    key = f"pod {worker['metadata']['name']} requests == limits"
    assert "cpu: request 30 limit 40" in rows.get(key, ""), rows


def test_ray_gpus_differing_from_kubernetes_requests_fail():
    rows = failing(run_verify(helpers.load_k8s(), pod_exec=ray_says(4)))
    assert (
        rows.get("Ray GPUs == Kubernetes GPU requests") == "Ray advertises GPU 4, worker pods request nvidia.com/gpu 8"
    ), rows


def test_ray_resources_are_read_in_the_head_pod():
    pod_exec = ray_says(8)
    run_verify(helpers.load_k8s(), pod_exec)
    pods = pod_exec.asked(PodAction.RAY_RESOURCES)
    assert pods == ["ray-efa-head-9xk2q"], f"expected one exec of Ray's resources, in the head pod, got {pods}"


def test_unreachable_cluster_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again on exit: nothing listens there
    kube = KubeApi(helpers.kubeconfig_for(f"http://127.0.0.1:{port}"))
    with pytest.raises(DriverError) as err:
        kube.list_nodes("role=gpu-worker")
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in str(err.value), str(err.value)


# --------------------------------------------------------------------------- DaemonSets by where they run


def test_mps_control_daemon_that_targets_no_gpu_node_is_listed_not_failed():
    result = run_verify(helpers.load_k8s())
    rows = {f.check: (f.status, f.detail) for f in result.findings}
    status, detail = rows.get("daemonset nvidia-device-plugin-mps-control-daemon", ("absent", ""))
    assert (result.status, status) == ("pass", "skip"), f"expected a pass listing the MPS daemon as skipped: {rows}"
    assert "targets none of the 2 GPU nodes" in detail, detail


def test_device_plugin_whose_selector_misses_the_gpu_nodes_fails():
    objects = helpers.load_k8s()
    worlds.daemonset(objects, "nvidia-device-plugin")["spec"]["template"]["spec"]["nodeSelector"] = {"role": "system"}
    rows = failing(run_verify(objects))
    expected = "no daemonset named like 'nvidia-device-plugin' targets all 2 GPU nodes"
    assert rows.get("NVIDIA device plugin") == expected, f"expected {expected!r}, got {rows}"


# --------------------------------------------------------------------------- huge pages, EFA in the pods


def test_gpu_nodes_short_of_huge_pages_fail_before_waiting_on_pods():
    objects = helpers.load_k8s()
    worlds.hugepages_short(objects)
    with helpers.FakeKubeApi(objects) as api:
        result = verify_cluster(
            KubeApi(api.kubeconfig()), EXP, ray_says(8), node_wait_s=0, pod_wait_s=900, sleep=lambda s: 1 / 0
        )
        pod_reads = [p for p in api.requests if f"/namespaces/{EXP.namespace}/pods" in p]  # the Ray pods
    rows = failing(result)
    assert list(rows) == ["GPU nodes hugepages-2Mi"] and pod_reads == [], f"got {rows}, pod reads {pod_reads}"
    assert f"{worlds.GPU_NODE} has 0Mi" in rows["GPU nodes hugepages-2Mi"], rows


def test_efa_is_checked_with_fi_info_in_one_worker_pod_per_gpu_node():
    pod_exec = ray_says(8)
    run_verify(helpers.load_k8s(), pod_exec)
    got = sorted(pod_exec.asked(PodAction.FI_INFO))
    expected = ["ray-efa-gpu-workers-worker-4kq7d", "ray-efa-gpu-workers-worker-tz8mb"]
    assert got == expected, f"expected fi_info in {expected}, got {got}"


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (helpers.fi_info_answer(devices=False, fixture="fi_info_no_provider.txt"), "no EFA device in the pod"),
        (helpers.fi_info_answer(fixture=None), "fi_info is not in the image"),
        (helpers.fi_info_answer(fixture="fi_info_no_provider.txt"), "efa provider offers no FI_EP_RDM endpoint"),
    ],
    ids=["no-device", "no-fi_info", "no-provider"],
)
def test_missing_efa_rdm_endpoint_fails_naming_the_cause_before_ray_is_asked(answer, cause):
    pod_exec = ray_says(8, fi_info=answer)
    result = run_verify(helpers.load_k8s(), pod_exec)
    rows = failing(result)
    asked_ray = pod_exec.asked(PodAction.RAY_RESOURCES)
    assert rows and all(cause in d for d in rows.values()) and not asked_ray, f"expected {cause!r} only: {rows}"


# --------------------------------------------------------------------------- Pending workers say why


def verify_until_first_sleep(objects, on_sleep=lambda: 1 / 0):
    """verify with 900 s to wait; the first sleep calls `on_sleep` (by default: fail, it should not wait)."""
    with helpers.FakeKubeApi(objects) as api:
        return verify_cluster(
            KubeApi(api.kubeconfig()), EXP, ray_says(8), node_wait_s=0, pod_wait_s=900, sleep=lambda s: on_sleep()
        )


@pytest.mark.parametrize(
    ("world", "cause"), [("efa", "Insufficient vpc.amazonaws.com/efa"), ("gpus", "Insufficient nvidia.com/gpu")]
)
def test_unschedulable_workers_fail_at_once_with_the_cause(world, cause):
    objects = helpers.load_k8s()
    worlds.WORLDS[world](objects)
    rows = failing(verify_until_first_sleep(objects))
    assert list(rows) == ["Ray worker pods cannot start"], f"expected one finding, got {rows}"
    assert f"is Pending: {cause} (scheduler:" in rows["Ray worker pods cannot start"], rows


def test_image_pull_backoff_fails_at_once_naming_the_image():
    objects = helpers.load_k8s()
    worlds.image_pull_failing(objects)
    rows = failing(verify_until_first_sleep(objects))
    detail = rows.get("Ray worker pods cannot start", "")
    assert "cannot pull image public.ecr.aws/deep-learning-containers/ray:no-such-tag" in detail, rows


def test_a_worker_stuck_at_init_image_pull_back_off_is_named_with_cause_and_fix():
    objects = helpers.load_k8s()
    worlds.image_pull_failing(objects)
    result = verify_until_first_sleep(objects)
    row = next(f for f in result.findings if f.status == "fail")
    pod = worlds.workers(objects)[0]["metadata"]["name"]
    assert f"pod {pod} is stuck at Init:ImagePullBackOff: init container wait-gcs-ready" in row.detail, row
    assert "rayImage" in row.fix, row.fix


def test_init_image_pull_back_off_is_named_within_one_poll_of_its_first_event():
    """First poll: ErrImagePull (may pass); the kubelet then backs off, and the next poll names it."""
    objects = helpers.load_k8s()
    worlds.image_pull_failing(objects, reason="ErrImagePull")
    polls = []

    def kubelet_backs_off():
        polls.append(1)
        if len(polls) > 1:
            raise AssertionError("verify polled again after the back-off was visible")
        worlds.image_pull_failing(objects, reason="ImagePullBackOff")

    rows = failing(verify_until_first_sleep(objects, on_sleep=kubelet_backs_off))
    assert (len(polls), "Init:ImagePullBackOff" in rows.get("Ray worker pods cannot start", "")) == (1, True), rows


def test_workers_that_cannot_reach_the_gcs_are_named_once_wait_gcs_ready_says_still_waiting():
    objects = helpers.load_k8s()
    worlds.gcs_unreachable(objects)
    rows = failing(verify_until_first_sleep(objects))
    detail = rows.get("Ray worker pods cannot start", "")
    assert "cannot reach the Ray head's GCS" in detail and "Still waiting for GCS" in detail, rows


def test_wait_gcs_ready_in_its_first_two_minutes_is_waited_out():
    """KubeRay's loop says "Waiting for GCS" for 120 s, while a head that is starting may still come up."""
    objects = helpers.load_k8s()
    healthy = helpers.load_k8s()
    worlds.gcs_unreachable(objects)
    for key in objects["logs"]:
        objects["logs"][key] = "".join(worlds.GCS_WAIT_LOG.splitlines(keepends=True)[:10])
    result, waits = healed_after_one_wait(objects, healthy)
    assert (result.status, waits) == ("pass", 1), f"expected a pass after one wait: {failing(result)}"


def test_insufficient_gpu_event_is_waited_out_while_the_nodes_can_hold_the_pod():
    """A node that just joined: the event says Insufficient nvidia.com/gpu, its allocatable already has them."""
    objects = helpers.load_k8s()
    healthy = helpers.load_k8s()
    worlds.workers_unschedulable(objects, "nvidia.com/gpu", "4")  # the request the nodes do hold
    result, waits = healed_after_one_wait(objects, healthy)
    assert (result.status, waits) == ("pass", 1), f"expected a pass after one wait: {failing(result)}, {waits}"


def healed_after_one_wait(objects: dict, healthy: dict):
    """verify over ``objects``, which become ``healthy`` at its first wait: (its result, how many waits)."""
    sleeps = []

    def heals():
        sleeps.append(1)
        objects.update(healthy)

    return verify_until_first_sleep(objects, on_sleep=heals), len(sleeps)


def test_huge_page_check_is_skipped_when_the_workers_request_none():
    objects = helpers.load_k8s()
    worlds.hugepages_short(objects)
    objects = {**objects, "pods": helpers.load_k8s()["pods"], "raycluster": helpers.load_k8s()["raycluster"]}
    group = objects["raycluster"]["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    for res in [group, *(p["spec"]["containers"][0]["resources"] for p in worlds.workers(objects))]:
        res["requests"].pop("hugepages-2Mi")
        res["limits"].pop("hugepages-2Mi")
    result = run_verify(objects)
    rows = {f.check: f.status for f in result.findings}
    assert (result.status, rows.get("GPU nodes hugepages-2Mi")) == ("pass", "skip"), f"got {result.status}: {rows}"


# --------------------------------------------------------------------------- a Pending head says why


@pytest.mark.parametrize(
    ("world", "cause", "fix"),
    [
        ("head-image-pull", "cannot pull image public.ecr.aws/deep-learning-containers/ray:no-such-tag", "rayImage"),
        ("head-node-selector", "no node of 3 matches role=system-nodes", "role=system"),
    ],
)
def test_pending_head_fails_at_once_with_its_cause_and_fix(world, cause, fix):
    objects = helpers.load_k8s()
    worlds.WORLDS[world](objects)
    result = verify_until_first_sleep(objects)
    failed = [f for f in result.findings if f.status == "fail"]
    assert [f.check for f in failed] == ["Ray head pod cannot start"], f"expected the head's one finding: {failed}"
    assert cause in failed[0].detail and fix in failed[0].fix, f"expected {cause!r} / {fix!r}: {failed[0]}"


def test_head_pending_on_a_full_system_node_is_waited_out_while_its_allocatable_holds_the_head():
    """The scheduler says Insufficient cpu on the system node, but its allocatable holds the head's request:
    other pods fill it, which the node object cannot show, so verify waits (to its timeout) instead of guessing."""
    objects = helpers.load_k8s()
    healthy = helpers.load_k8s()
    message = (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {nvidia.com/gpu: true}. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not "
        "helpful for scheduling."
    )
    worlds._pending(worlds.head(objects), message)
    worlds._event(objects, worlds.head(objects), message)
    worlds._head_not_ready(objects)
    sleeps = []

    def head_scheduled():
        sleeps.append(1)
        objects.update(healthy)

    result = verify_until_first_sleep(objects, on_sleep=head_scheduled)
    assert (result.status, len(sleeps)) == ("pass", 1), f"expected a pass after one wait: {failing(result)}, {sleeps}"
