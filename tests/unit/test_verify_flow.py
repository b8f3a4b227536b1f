"""verify's flow on an in-memory cluster: polling, the order of its phases, what it reports and returns,
and the expectations it derives from the stack. Found untested by mutation testing (TESTING.md)."""

from __future__ import annotations

from types import SimpleNamespace

from automation.kube import ExecResult
from automation.pipeline import Expectations, Finding, expectations_from
from automation.ray_head import RESOURCES_MARK
from automation.steps.verify import poll, verify_cluster

EXP = Expectations(
    node_count=1,
    gpu_az="us-west-2a",
    gpus_per_node=4,
    efa_per_node=1,
    namespace="ray",
    raycluster="rc",
    worker_replicas=1,
)
READY = [{"type": "Ready", "status": "True"}]
GPU = "nvidia.com/gpu"


def node() -> dict:
    return {
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "us-west-2a"}},
        "status": {"conditions": READY, "allocatable": {GPU: "4", "vpc.amazonaws.com/efa": "1"}},
    }


class Cluster:
    """A healthy one-node cluster; `broken` names the reads that fail once before they succeed."""

    def __init__(self, broken: tuple[str, ...] = ()):
        self.broken = set(broken)

    def _once(self, what: str) -> bool:
        if what in self.broken:
            self.broken.discard(what)
            return True
        return False

    def list_nodes(self, label_selector: str = "") -> list[dict]:
        return [] if self._once("nodes") else [node()]

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
        if "node-type=head" in label_selector:
            return [{"metadata": {"name": "rc-head"}, "status": {"phase": "Running"}}]
        res = {"cpu": "1", GPU: "4"}
        phase = "Pending" if self._once("pods") else "Running"
        pod = {"spec": {"containers": [{"resources": {"requests": res, "limits": res}}]}}
        return [{"metadata": {"name": "w0"}, **pod, "status": {"phase": phase, "conditions": READY}}]


FI_INFO_RDM = ExecResult(0, "EFA_DEVICES present\nprovider: efa\n    type: FI_EP_RDM\nFI_INFO_RC 0\n", "")


def ray_has(gpus: float):
    """The head answers Ray's resources; a worker answers verify's fi_info script with an RDM endpoint."""

    def answer(pod, ns, cmd, timeout_s):
        if "fi_info" in " ".join(cmd):
            return FI_INFO_RDM
        return ExecResult(0, f'{RESOURCES_MARK}{{"GPU": {gpus}}}\n', "")

    return answer


def run(cluster: Cluster, pod_exec=None, sleeps: list | None = None, progress: list | None = None):
    return verify_cluster(
        cluster,
        EXP,
        pod_exec,
        node_wait_s=60,
        pod_wait_s=60,
        sleep=(sleeps if sleeps is not None else []).append,
        on_progress=(progress if progress is not None else []).append,
    )


def test_each_phase_polls_with_the_given_sleep_until_it_passes():
    sleeps = []
    result = run(Cluster(broken=("nodes", "daemonsets", "pods")), ray_has(4), sleeps=sleeps)
    assert (result.status, sleeps) == ("pass", [10, 10, 10]), (
        f"expected pass after 3 sleeps of 10 s, got {result.status}, {sleeps}"
    )


def test_progress_names_each_phase_in_order():
    progress = []
    run(Cluster(), ray_has(4), progress=progress)
    expected = [
        "GPU nodes: count, AZ, GPU and EFA allocatable",
        "device plugins, KubeRay operator, huge pages",
        "RayCluster and its worker pods",
        "EFA inside the worker pods, GPUs Ray advertises",
    ]
    assert progress == expected, f"expected {expected}, got {progress}"


def test_without_pod_exec_verify_stops_after_the_worker_pods():
    result = run(Cluster())
    checks = [f.check for f in result.findings]
    assert result.status == "pass" and "Ray GPUs == Kubernetes GPU requests" not in checks, (
        f"expected a pass without the Ray GPU row, got {result.status}, {checks}"
    )


def test_result_is_the_verify_step_carrying_the_expectations():
    for cluster, pod_exec in ((Cluster(), ray_has(4)), (Cluster(), ray_has(1)), (Cluster(), None)):
        result = run(cluster, pod_exec)
        got = (result.step, result.data)
        assert got == ("verify", EXP), f"expected ('verify', {EXP}), got {got}"


def test_node_failure_returns_the_verify_step_with_expectations():
    result = verify_cluster(Cluster(broken=("nodes",)), EXP, None, node_wait_s=0, sleep=lambda s: None)
    assert (result.step, result.status, result.data) == ("verify", "fail", EXP), f"got {result}"


