"""verify's check functions on hand-made Kubernetes objects: the cases the recorded-cluster tests
(tests/integration/test_driver_verify.py) do not reach, found by mutation testing (TESTING.md).

Objects carry only the fields verify reads, in the Kubernetes API's shapes
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus,
.../deployment-v1/#DeploymentStatus, .../pod-v1/#PodStatus) and KubeRay's RayCluster status conditions.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from automation.errors import DriverError
from automation.ray_head import parse_ray_resources
from automation.steps.verify import (
    Expectations,
    check_nodes,
    check_operator,
    check_ray_gpus,
    check_raycluster,
    check_worker_pods,
    head_pod_name,
    requested_gpus,
)
from automation.steps.verify_checks import check_daemonsets, check_fi_info, check_hugepages

EXP = Expectations(
    node_count=2,
    gpu_az="us-west-2a",
    gpus_per_node=4,
    efa_per_node=1,
    namespace="ray",
    raycluster="rc",
    worker_replicas=2,
)
GPU = "nvidia.com/gpu"


def daemonset(name: str, desired: int, ready: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


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


# --------------------------------------------------------------------------- device plugins

GPU_NODES = [{"metadata": {"name": f"n{i}", "labels": {"role": "gpu-worker"}}} for i in range(2)]


def test_missing_device_plugin_fails_its_row_and_still_checks_the_other():
    rows = check_daemonsets([daemonset("aws-efa-k8s-device-plugin", 2, 2)], GPU_NODES)
    got = [(r.check, r.status) for r in rows]
    expected = [("EFA device plugin", "pass"), ("NVIDIA device plugin", "fail")]
    assert got == expected, f"expected {expected}, got {got}"
    assert rows[1].fix.endswith("run `up` again"), rows[1].fix


def test_daemonset_short_of_its_desired_pods_fails_even_above_the_minimum():
    ds = daemonset("nvidia-device-plugin", desired=2, ready=1)
    rows = check_daemonsets([ds, daemonset("aws-efa-k8s-device-plugin", 2, 2)], GPU_NODES)
    got = (rows[1].check, rows[1].status, rows[1].fix.split(";")[0])
    expected = ("NVIDIA device plugin", "fail", "kubectl -n kube-system describe ds nvidia-device-plugin")
    assert got == expected, f"expected {expected}, got {got}"


def test_daemonset_without_status_fails_instead_of_crashing():
    rows = check_daemonsets([{"metadata": {"name": "nvidia-device-plugin"}}], GPU_NODES)
    assert rows[0].status == "fail", f"expected a fail row for a daemonset with no status yet, got {rows[0]}"


def test_daemonset_whose_node_selector_no_gpu_node_has_is_skipped():
    ds = daemonset("nvidia-device-plugin-mps-control-daemon", 0, 0)
    ds["spec"] = {"template": {"spec": {"nodeSelector": {"nvidia.com/mps.capable": "true"}}}}
    rows = check_daemonsets([ds], GPU_NODES)
    assert (rows[0].check, rows[0].status) == ("daemonset nvidia-device-plugin-mps-control-daemon", "skip"), rows


def test_daemonset_that_does_not_tolerate_the_gpu_taint_targets_no_gpu_node():
    tainted = [
        {**n, "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}}
        for n in GPU_NODES
    ]
    plain, tolerant = daemonset("efa", 0, 0), daemonset("efa-tolerant", 2, 2)
    tolerant["spec"] = {"template": {"spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}
    got = [(r.check, r.status) for r in check_daemonsets([plain, tolerant], tainted)[:2]]
    assert got == [("daemonset efa", "skip"), ("EFA device plugin", "pass")], got


def test_required_node_affinity_terms_are_ored_and_expressions_anded():
    term = {
        "matchExpressions": [
            {"key": "role", "operator": "In", "values": ["gpu-worker"]},
            {"key": "x", "operator": "DoesNotExist"},
        ]
    }
    miss = {"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["gpu-worker"]}]}
    ds = daemonset("nvidia-device-plugin", 2, 2)
    ds["spec"] = {
        "template": {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [miss, term]}
                    }
                }
            }
        }
    }
    rows = check_daemonsets([ds], GPU_NODES)
    assert rows[0].status == "pass" and "targets 2 GPU node(s)" in rows[0].detail, rows


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
    rows = check_raycluster({}, EXP)
    got = [(r.status, r.detail) for r in rows]
    expected = [("fail", "ray/rc: HeadPodReady=absent"), ("fail", "ray/rc: RayClusterProvisioned=absent")]
    assert got == expected, f"expected {expected}, got {got}"


def test_false_raycluster_condition_shows_reason_and_message_and_the_fix():
    conds = [
        {"type": "HeadPodReady", "status": "True"},
        {"type": "RayClusterProvisioned", "status": "False", "reason": "PodsPending", "message": "2 pods pending"},
    ]
    rows = check_raycluster({"status": {"conditions": conds}}, EXP)
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
    rows = check_worker_pods([pod("w0", WORKER, WORKER), pod("w1", WORKER, WORKER, ready="False")], EXP)
    got = (rows[0].status, rows[0].detail, rows[0].fix)
    expected = (
        "fail",
        "expected 2 Ready worker pods, got 1 of 2",
        "kubectl -n ray get pods -l ray.io/node-type=worker -o wide",
    )
    assert got == expected, f"expected {expected}, got {got}"


def test_enough_ready_pods_pass_with_no_fix():
    rows = check_worker_pods([pod("w0", WORKER, WORKER), pod("w1", WORKER, WORKER)], EXP)
    got = [(r.status, r.fix) for r in rows]
    assert got == [("pass", "")] * 3, f"expected three pass rows with no fix, got {got}"


def test_a_request_without_its_limit_fails_naming_the_key():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "40"})], EXP)[1]
    expected = (
        "fail",
        f"{GPU}: request 4 limit -",
        "set the worker group's requests equal to its limits (Guaranteed QoS)",
    )
    got = (row.status, row.detail, row.fix)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_limit_without_its_request_fails_naming_the_key():
    row = check_worker_pods([pod("w0", {"cpu": "40"}, {"cpu": "40", GPU: "4"})], EXP)[1]
    assert (row.status, row.detail) == ("fail", f"{GPU}: request - limit 4"), f"got {row}"


def test_pod_without_requests_or_limits_fails_saying_so():
    row = check_worker_pods([pod("w0", None, None)], EXP)[1]
    expected = (
        "fail",
        "no requests or limits set",
        "set the worker group's requests equal to its limits (Guaranteed QoS)",
    )
    got = (row.status, row.detail, row.fix)
    assert got == expected, f"expected {expected}, got {got}"


def test_equal_requests_and_limits_list_them_in_the_detail():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "40", GPU: "4"})], EXP)[1]
    got = (row.status, row.detail)
    assert got == ("pass", f"cpu=40, {GPU}=4"), f"expected ('pass', 'cpu=40, {GPU}=4'), got {got}"


@pytest.mark.parametrize(
    "obj", [{"metadata": {"name": "w0"}}, {"metadata": {"name": "w0"}, "spec": {"containers": [{}]}}]
)
def test_pod_without_spec_or_resources_fails_instead_of_crashing(obj):
    rows = check_worker_pods([obj], EXP)
    assert [r.status for r in rows] == ["fail", "fail"], f"expected two fail rows, got {rows}"


# --------------------------------------------------------------------------- Ray's GPUs


def test_gpus_are_counted_from_requests_and_missing_ones_count_zero():
    pods = [pod("w0", {GPU: "2"}, {GPU: "4"}), pod("w1", {"cpu": "1"}, {"cpu": "1"})]
    assert requested_gpus(pods) == 2, f"expected 2 requested GPUs (requests, not limits), got {requested_gpus(pods)}"


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
        self.pods, self.calls = pods, []

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        self.calls.append((namespace, label_selector))
        return self.pods


def test_head_pod_is_looked_up_by_kuberay_labels():
    kube = Pods([{"metadata": {"name": "rc-head-x"}, "status": {"phase": "Running"}}])
    name = head_pod_name(kube, EXP)
    got = (name, kube.calls)
    expected = ("rc-head-x", [("ray", "ray.io/cluster=rc,ray.io/node-type=head")])
    assert got == expected, f"expected {expected}, got {got}"


def test_no_running_head_pod_is_a_driver_error_with_the_command():
    kube = Pods([{"metadata": {"name": "rc-head-x"}}])
    with pytest.raises(DriverError, match=r"no running head pod of RayCluster ray/rc: kubectl -n ray get pods"):
        head_pod_name(kube, EXP)


# --------------------------------------------------------------------------- nodes and row wording


def test_bare_node_fails_on_every_fact_with_each_fix():
    rows = check_nodes([{"metadata": {"name": "n1"}}], replace(EXP, node_count=1))
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
    rows = check_nodes([{"metadata": {"name": "n1", "labels": labels}, "status": status}], replace(EXP, node_count=1))
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
    rows = check_nodes(nodes, EXP)
    got = [(r.check, r.status, "not Ready" in r.detail) for r in rows]
    expected = [("GPU nodes Ready", "pass", False), ("node n0", "fail", False), ("node n1", "fail", True)]
    assert got == expected, f"expected {expected} (n0 fails on its zone and devices only), got {got}"


def test_too_few_nodes_fails_the_count_row_first_with_the_scaling_activity_command():
    row = check_nodes([{"metadata": {"name": "n0"}}], EXP)[0]
    assert (row.check, row.status) == ("GPU nodes Ready", "fail"), f"expected the count row first and failing: {row}"
    expected_fix = (
        "kubectl get nodes -l role=gpu-worker; the node group's last scaling activity: "
        "aws autoscaling describe-scaling-activities --auto-scaling-group-name <asg> --max-items 1"
    )
    assert row.fix == expected_fix, f"expected {expected_fix!r}, got {row.fix!r}"


def test_failed_device_plugin_and_operator_rows_name_what_was_seen():
    ds = daemonset("nvidia-device-plugin", desired=2, ready=1)
    got = [(r.check, r.detail) for r in check_daemonsets([ds], GPU_NODES)]
    expected = [
        ("NVIDIA device plugin", "daemonset kube-system/nvidia-device-plugin: 1/2 ready, targets 2 GPU node(s)"),
        ("EFA device plugin", "no daemonset named like 'efa' targets all 2 GPU nodes"),
    ]
    assert got == expected, f"expected {expected}, got {got}"
    row = check_operator([])
    assert (row.check, row.detail) == ("KubeRay operator", "no deployment named like 'kuberay-operator'"), f"got {row}"


def test_available_operator_row_is_named():
    row = check_operator([deployment("kuberay-operator", "True")])
    assert row.check == "KubeRay operator", f"expected the row 'KubeRay operator', got {row.check!r}"


def test_worker_pod_count_row_is_named_and_pods_without_a_name_show_a_question_mark():
    rows = check_worker_pods(
        [{"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}], EXP
    )
    got = [r.check for r in rows]
    assert got == ["Ray worker pods Running", "pod ? requests == limits"], f"got {got}"


def test_every_request_limit_difference_is_listed():
    row = check_worker_pods([pod("w0", {"cpu": "40", GPU: "4"}, {"cpu": "20", GPU: "2"})], EXP)[1]
    expected = f"cpu: request 40 limit 20; {GPU}: request 4 limit 2"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"


# --------------------------------------------------------------------------- fi_info


def test_only_the_efa_providers_own_rdm_endpoint_counts():
    """`efa;ofi_rxd` is RxD layered over EFA's datagrams, not the SRD endpoint aws-ofi-nccl uses."""
    output = (
        "EFA_DEVICES present\nprovider: efa\n    type: FI_EP_DGRAM\n"
        "provider: efa;ofi_rxd\n    type: FI_EP_RDM\nFI_INFO_RC 0\n"
    )
    row = check_fi_info("w0", "n1", 0, output)
    assert (row.status, "no FI_EP_RDM endpoint" in row.detail) == ("fail", True), f"got {row}"


def test_efa_rdm_endpoint_passes_naming_the_node():
    row = check_fi_info("w0", "n1", 0, "EFA_DEVICES present\nprovider: efa\n    type: FI_EP_RDM\nFI_INFO_RC 0\n")
    assert (row.check, row.status, row.detail.startswith("on n1:")) == ("EFA RDM endpoint in w0", "pass", True), row


def test_nodes_short_of_huge_pages_name_the_stack_key_that_turns_the_request_off():
    node = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"hugepages-2Mi": "0"}}}
    (row,) = check_hugepages([node], {"hugepages-2Mi": "5120Mi"})
    assert row.status == "fail" and "rayWorkerHugepages: false" in row.fix, f"expected the key in the fix, got {row}"
