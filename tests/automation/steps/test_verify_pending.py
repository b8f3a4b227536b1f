"""Reading why a worker pod is Pending: the scheduler's `<count> <reason>` items from recorded
FailedScheduling messages (tests/fixtures/k8s/failed_scheduling.jsonl, each with its source) and the
cross-check against the nodes' own objects."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from automation.steps.verify_pending import (
    CANNOT_START,
    HEAD_CANNOT_START,
    diagnose,
    diagnose_head,
    node_shortfalls,
    normalise,
    scheduling_reasons,
)

RECORDED = [json.loads(line) for line in (FIXTURES / "k8s" / "failed_scheduling.jsonl").read_text().splitlines()]
TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize("recorded", RECORDED, ids=[r["source"].split()[0] for r in RECORDED])
def test_recorded_failed_scheduling_messages_parse_into_their_count_reason_items(recorded):
    got = scheduling_reasons(recorded["message"])
    assert got == recorded["reasons"], f"expected {recorded['reasons']}, got {got}"


def test_a_message_that_is_not_the_schedulers_summary_gives_no_reasons():
    assert scheduling_reasons("skip schedule deleting pod: default/x") == {}, "expected no reasons"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("Insufficient hugepages-2Mi", "Insufficient hugepages-2Mi"),
        ("node(s) had untolerated taint {nvidia.com/gpu: true}", "untolerated taint"),
        ("node(s) had taints that the pod didn't tolerate", "untolerated taint"),
        ("node(s) didn't match Pod's node affinity/selector", "node selector/affinity"),
        ("node(s) didn't match node selector", "node selector/affinity"),
    ],
)
def test_reasons_of_either_kubernetes_wording_mean_the_same_cause(reason, expected):
    assert normalise(reason) == expected, f"expected {expected!r} for {reason!r}, got {normalise(reason)!r}"


def gpu_node(efa: str = "1", taints=(TAINT,)) -> dict:
    return {
        "metadata": {"name": "n1", "labels": {"role": "gpu-worker"}},
        "spec": {"taints": list(taints)},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"vpc.amazonaws.com/efa": efa, "nvidia.com/gpu": "4"},
        },
    }


def worker(tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)) -> dict:
    return {
        "metadata": {"name": "w0"},
        "spec": {
            "nodeSelector": {"role": "gpu-worker"},
            "tolerations": list(tolerations),
            "containers": [{"resources": {"requests": {"vpc.amazonaws.com/efa": "1", "nvidia.com/gpu": "4"}}}],
        },
        "status": {"phase": "Pending"},
    }


def event(message: str) -> dict:
    return {"reason": "FailedScheduling", "involvedObject": {"name": "w0"}, "message": message}


def test_a_node_short_of_a_requested_resource_says_which():
    assert node_shortfalls(worker(), gpu_node(efa="0")) == {"Insufficient vpc.amazonaws.com/efa"}


def test_an_untolerated_taint_keeps_the_pod_off_the_node():
    assert node_shortfalls(worker(tolerations=()), gpu_node()) == {"untolerated taint"}


def test_event_confirmed_by_every_gpu_node_fails_with_the_cause_and_its_fix():
    message = (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 Insufficient vpc.amazonaws.com/efa."
    )
    rows = diagnose([worker()], [event(message)], [gpu_node(efa="0")])
    got = [
        (r.check, "Insufficient vpc.amazonaws.com/efa (scheduler:" in r.detail, "EFA device plugin" in r.fix)
        for r in rows
    ]
    assert got == [(CANNOT_START, True, True)], f"expected one finding naming EFA and its plugin, got {rows}"


def test_event_the_nodes_contradict_is_not_yet_a_cause():
    """A node that just joined: the event predates its device plugin; the node now has the GPUs."""
    message = (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."
    )
    assert diagnose([worker()], [event(message)], [gpu_node()]) == [], "expected no finding: the node can hold the pod"


def test_nodes_that_cannot_hold_the_pod_without_a_scheduler_event_are_not_yet_a_cause():
    assert diagnose([worker()], [], [gpu_node(efa="0")]) == [], "expected no finding before the scheduler says why"


def test_first_image_pull_error_is_waited_out_and_the_backoff_is_not():
    pod = worker()
    pod["status"]["containerStatuses"] = [{"image": "img", "state": {"waiting": {"reason": "ErrImagePull"}}}]
    first = diagnose([pod], [], [gpu_node()])
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "ImagePullBackOff"
    later = [r.check for r in diagnose([pod], [], [gpu_node()])]
    assert (first, later) == ([], [CANNOT_START]), (
        f"expected to wait on ErrImagePull, fail on back-off: {first}, {later}"
    )


def test_a_reason_without_a_count_is_still_read():
    """A PreFilter plugin's message stands for every node and carries no count (synthetic example)."""
    got = scheduling_reasons("0/3 nodes are available: node(s) didn't match Pod's node affinity/selector.")
    assert got == {"node(s) didn't match Pod's node affinity/selector": 0}, f"got {got}"


# --------------------------------------------------------------------------- the Ray head


