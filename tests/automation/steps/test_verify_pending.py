"""Reading why a worker pod is Pending: the scheduler's `<count> <reason>` items from recorded
FailedScheduling messages (tests/fixtures/k8s/failed_scheduling.jsonl, each with its source) and the
cross-check against the nodes' own objects."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from automation.pipeline import Finding
from automation.steps import verify_pending as vp
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


# ---- Each certain cause of a Pending Ray pod as the whole finding verify prints (check, status, detail, fix), and the
# shapes the API really returns around it: objects without status or spec, several pods and events, events of other
# pods and reasons, timestamps only some events carry (issue 48).
#
# Shapes: core/v1 Pod ``status.containerStatuses`` / ``initContainerStatuses`` (ContainerStateWaiting reason and
# message, ``lastState.terminated`` exitCode and reason, restartCount), Node ``status.allocatable`` and conditions,
# Event ``involvedObject``, ``lastTimestamp`` and ``eventTime`` (kubernetes/api core/v1 types.go); the scheduler's
# FailedScheduling messages as in tests/fixtures/k8s/failed_scheduling.jsonl; KubeRay 1.5.2's wait-gcs-ready init
# container (ray-project/kuberay ray-operator/controllers/ray/common/pod.go at v1.5.2).

IMG = "public.ecr.aws/x/ray:1"
MSG = (
    "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption "
    "victims found for incoming pod."
)


def pod(name="w-1", phase="Pending", ns=None, containers=None, init=None, spec=None) -> dict:
    meta = {"name": name} | ({"namespace": ns} if ns else {})
    status = {"phase": phase} | ({"containerStatuses": containers} if containers else {})
    status |= {"initContainerStatuses": init} if init else {}
    return {"metadata": meta, "status": status, "spec": spec or {}}


def waiting(reason, message=None, **more) -> dict:
    w = {"reason": reason} | ({"message": message} if message is not None else {})
    return {"name": more.pop("name", "ray-worker"), "image": IMG, "state": {"waiting": w}} | more


def gpu_pod(name="w-1", gpus="4") -> dict:
    spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
    return pod(name, spec=spec)


def node(name="n-1", gpus="0", ready=True) -> dict:
    cond = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"name": name}, "status": {"conditions": cond, "allocatable": {"nvidia.com/gpu": gpus}}}


def failed(pod_name="w-1", message=MSG, at=None, field="lastTimestamp", reason="FailedScheduling") -> dict:
    e = {"reason": reason, "message": message, "involvedObject": {"name": pod_name}}
    return e | ({field: at} if at else {})


# ---- image pulls ------------------------------------------------------------------------------------------------
def test_a_container_the_kubelet_gave_up_pulling_is_the_whole_finding():
    got = vp.image_pull_failure(pod(containers=[waiting("ContainerCreating"), waiting("ImagePullBackOff", "Back-off")]))
    assert got == Finding(
        vp.CANNOT_START, "fail", f"pod w-1 cannot pull image {IMG}: ImagePullBackOff: Back-off", vp.IMAGE_FIX
    )


def test_a_pull_failure_without_a_message_ends_with_its_reason():
    got = vp.image_pull_failure(pod(containers=[waiting("InvalidImageName")]), vp.HEAD_CANNOT_START)
    assert got == Finding(
        vp.HEAD_CANNOT_START, "fail", f"pod w-1 cannot pull image {IMG}: InvalidImageName: ", vp.IMAGE_FIX
    )


@pytest.mark.parametrize("p", [{"metadata": {"name": "w"}}, pod(containers=[waiting("ErrImagePull", "x")])])
def test_a_pod_without_status_or_with_a_first_pull_error_is_no_finding(p):
    assert vp.image_pull_failure(p) is None


# ---- init containers ---------------------------------------------------------------------------------------------
def test_an_init_container_that_cannot_pull_is_the_whole_finding():
    init = [waiting("ImagePullBackOff", "Back-off pulling", name=vp.GCS_WAIT)]
    got = vp.init_failure(pod(init=init))
    detail = f"pod w-1 is stuck at Init:ImagePullBackOff: init container {vp.GCS_WAIT} cannot pull image {IMG}: "
    detail += "Back-off pulling"
    assert got == Finding(vp.CANNOT_START, "fail", detail, vp.IMAGE_FIX)


def test_an_init_pull_failure_without_a_message_ends_after_the_image():
    got = vp.init_failure(pod(init=[waiting("ErrImageNeverPull", name="i")]))
    assert got is not None and got.detail.endswith(f"cannot pull image {IMG}: ")


def test_a_crash_looping_init_container_names_its_exit_restarts_and_namespace():
    init = [
        waiting(
            "CrashLoopBackOff", name="i", restartCount=3, lastState={"terminated": {"exitCode": 1, "reason": "Error"}}
        )
    ]
    got = vp.init_failure(pod(ns="jobs", init=init))
    assert got == Finding(
        vp.CANNOT_START,
        "fail",
        "pod w-1 is stuck at Init:CrashLoopBackOff: init container i exited 1 (Error), 3 restart(s)",
        "kubectl -n jobs logs w-1 -c i --previous shows why it exits",
    )


def test_an_init_container_broken_without_a_last_state_says_what_is_unknown():
    init = [{"image": IMG, "state": {"waiting": {"reason": "CreateContainerConfigError"}}}]
    got = vp.init_failure(pod(init=init))
    assert (got.detail, got.fix) == (
        "pod w-1 is stuck at Init:CreateContainerConfigError: init container ? exited ? (?), 0 restart(s)",
        "kubectl -n ray logs w-1 -c ? --previous shows why it exits",
    )


def _gcs(restarts=2):
    return [{"name": vp.GCS_WAIT, "image": IMG, "restartCount": restarts, "state": {"running": {"startedAt": "t"}}}]


def test_a_wait_gcs_ready_still_waiting_is_the_whole_finding_with_its_last_line():
    asked = []

    def log_of(p, container):
        asked.append((p["metadata"]["name"], container))
        return "  Still waiting for GCS to be ready.\n"

    got = vp.init_failure(pod(ns="jobs", init=_gcs()), log_of)
    assert asked == [("w-1", vp.GCS_WAIT)]
    assert got == Finding(
        vp.CANNOT_START,
        "fail",
        f"pod w-1 is stuck at Init: its {vp.GCS_WAIT} init container cannot reach the Ray head's GCS "
        "(2 restart(s); its last log line: 'Still waiting for GCS to be ready.')",
        "the head pod must be Running and Ready (kubectl -n jobs get pods -l ray.io/node-type=head; kubectl "
        "-n jobs logs <head pod>); the workers reach its GCS through the head Service on port 6379, so the "
        "GPU nodes' security groups must allow traffic to the system node (the cluster security group)",
    )


@pytest.mark.parametrize(
    "init",
    [
        [{"name": "other", "state": {"running": {}}}],
        [{"name": vp.GCS_WAIT, "state": {"waiting": {"reason": "PodInitializing"}}}],
        [{"name": vp.GCS_WAIT, "state": {"terminated": {"exitCode": 0}}}],
    ],
    ids=["another-container", "not-running-yet", "done"],
)
def test_only_a_running_wait_gcs_ready_has_its_log_read(init):
    asked = []
    assert vp.init_failure(pod(init=init), lambda p, c: asked.append(c) or vp.GCS_STILL_WAITING) is None
    assert asked == []


def test_the_first_wait_for_gcs_is_no_finding():
    assert vp.init_failure(pod(init=_gcs(0)), lambda p, c: "Waiting for GCS to be ready.") is None


# ---- scheduling --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reason", "want"),
    [
        ("Insufficient nvidia.com/gpu", "Insufficient nvidia.com/gpu"),
        ("Insufficient vpc.amazonaws.com/efa (1 more)", "Insufficient vpc.amazonaws.com/efa"),
        ("insufficient cpu", "insufficient cpu"),
        ("node(s) had untolerated taint {nvidia.com/gpu: true}", vp.TAINT),
        ("node(s) didn't match Pod's node affinity/selector", vp.SELECTOR),
        ("node(s) didn't match Pod's node affinity", vp.SELECTOR),
        ("node(s) didn't match node selector", vp.SELECTOR),
        ("node(s) had volume node affinity conflict", "node(s) had volume node affinity conflict"),
        (
            "node(s) didn't match pod topology spread constraints",
            "node(s) didn't match pod topology spread constraints",
        ),
    ],
)
def test_each_scheduler_reason_is_named_as_verify_names_it(reason, want):
    assert vp.normalise(reason) == want


def test_a_pod_without_spec_fits_a_ready_node_with_nothing_allocatable():
    assert (
        vp.node_shortfalls(
            {"metadata": {"name": "w"}}, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        )
        == set()
    )


def test_a_node_without_status_is_not_ready_and_has_nothing_allocatable():
    assert vp.node_shortfalls(gpu_pod(gpus="1"), {"metadata": {"name": "n"}}) == {
        vp.NOT_READY,
        "Insufficient nvidia.com/gpu",
    }


def test_a_node_short_of_everything_names_every_shortfall():
    spec = {
        "nodeSelector": {"role": "gpu-worker"},
        "containers": [{"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}],
    }
    n = node(ready=False) | {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}
    n["status"]["allocatable"]["cpu"] = "1999m"
    assert vp.node_shortfalls({"spec": spec}, n) == {
        vp.NOT_READY,
        vp.SELECTOR,
        vp.TAINT,
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
    }


def test_an_unschedulable_worker_is_the_whole_finding_over_each_node():
    nodes = [node("n-2", "2"), node("n-1", "0", ready=False)]
    got = vp.unschedulable(gpu_pod(), [failed()], nodes)
    assert got == Finding(
        vp.CANNOT_START,
        "fail",
        f"pod w-1 is Pending: Insufficient nvidia.com/gpu (scheduler: {MSG!r}; GPU nodes: "
        "n-1: Insufficient nvidia.com/gpu, NotReady; n-2: Insufficient nvidia.com/gpu)",
        vp.FIXES["Insufficient nvidia.com/gpu"],
    )


def test_several_confirmed_reasons_are_named_in_the_schedulers_order_with_a_fix_each():
    msg = "0/1 nodes are available: 1 node(s) had untolerated taint {a: b}, 1 Insufficient nvidia.com/gpu, "
    msg += "1 Insufficient foo."
    n = node() | {"spec": {"taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}]}}
    p = gpu_pod()
    p["spec"]["containers"][0]["resources"]["requests"]["foo"] = "1"
    got = vp.unschedulable(p, [failed(message=msg)], [n])
    assert got.detail.startswith(f"pod w-1 is Pending: {vp.TAINT}, Insufficient nvidia.com/gpu, Insufficient foo (")
    assert got.fix == f"{vp.FIXES[vp.TAINT]}; {vp.FIXES['Insufficient nvidia.com/gpu']}; kubectl describe pod w-1"


@pytest.mark.parametrize("nodes", [[], [node("n-1", "0"), node("n-2", "4")]], ids=["no-nodes", "one-node-holds-it"])
def test_no_finding_while_a_node_could_hold_the_pod_or_none_is_known(nodes):
    assert vp.unschedulable(gpu_pod(), [failed()], nodes) is None


def test_the_latest_event_of_this_pod_is_read_by_last_timestamp_or_event_time():
    events = [
        failed(message="0/1 nodes are available: 1 node(s) didn't match node selector.", at="2026-12-06T05:00:09Z"),
        failed(message=MSG, at="2026-12-06T05:00:10.5Z", field="eventTime"),
        failed(message="0/1 nodes are available: 1 Insufficient cpu.", at="2026-12-06T05:00:08Z"),
        failed(
            message="0/1 nodes are available: 1 node(s) didn't match node selector.",
            reason="Scheduled",
            at="2026-12-06T06:00:00Z",
        ),
        failed(
            pod_name="w-2",
            message="0/1 nodes are available: 1 node(s) didn't match node selector.",
            at="2026-12-06T06:00:00Z",
        ),
        failed(message="0/1 nodes are available: 1 node(s) didn't match node selector."),
    ]
    p = gpu_pod()
    p["spec"]["nodeSelector"] = {"role": "x"}
    got = vp.unschedulable(p, events, [node()])
    assert got is not None and got.detail.startswith("pod w-1 is Pending: Insufficient nvidia.com/gpu ("), got


def test_an_event_without_a_message_confirms_nothing():
    event = {"reason": "FailedScheduling", "involvedObject": {"name": "w-1"}}
    assert vp.unschedulable(gpu_pod(), [event], [node()]) is None


def test_events_without_an_involved_object_are_not_this_pods():
    assert vp.unschedulable(gpu_pod(), [{"reason": "FailedScheduling", "message": MSG}], [node()]) is None


# ---- the head ----------------------------------------------------------------------------------------------------
def _head(selector=None) -> dict:
    spec = {"containers": [{"resources": {"requests": {"cpu": "8"}}}]} | (
        {"nodeSelector": selector} if selector else {}
    )
    return pod("head-1", spec=spec)


SYSTEM = {
    "metadata": {"name": "sys", "labels": {"role": "system"}},
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "2"}},
}


def test_a_head_that_fits_no_picked_node_names_its_nodes():
    msg = "0/1 nodes are available: 1 Insufficient cpu."
    got = vp.head_unschedulable(_head({"role": "system"}), [failed("head-1", msg)], [SYSTEM])
    assert got == Finding(
        vp.HEAD_CANNOT_START,
        "fail",
        f"pod head-1 is Pending: Insufficient cpu (scheduler: {msg!r}; its nodes: sys: Insufficient cpu)",
        vp.HEAD_FIXES["Insufficient cpu"],
    )


@pytest.mark.parametrize(
    ("selector", "wanted"), [({"role": "system", "a": "b"}, "a=b, role=system"), (None, "its affinity")]
)
def test_a_head_no_node_matches_is_the_whole_selector_finding(selector, wanted):
    msg = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    spec_selector = selector if selector else None
    p = _head(spec_selector)
    if selector is None:
        p["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["nowhere"]}]}
                    ]
                }
            }
        }
    got = vp.head_unschedulable(p, [failed("head-1", msg)], [SYSTEM, node()])
    assert got == Finding(
        vp.HEAD_CANNOT_START,
        "fail",
        f"pod head-1 is Pending: {vp.SELECTOR}: no node of 2 matches {wanted} (scheduler: {msg!r})",
        vp.HEAD_FIXES[vp.SELECTOR],
    )


def test_a_head_without_spec_is_judged_against_every_node():
    assert vp.head_unschedulable({"metadata": {"name": "h"}}, [], [SYSTEM]) is None


# ---- several pods -----------------------------------------------------------------------------------------------
def test_the_first_pending_worker_by_name_is_reported_with_how_many_more_wait():
    pods = [
        pod("w-3", containers=[waiting("ImagePullBackOff", "c")]),
        pod("w-2", containers=[waiting("ImagePullBackOff", "b")]),
        pod("w-1", phase="Running", containers=[waiting("ImagePullBackOff", "a")]),
        {"metadata": {"name": "w-0"}},
    ]
    got = vp.diagnose(pods, [], [])
    assert got == [
        Finding(
            vp.CANNOT_START,
            "fail",
            f"pod w-2 cannot pull image {IMG}: ImagePullBackOff: b (1 more worker pod(s) Pending)",
            vp.IMAGE_FIX,
        )
    ]


def test_a_single_pending_worker_has_no_count_of_others():
    got = vp.diagnose([pod("w-2", containers=[waiting("ImagePullBackOff", "b")])], [], [])
    assert [f.detail for f in got] == [f"pod w-2 cannot pull image {IMG}: ImagePullBackOff: b"]


def test_the_first_pending_head_by_name_is_reported():
    heads = [
        pod("h-2", containers=[waiting("ImagePullBackOff", "b")]),
        pod("h-1", containers=[waiting("ImagePullBackOff", "a")]),
        pod("h-0", phase="Running", containers=[waiting("ImagePullBackOff", "z")]),
        {"metadata": {"name": "h-00"}},
    ]
    got = vp.diagnose_head(heads, [], [])
    assert got == [
        Finding(vp.HEAD_CANNOT_START, "fail", f"pod h-1 cannot pull image {IMG}: ImagePullBackOff: a", vp.IMAGE_FIX)
    ]


def test_the_latest_event_by_last_timestamp_wins_over_list_order():
    cpu = "0/1 nodes are available: 1 Insufficient cpu."
    events = [failed(message=MSG, at="2026-12-06T05:00:10Z"), failed(message=cpu, at="2026-12-06T05:00:05Z")]
    got = vp.unschedulable(gpu_pod(), events, [node()])
    assert got is not None and f"(scheduler: {MSG!r};" in got.detail, got


@pytest.mark.parametrize(
    "p", [{"metadata": {"name": "w"}}, {"status": {"phase": "Pending"}}], ids=["no-status", "no-meta"]
)
def test_a_pod_without_status_or_metadata_has_no_init_finding(p):
    assert vp.init_failure(p, lambda pod, c: vp.GCS_STILL_WAITING) is None


def test_a_crash_looping_init_container_of_a_pod_without_metadata_is_named_in_the_default_namespace():
    init = [waiting("CrashLoopBackOff", name="i")]
    got = vp.init_failure({"status": {"initContainerStatuses": init}})
    assert got is not None and got.fix == "kubectl -n ray logs ? -c i --previous shows why it exits"