def test_addon_failure_returns_the_verify_step_with_expectations():
    result = verify_cluster(Cluster(broken=("daemonsets",)), EXP, None, pod_wait_s=0, sleep=lambda s: None)
    assert (result.step, result.status, result.data) == ("verify", "fail", EXP), f"got {result}"


def test_failing_worker_pods_keep_the_node_and_addon_rows():
    result = verify_cluster(Cluster(broken=("pods",)), EXP, None, pod_wait_s=0, sleep=lambda s: None)
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


# --------------------------------------------------------------------------- expectations


CFG = SimpleNamespace(
    gpu_nodes=SimpleNamespace(node_count=2, availability_zone="us-west-2b", gpus_per_node=4, efa_interfaces=1),
    ray=SimpleNamespace(namespace="ray", cluster_name="ray-efa", worker=SimpleNamespace(replicas=2)),
)


def test_expectations_come_from_the_stack_config_without_outputs():
    got = expectations_from(CFG, {})
    expected = Expectations(2, "us-west-2b", 4, 1, "ray", "ray-efa", 2)
    assert got == expected, f"expected {expected}, got {got}"


def test_stack_outputs_take_precedence_over_the_config():
    outputs = {"gpu_az": "us-west-2a", "raycluster_namespace": "ray2", "raycluster_name": "rc2"}
    got = expectations_from(CFG, outputs)
    expected = Expectations(2, "us-west-2a", 4, 1, "ray2", "rc2", 2)
    assert got == expected, f"expected {expected}, got {got}"


def test_expectations_serialise_every_field():
    got = Expectations(2, "us-west-2b", 4, 1, "ray", "ray-efa", 2).to_dict()
    assert got == {
        "node_count": 2,
        "gpu_az": "us-west-2b",
        "gpus_per_node": 4,
        "efa_per_node": 1,
        "namespace": "ray",
        "raycluster": "ray-efa",
        "worker_replicas": 2,
    }, f"got {got}"


# --------------------------------------------------------------------------- early stops and the exec


class Exec:
    """Records each exec into a pod and answers with `answer`; verify's fi_info script gets an RDM endpoint."""

    def __init__(self, answer: ExecResult):
        self.answer, self.calls = answer, []

    def __call__(self, pod, namespace, command, timeout_s):
        if "fi_info" in " ".join(command):
            return FI_INFO_RDM
        self.calls.append((pod, namespace, command, timeout_s))
        return self.answer


def test_addon_failure_stops_before_the_worker_pods():
    result = verify_cluster(Cluster(broken=("daemonsets",)), EXP, None, pod_wait_s=0, sleep=lambda s: None)
    checks = [f.check for f in result.findings]
    assert "Ray worker pods Running" not in checks, f"expected no worker-pod rows after an add-on failure, got {checks}"


def test_worker_pod_failure_stops_before_asking_ray():
    pod_exec = Exec(ExecResult(0, f'{RESOURCES_MARK}{{"GPU": 4}}\n', ""))
    verify_cluster(Cluster(broken=("pods",)), EXP, pod_exec, pod_wait_s=0, sleep=lambda s: None)
    assert pod_exec.calls == [], f"expected no exec into the head pod after a worker-pod failure, got {pod_exec.calls}"


def test_ray_resources_are_read_by_python_in_the_head_pods_namespace():
    pod_exec = Exec(ExecResult(0, f'{RESOURCES_MARK}{{"GPU": 4}}\n', ""))
    run(Cluster(), pod_exec)
    (pod, namespace, command, timeout_s), *_ = pod_exec.calls
    got = (pod, namespace, command[:2], timeout_s > 0)
    assert got == ("rc-head", "ray", ["python", "-c"], True), (
        f"expected rc-head in ray, python -c, a timeout; got {got}"
    )


def test_unreadable_ray_resources_fail_quoting_rc_and_stderr_tail():
    pod_exec = Exec(ExecResult(1, "Traceback ...", "@" + "e" * 300))
    result = run(Cluster(), pod_exec)
    row = result.findings[-1]
    got = (result.step, result.status, result.data, row.check, row.status, row.fix)
    expected = (
        "verify",
        "fail",
        EXP,
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
    result = run(Cluster(), ray_has(4))
    expected = "1 GPU nodes in us-west-2a, RayCluster rc provisioned"
    assert (result.status, result.summary) == ("pass", expected), f"expected pass, {expected!r}; got {result}"
