"""automation/steps/verify_checks.py: which DaemonSets reach the GPU nodes (selectors, affinity, taints), the
device plugins' rows, the node monitoring agent's row, huge pages and the fi_info check, on hand-made Kubernetes
objects (verify.py's own checks: tests/automation/steps/test_verify.py).

Objects carry only the fields verify reads, in the Kubernetes API's shapes
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus,
.../deployment-v1/#DeploymentStatus).
"""

from __future__ import annotations

from automation.steps.verify import check_operator
from automation.steps.verify_checks import check_daemonsets, check_fi_info, check_hugepages, check_node_agent


def daemonset(name: str, desired: int, ready: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


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


# --------------------------------------------------------------------------- the node monitoring agent
# Its pods and the condition it sets on an NVIDIA node, in the shapes tests/fixtures/k8s/README.md cites (the agent's
# chart and pkg/conditions/conditions.go, aws/eks-node-monitoring-agent v1.7.0).


def gpu_node(name: str, *conditions: tuple[str, str]) -> dict:
    """A GPU node with the agent's GPU condition (status, reason) for each of ``conditions``, or none."""
    conds = [{"type": "AcceleratedHardwareReady", "status": s, "reason": r} for s, r in conditions]
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": "True"}, *conds]}}


def agent_pod(node: str, ready: str = "True") -> dict:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
    return {"spec": {"nodeName": node}, "status": status}


HEALTHY = ("True", "NvidiaGPUIsReady")


def test_every_gpu_node_with_a_ready_agent_and_its_gpu_condition_true_passes():
    row = check_node_agent([agent_pod("n0"), agent_pod("n1")], [gpu_node("n0", HEALTHY), gpu_node("n1", HEALTHY)])
    assert row.status == "pass", f"expected a pass, got {row}"


def test_a_gpu_node_whose_agent_pod_is_not_ready_is_named():
    nodes = [gpu_node("n0", HEALTHY), gpu_node("n1", HEALTHY)]
    row = check_node_agent([agent_pod("n0"), agent_pod("n1", "False")], nodes)
    assert (row.status, row.detail) == ("fail", "n1: no Ready eks-node-monitoring-agent pod"), f"got {row}"


def test_a_gpu_node_without_the_agents_gpu_condition_is_named():
    row = check_node_agent([agent_pod("n0"), agent_pod("n1")], [gpu_node("n0", HEALTHY), gpu_node("n1")])
    assert (row.status, row.detail) == ("fail", "n1: no AcceleratedHardwareReady condition"), f"got {row}"


def test_a_gpu_node_whose_gpu_condition_is_false_is_named_with_the_reason():
    nodes = [gpu_node("n0", ("False", "NvidiaXID79Error")), gpu_node("n1", HEALTHY)]
    row = check_node_agent([agent_pod("n0"), agent_pod("n1")], nodes)
    assert row.detail == "n0: AcceleratedHardwareReady False (NvidiaXID79Error)", f"got {row}"


def test_a_gpu_node_lacking_both_names_both():
    row = check_node_agent([], [gpu_node("n0")])
    assert row.detail == "n0: no Ready eks-node-monitoring-agent pod, no AcceleratedHardwareReady condition", row


def test_the_counter_reader_is_waited_for_under_its_own_name_and_is_not_the_efa_plugin():
    rows = check_daemonsets([daemonset("nvidia-device-plugin", 2, 2), daemonset("efa-counter-reader", 2, 1)], GPU_NODES)
    got = [(r.check, r.status) for r in rows]
    expected = [("EFA counter reader", "fail"), ("NVIDIA device plugin", "pass"), ("EFA device plugin", "fail")]
    assert got == expected, f"expected {expected}, got {got}"