def system_node(cpu: str = "3920m", memory: str = "15136736Ki", name: str = "s1") -> dict:
    """An m7i.xlarge system node's allocatable as in tests/fixtures/k8s/nodes.json."""
    return {
        "metadata": {"name": name, "labels": {"role": "system"}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": cpu, "memory": memory}},
    }


def ray_head(cpu: str = "2", memory: str = "8Gi", selector: str = "system") -> dict:
    return {
        "metadata": {"name": "h0"},
        "spec": {
            "nodeSelector": {"role": selector},
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": "Pending"},
    }


def head_event(message: str) -> dict:
    return {"reason": "FailedScheduling", "involvedObject": {"name": "h0"}, "message": message}


HEAD_SHORT = (
    "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {nvidia.com/gpu: true}. "
    "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not "
    "helpful for scheduling."
)


def test_head_larger_than_its_system_node_fails_naming_the_head_key_and_not_the_gpu_nodes_taint():
    rows = diagnose_head([ray_head(memory="32Gi")], [head_event(HEAD_SHORT)], [system_node(), gpu_node()])
    got = [(r.check, "is Pending: Insufficient memory (" in r.detail, "rayHeadMemory" in r.fix) for r in rows]
    assert got == [(HEAD_CANNOT_START, True, True)], f"expected the head's memory and its key, got {rows}"
    assert "toleration" not in rows[0].fix, f"the GPU nodes' taint is not the head's cause: {rows[0].fix}"


def test_head_event_its_node_contradicts_is_waited_out():
    """The node is full of other pods (the event), but its allocatable holds the head: not certain, wait."""
    assert diagnose_head([ray_head()], [head_event(HEAD_SHORT)], [system_node(), gpu_node()]) == [], "expected a wait"


def test_head_whose_selector_matches_no_node_fails_once_the_scheduler_says_so():
    message = (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated "
        "taint {nvidia.com/gpu: true}."
    )
    before = diagnose_head([ray_head(selector="sys")], [], [system_node(), gpu_node()])
    rows = diagnose_head([ray_head(selector="sys")], [head_event(message)], [system_node(), gpu_node()])
    assert before == [] and [r.check for r in rows] == [HEAD_CANNOT_START], f"got {before} then {rows}"
    assert "no node of 2 matches role=sys" in rows[0].detail, rows[0].detail


def test_head_image_back_off_fails_and_its_first_pull_error_is_waited_out():
    pod = ray_head()
    pod["status"]["containerStatuses"] = [{"image": "img", "state": {"waiting": {"reason": "ErrImagePull"}}}]
    first = diagnose_head([pod], [], [system_node()])
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "ImagePullBackOff"
    later = [(r.check, "cannot pull image img" in r.detail) for r in diagnose_head([pod], [], [system_node()])]
    assert (first, later) == ([], [(HEAD_CANNOT_START, True)]), f"got {first}, {later}"


def test_running_head_gives_no_finding():
    pod = ray_head(memory="32Gi")
    pod["status"]["phase"] = "Running"
    assert diagnose_head([pod], [head_event(HEAD_SHORT)], [system_node()]) == [], "a Running head is not Pending"


# ---- KubeRay's wait-gcs-ready init container (tests/fixtures/k8s/README.md names its source) ------------------
def initializing(state: dict, restarts: int = 0, last: dict | None = None) -> dict:
    """A worker whose wait-gcs-ready init container is in ``state`` (the kubelet's initContainerStatuses)."""
    pod = worker()
    status = {"name": "wait-gcs-ready", "image": "img", "restartCount": restarts, "state": state}
    pod["status"]["initContainerStatuses"] = [{**status, **({"lastState": last} if last else {})}]
    pod["status"]["containerStatuses"] = [{"name": "ray-worker", "state": {"waiting": {"reason": "PodInitializing"}}}]
    return pod


def test_a_first_init_image_pull_error_is_waited_out():
    pod = initializing({"waiting": {"reason": "ErrImagePull", "message": "rpc error"}})
    assert diagnose([pod], [], [gpu_node()]) == [], "the first pull error may pass"


def test_a_crash_looping_init_container_is_named_with_its_exit_and_the_log_to_read():
    last = {"terminated": {"exitCode": 127, "reason": "Error"}}
    pod = initializing({"waiting": {"reason": "CrashLoopBackOff"}}, restarts=4, last=last)
    (row,) = diagnose([pod], [], [gpu_node()])
    assert "Init:CrashLoopBackOff: init container wait-gcs-ready exited 127 (Error), 4 restart(s)" in row.detail, row
    assert "logs w0 -c wait-gcs-ready --previous" in row.fix, row.fix


def test_a_running_wait_gcs_ready_is_judged_by_its_last_log_line():
    pod = initializing({"running": {"startedAt": "2026-12-02T10:13:31Z"}})
    waiting = "100 seconds elapsed: Waiting for GCS to be ready."
    still = "125 seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, refer to the FAQ at x."
    early = diagnose([pod], [], [gpu_node()], log_of=lambda p, c: waiting)
    late = [r.check for r in diagnose([pod], [], [gpu_node()], log_of=lambda p, c: still)]
    assert (early, late) == ([], [CANNOT_START]), (early, late)
