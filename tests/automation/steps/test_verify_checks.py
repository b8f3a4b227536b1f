"""automation/steps/verify_checks.py: which DaemonSets reach the GPU nodes (selectors, affinity, taints), the
device plugins' rows, the node monitoring agent's row, huge pages and the fi_info check, on hand-made Kubernetes
objects (verify.py's own checks: tests/automation/steps/test_verify.py).

Objects carry only the fields verify reads, in the Kubernetes API's shapes
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus,
.../deployment-v1/#DeploymentStatus).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automation.steps.verify import check_operator
from automation.steps.verify_checks import (
    FI_INFO_COMMAND,
    check_daemonsets,
    check_fi_info,
    check_hugepages,
    check_node_agent,
    efa_endpoints,
    selects,
    untolerated_taints,
    worker_requests,
)


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


# ---- The scheduler's rules as verify reads them, the huge-page boundary and fi_info's causes
# (automation/steps/verify_checks.py), written against the survivors of a mutmut run of that module with
# its unit tests only (bench/results/mutation/2026-12-06-data-verdict-verify-schema.md).
#
# The rules are Kubernetes': node affinity operators
# (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/node-selector-requirement/:
# In, NotIn, Exists, DoesNotExist, Gt, Lt; Gt and Lt compare integers) and tolerations
# (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/: an empty effect matches
# every effect, `Exists` with no key tolerates every taint, `Equal` needs key and value equal).

NODE = {"metadata": {"name": "n0", "labels": {"zone": "a", "size": "5"}}}


def _affinity(*exprs: dict) -> dict:
    term = {"matchExpressions": list(exprs)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    }


@pytest.mark.parametrize(
    ("expr", "holds"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "gone", "operator": "In", "values": ["a"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "gone", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "gone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "gone", "operator": "DoesNotExist"}, True),
        ({"key": "size", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "size", "operator": "Gt", "values": ["5"]}, False),
        ({"key": "size", "operator": "Lt", "values": ["6"]}, True),
        ({"key": "size", "operator": "Lt", "values": ["5"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),
        ({"key": "size", "operator": "Gt", "values": ["x"]}, False),
        ({"key": "gone", "operator": "Lt", "values": ["9"]}, False),
        ({"key": "size", "operator": "Lt", "values": []}, False),
        ({"key": "zone", "operator": "Near", "values": ["a"]}, False),
        ({"key": "zone", "values": ["a"]}, True),
    ],
)
def test_a_required_node_affinity_expression_follows_the_operator(expr, holds):
    assert selects(_affinity(expr), NODE) is holds, f"{expr} on labels {NODE['metadata']['labels']}: expected {holds}"


def test_an_affinity_without_required_terms_selects_every_node():
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}}
    assert selects(spec, NODE) is True


def test_a_term_without_expressions_selects_every_node():
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    }
    assert selects(spec, NODE) is True


def test_a_node_without_metadata_fails_a_node_selector():
    assert selects({"nodeSelector": {"zone": "a"}}, {"spec": {}}) is False


def test_a_node_without_labels_fails_a_node_selector():
    assert selects({"nodeSelector": {"zone": "a"}}, {"metadata": {"name": "bare"}}) is False


def _taints(*taints: dict) -> dict:
    return {"metadata": {"name": "n0"}, "spec": {"taints": list(taints)}}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "false", "effect": "NoSchedule"}, False),
        ({"key": "other", "operator": "Equal", "value": "true"}, False),
        ({"operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_a_toleration_tolerates_the_gpu_taint_by_kubernetes_rules(toleration, tolerated):
    left = untolerated_taints({"tolerations": [toleration]}, _taints(GPU_TAINT))
    assert (left == []) is tolerated, f"{toleration}: expected tolerated={tolerated}, untolerated {left}"


def test_a_taint_without_a_value_is_tolerated_by_an_equal_toleration_without_one():
    taint = {"key": "dedicated", "effect": "NoSchedule"}
    assert untolerated_taints({"tolerations": [{"key": "dedicated", "operator": "Equal"}]}, _taints(taint)) == []


def test_a_later_toleration_still_counts_after_one_for_another_effect():
    tolerations = [{"operator": "Exists", "effect": "NoExecute"}, {"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert untolerated_taints({"tolerations": tolerations}, _taints(GPU_TAINT)) == []


def test_untolerated_taints_are_named_key_value_effect_and_prefer_no_schedule_is_ignored():
    node = _taints(
        GPU_TAINT, {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}, {"key": "k", "effect": "NoExecute"}
    )
    assert untolerated_taints({}, node) == ["nvidia.com/gpu=true:NoSchedule", "k=:NoExecute"]


def _raycluster(requests: dict | None) -> dict:
    container = {"name": "ray-worker", "resources": {"requests": requests} if requests is not None else {}}
    return {"spec": {"workerGroupSpecs": [{"template": {"spec": {"containers": [container]}}}]}}


def test_worker_requests_are_the_first_worker_containers():
    assert worker_requests(_raycluster({"cpu": "40", "hugepages-2Mi": "5120Mi"})) == {
        "cpu": "40",
        "hugepages-2Mi": "5120Mi",
    }


@pytest.mark.parametrize(
    "raycluster",
    [{}, {"spec": {}}, {"spec": {"workerGroupSpecs": []}}, {"spec": {"workerGroupSpecs": [{}]}}, _raycluster(None)],
)
def test_worker_requests_of_a_raycluster_without_them_are_empty(raycluster):
    assert worker_requests(raycluster) == {}


def _hp_node(name: str, allocatable: str | None) -> dict:
    status = {"allocatable": {"hugepages-2Mi": allocatable}} if allocatable is not None else {}
    return {"metadata": {"name": name}, "status": status}


def test_no_huge_page_request_skips_the_row():
    (row,) = check_hugepages([_hp_node("a", "0")], {"cpu": "40"})
    assert (row.check, row.status, row.detail) == (
        "GPU nodes hugepages-2Mi",
        "skip",
        "the worker pods request no hugepages-2Mi",
    )


def test_nodes_holding_exactly_the_request_pass():
    (row,) = check_hugepages([_hp_node("a", "5120Mi"), _hp_node("b", "10Gi")], {"hugepages-2Mi": "5120Mi"})
    assert (row.check, row.status, row.detail) == (
        "GPU nodes hugepages-2Mi",
        "pass",
        "2 GPU nodes hold a worker's 5120Mi",
    ), row


def test_a_node_without_status_holds_no_huge_pages():
    (row,) = check_hugepages([{"metadata": {"name": "a"}}], {"hugepages-2Mi": "2Mi"})
    assert row.detail.endswith("allocatable: a has 0Mi"), row.detail


def test_a_node_one_page_short_fails_naming_it_and_its_amount():
    nodes = [_hp_node("b", "5118Mi"), _hp_node("a", None), _hp_node("c", "5120Mi")]
    (row,) = check_hugepages(nodes, {"hugepages-2Mi": "5120Mi"})
    expected = "a worker pod requests hugepages-2Mi 5120Mi, allocatable: a has 0Mi; b has 5118Mi"
    assert (row.check, row.status, row.detail) == ("GPU nodes hugepages-2Mi", "fail", expected), row


def test_the_huge_page_fix_says_how_the_nodes_get_them():
    (row,) = check_hugepages([_hp_node("a", "0")], {"hugepages-2Mi": "2Mi"})
    assert row.fix.startswith("the GPU nodes reserve huge pages in their launch template's user data"), row.fix


def test_no_efa_device_in_the_pod_is_the_cause_with_the_device_plugin_fix():
    row = check_fi_info("w0", "n1", 0, "EFA_DEVICES none\nprovider: tcp\n    type: FI_EP_RDM\nFI_INFO_RC 0")
    assert (row.status, row.detail) == ("fail", "on n1: no EFA device in the pod (/dev/infiniband/uverbs* absent)")
    assert row.fix == (
        "the worker must request vpc.amazonaws.com/efa and the EFA device plugin must run on n1 "
        "(kubectl -n kube-system get pods -o wide | grep efa)"
    ), row.fix


def test_a_failed_fi_info_row_names_the_pod():
    assert check_fi_info("w0", "n1", 0, "EFA_DEVICES none").check == "EFA RDM endpoint in w0"


def test_fi_info_runs_its_script_through_sh_c():
    argv = FI_INFO_COMMAND
    assert argv[:2] == ["sh", "-c"] and "fi_info -p efa" in argv[2], argv


def test_efa_endpoints_lists_only_the_type_lines_of_a_provider():
    # The shape of `fi_info -p efa` output: one entry per endpoint, `provider:` first, other keys between.
    output = "type: FI_EP_MSG\nprovider: efa\n    fabric: efa\n    domain: rdmap0s6-rdm\n    type: FI_EP_RDM\n"
    assert efa_endpoints(output) == [("efa", "FI_EP_RDM")]


def test_an_image_without_fi_info_is_the_cause_with_the_image_key():
    row = check_fi_info("w0", "n1", 0, "EFA_DEVICES present\nFI_INFO missing")
    assert row.detail == "on n1: fi_info is not in the image (no libfabric from the EFA installer)", row.detail
    assert row.fix == "use a training image with the EFA installer's libfabric (rayImage in the stack config)", row.fix


def test_fi_info_without_an_rdm_endpoint_quotes_its_last_three_lines():
    output = "EFA_DEVICES present\nfi_getinfo: -61\nno data\nFI_INFO_RC 61"
    row = check_fi_info("w0", "n1", 61, output)
    assert row.detail == (
        "on n1: libfabric's efa provider offers no FI_EP_RDM endpoint: fi_getinfo: -61 no data FI_INFO_RC 61"
    ), row.detail
    assert row.fix == "check the EFA kernel module and the launch template's EFA interface on n1: fi_info -p efa -v"


def test_fi_info_with_no_output_gives_its_exit_status():
    row = check_fi_info("w0", "n1", 137, "")
    assert row.detail.endswith("no FI_EP_RDM endpoint: rc 137"), row.detail


def test_an_rdm_pass_counts_the_efa_endpoints():
    out = "EFA_DEVICES present\nprovider: efa\n    type: FI_EP_RDM\nprovider: efa\n type: FI_EP_RDM\nFI_INFO_RC 0"
    assert check_fi_info("w0", "n1", 0, out).detail == "on n1: fi_info -p efa lists 2 FI_EP_RDM endpoint(s) of efa"


def _ds(name: str, desired: int, ready: int, selector: dict | None = None) -> dict:
    spec = {"template": {"spec": {"nodeSelector": selector}}} if selector else {}
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": spec,
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


SLOTTED_GPU_NODES = [{"metadata": {"name": f"n{i}", "labels": {"role": "gpu", "slot": str(i)}}} for i in range(2)]
EFA = "aws-efa-k8s-device-plugin"
NVIDIA = "nvidia-device-plugin-daemonset"


def test_a_device_plugin_on_some_of_the_gpu_nodes_does_not_cover_them():
    rows = check_daemonsets([_ds(EFA, 1, 1, {"slot": "0"}), _ds(NVIDIA, 2, 2)], SLOTTED_GPU_NODES)
    got = [(r.check, r.status) for r in rows]
    assert got == [("EFA device plugin", "pass"), ("NVIDIA device plugin", "pass"), ("EFA device plugin", "fail")], got
    assert rows[2].detail == "no daemonset named like 'efa' targets all 2 GPU nodes", rows[2].detail


def test_a_daemonset_row_names_its_namespace_counts_and_fix():
    row = check_daemonsets([_ds(EFA, 2, 1)], SLOTTED_GPU_NODES)[0]
    assert row.detail == f"daemonset kube-system/{EFA}: 1/2 ready, targets 2 GPU node(s)", row.detail
    assert row.fix == f"kubectl -n kube-system describe ds {EFA}; kubectl -n kube-system get pods -o wide | grep {EFA}"


def test_a_daemonset_of_another_name_is_labelled_daemonset():
    rows = check_daemonsets([_ds("node-exporter", 2, 2)], SLOTTED_GPU_NODES)
    assert (rows[0].check, rows[0].status) == ("DaemonSet", "pass"), rows[0]


def test_a_daemonset_that_targets_no_gpu_node_is_skipped_naming_its_selector():
    rows = check_daemonsets([_ds("mps", 0, 0, {"mps": "true"})], SLOTTED_GPU_NODES)
    assert (rows[0].check, rows[0].status, rows[0].detail) == (
        "daemonset mps",
        "skip",
        "targets none of the 2 GPU nodes (nodeSelector {'mps': 'true'}, node affinity or taints exclude them): "
        "not required",
    ), rows[0]


def test_a_daemonset_without_a_node_selector_that_targets_no_gpu_node_says_so():
    ds = {
        "metadata": {"name": "cni"},
        "spec": {"template": {"spec": {"affinity": _affinity({"key": "x", "operator": "Exists"})["affinity"]}}},
    }
    rows = check_daemonsets([ds], SLOTTED_GPU_NODES)
    assert "(nodeSelector {}, node affinity or taints exclude them)" in rows[0].detail, rows[0].detail


def test_a_missing_device_plugin_is_fixed_by_installing_its_chart():
    rows = check_daemonsets([], SLOTTED_GPU_NODES)
    assert rows[0].fix == "install its Helm chart with the GPU nodes' nodeSelector and taint toleration: run `up` again"


def test_a_daemonset_without_metadata_is_judged_not_crashed():
    ds = {"spec": {}, "status": {"desiredNumberScheduled": 2, "numberReady": 2}}
    rows = check_daemonsets([ds], SLOTTED_GPU_NODES)
    assert rows[0].detail == "daemonset None/?: 2/2 ready, targets 2 GPU node(s)", rows[0].detail


def test_a_device_plugin_still_covers_the_nodes_after_a_later_daemonset():
    rows = check_daemonsets([_ds(EFA, 2, 2), _ds(NVIDIA, 2, 2), _ds("zz-node-exporter", 2, 2)], SLOTTED_GPU_NODES)
    assert [r.status for r in rows] == ["pass", "pass", "pass"], rows


# ---- Properties of verify's device-plugin coverage (automation/steps/verify_checks.py, ``check_daemonsets``): a
# plugin covers the GPU nodes only if it may run on every one of them and is ready there, whichever node of N is
# the one it misses.
#
# The stand-in cluster keeps to the Kubernetes API's meaning of a DaemonSet's status: ``desiredNumberScheduled``
# is "the total number of nodes that should be running the daemon pod", ``numberReady`` those of them whose pod is
# ready (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus),
# so desired is exactly the number of nodes the template's selector and tolerations admit and ready is at most
# that. The GPU nodes carry the taint ``nvidia.com/gpu=true:NoSchedule`` as infra/manifests.py gives them.

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
PLUGINS = {"nvidia-device-plugin-daemonset": "NVIDIA device plugin", "aws-efa-k8s-device-plugin": "EFA device plugin"}


@st.composite
def gpu_nodes(draw) -> list[dict]:
    """1 to 8 GPU nodes; each may lack the label ``efa=true`` or the GPU taint."""
    out = []
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        labels = {"role": "gpu-worker"} | ({"efa": "true"} if draw(st.booleans()) else {})
        spec = {"taints": [TAINT]} if draw(st.booleans()) else {}
        out.append({"metadata": {"name": f"gpu-{i}", "labels": labels}, "spec": spec})
    return out


def _admits(template: dict, node: dict) -> bool:
    """The scheduler's view for the two knobs drawn here: the nodeSelector and the GPU taint's toleration."""
    labels = node["metadata"]["labels"]
    selected = all(labels.get(k) == v for k, v in (template.get("nodeSelector") or {}).items())
    tolerated = not node["spec"] or bool(template.get("tolerations"))
    return selected and tolerated


@st.composite
def plugin(draw, name: str, nodes: list[dict]) -> dict:
    template: dict[str, object] = {}
    if draw(st.booleans()):
        template["nodeSelector"] = {"efa": "true"}
    if draw(st.booleans()):
        template["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    desired = sum(_admits(template, n) for n in nodes)
    ready = draw(st.integers(min_value=0, max_value=desired))
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"template": {"spec": template}},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


def _passes(rows, label: str) -> bool:
    mine = [r.status for r in rows if r.check == label]
    return bool(mine) and all(s == "pass" for s in mine)


@PROPERTY
@given(data=st.data())
def test_a_plugin_passes_only_when_ready_on_every_gpu_node(data):
    nodes = data.draw(gpu_nodes(), label="nodes")
    sets = [data.draw(plugin(name, nodes), label=name) for name in PLUGINS]
    rows = check_daemonsets(sets, nodes)
    for ds in sets:
        name, st_ = ds["metadata"]["name"], ds["status"]
        everywhere = all(_admits(ds["spec"]["template"]["spec"], n) for n in nodes)
        expected = everywhere and st_["numberReady"] == len(nodes)
        got = _passes(rows, PLUGINS[name])
        assert got == expected, (
            f"{name}: admitted on all {len(nodes)} nodes={everywhere}, ready {st_['numberReady']}/"
            f"{st_['desiredNumberScheduled']}: expected pass={expected}, got {[(r.check, r.status) for r in rows]}"
        )


@PROPERTY
@given(n=st.integers(min_value=2, max_value=8), data=st.data())
def test_one_gpu_node_the_plugin_cannot_reach_fails_it_wherever_that_node_is_listed(n, data):
    miss = data.draw(st.integers(min_value=0, max_value=n - 1), label="missed node")
    nodes = [
        {"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker", "efa": "false" if i == miss else "true"}}}
        for i in range(n)
    ]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"nodeSelector": {"efa": "true"}}}},
        "status": {"desiredNumberScheduled": n - 1, "numberReady": n - 1},
    }
    rows = check_daemonsets([ds], nodes)
    assert not _passes(rows, "EFA device plugin"), f"node {miss} of {n} unreachable: got {rows}"


def test_a_plugin_short_of_its_desired_pods_fails_even_when_its_ready_count_matches_the_gpu_nodes():
    # desired 3: the 2 GPU nodes and a system node; 2 ready. The status counts pods, not which node holds them,
    # so the one not ready may be on a GPU node: coverage is not shown.
    nodes = [{"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker"}}} for i in range(2)]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "status": {"desiredNumberScheduled": 3, "numberReady": 2},
    }
    rows = check_daemonsets([ds], nodes)
    assert not _passes(rows, "EFA device plugin"), f"2 of 3 ready counted as covering 2 GPU nodes: {rows}"


def test_a_toleration_of_everything_reaches_the_tainted_gpu_nodes():
    # "An empty key with operator Exists matches all keys, values and effects which means this will tolerate
    # everything" (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/)
    nodes = [
        {"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker"}}, "spec": {"taints": [TAINT]}}
        for i in range(2)
    ]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"tolerations": [{"operator": "Exists"}]}}},
        "status": {"desiredNumberScheduled": 2, "numberReady": 2},
    }
    rows = check_daemonsets([ds], nodes)
    assert _passes(rows, "EFA device plugin"), f"a key-less Exists toleration did not reach the GPU nodes: {rows}"
