"""The scheduler's rules as verify reads them, the huge-page boundary and fi_info's causes
(automation/steps/verify_checks.py), written against the survivors of a mutmut run of that module with
its unit tests only (bench/results/mutation/2026-12-06-data-verdict-verify-schema.md).

The rules are Kubernetes': node affinity operators
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/node-selector-requirement/:
In, NotIn, Exists, DoesNotExist, Gt, Lt; Gt and Lt compare integers) and tolerations
(https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/: an empty effect matches
every effect, `Exists` with no key tolerates every taint, `Equal` needs key and value equal).
"""

from __future__ import annotations

import pytest

from automation.steps.verify_checks import (
    check_daemonsets,
    check_fi_info,
    check_hugepages,
    efa_endpoints,
    fi_info_command,
    selects,
    untolerated_taints,
    worker_requests,
)

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
    argv = fi_info_command()
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


GPU_NODES = [{"metadata": {"name": f"n{i}", "labels": {"role": "gpu", "slot": str(i)}}} for i in range(2)]
EFA = "aws-efa-k8s-device-plugin"
NVIDIA = "nvidia-device-plugin-daemonset"


def test_a_device_plugin_on_some_of_the_gpu_nodes_does_not_cover_them():
    rows = check_daemonsets([_ds(EFA, 1, 1, {"slot": "0"}), _ds(NVIDIA, 2, 2)], GPU_NODES)
    got = [(r.check, r.status) for r in rows]
    assert got == [("EFA device plugin", "pass"), ("NVIDIA device plugin", "pass"), ("EFA device plugin", "fail")], got
    assert rows[2].detail == "no daemonset named like 'efa' targets all 2 GPU nodes", rows[2].detail


def test_a_daemonset_row_names_its_namespace_counts_and_fix():
    row = check_daemonsets([_ds(EFA, 2, 1)], GPU_NODES)[0]
    assert row.detail == f"daemonset kube-system/{EFA}: 1/2 ready, targets 2 GPU node(s)", row.detail
    assert row.fix == f"kubectl -n kube-system describe ds {EFA}; kubectl -n kube-system get pods -o wide | grep {EFA}"


def test_a_daemonset_ready_everywhere_it_wants_but_short_of_the_gpu_nodes_fails():
    row = check_daemonsets([_ds(EFA, 1, 1)], GPU_NODES)[0]
    assert row.status == "fail", row


def test_a_daemonset_of_another_name_is_labelled_daemonset():
    rows = check_daemonsets([_ds("node-exporter", 2, 2)], GPU_NODES)
    assert (rows[0].check, rows[0].status) == ("DaemonSet", "pass"), rows[0]


def test_a_daemonset_that_targets_no_gpu_node_is_skipped_naming_its_selector():
    rows = check_daemonsets([_ds("mps", 0, 0, {"mps": "true"})], GPU_NODES)
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
    rows = check_daemonsets([ds], GPU_NODES)
    assert "(nodeSelector {}, node affinity or taints exclude them)" in rows[0].detail, rows[0].detail


def test_a_missing_device_plugin_is_fixed_by_installing_its_chart():
    rows = check_daemonsets([], GPU_NODES)
    assert rows[0].fix == "install its Helm chart with the GPU nodes' nodeSelector and taint toleration: run `up` again"


def test_a_daemonset_without_metadata_is_judged_not_crashed():
    ds = {"spec": {}, "status": {"desiredNumberScheduled": 2, "numberReady": 2}}
    rows = check_daemonsets([ds], GPU_NODES)
    assert rows[0].detail == "daemonset None/?: 2/2 ready, targets 2 GPU node(s)", rows[0].detail


def test_a_device_plugin_still_covers_the_nodes_after_a_later_daemonset():
    rows = check_daemonsets([_ds(EFA, 2, 2), _ds(NVIDIA, 2, 2), _ds("zz-node-exporter", 2, 2)], GPU_NODES)
    assert [r.status for r in rows] == ["pass", "pass", "pass"], rows
