"""verify against recorded Kubernetes API objects, read through the real kubernetes client."""

from __future__ import annotations

import json
import socket

import _driver_helpers as helpers  # tests/integration is on pytest's pythonpath
import _worlds as worlds
import pytest

from automation.errors import DriverError
from automation.kube import ExecResult, KubeApi
from automation.pipeline import Expectations
from automation.ray_head import RESOURCES_MARK
from automation.steps.verify import verify_cluster

EXP = Expectations(
    node_count=2,
    gpu_az="us-west-2a",
    gpus_per_node=4,
    efa_per_node=1,
    namespace="ray",
    raycluster="ray-efa",
    worker_replicas=2,
)
GPU_NODE = "ip-10-30-1-17.us-west-2.compute.internal"


def ray_says(gpus: float, fi_info: ExecResult | None = None):
    """The head pod answers Ray's resources; worker pods answer verify's fi_info script."""

    def answer(pod, cmd, stdin):
        if "fi_info" in " ".join(cmd):
            return fi_info or helpers.fi_info_answer()
        return ExecResult(0, f"{RESOURCES_MARK}{json.dumps({'CPU': 82.0, 'GPU': gpus})}\n", "")

    return helpers.ScriptedExec(answer)


def run_verify(objects, pod_exec=None):
    with helpers.FakeKubeApi(objects) as api:
        kube = KubeApi(api.kubeconfig())
        return verify_cluster(kube, EXP, pod_exec or ray_says(8), node_wait_s=0, pod_wait_s=0, sleep=lambda s: None)


def failing(result):
    return {f.check: f.detail for f in result.findings if f.status == "fail"}


def node(objects, name=GPU_NODE):
    return next(n for n in objects["nodes"]["items"] if n["metadata"]["name"] == name)


def test_healthy_cluster_passes_every_check():
    result = run_verify(helpers.load_k8s())
    assert result.status == "pass", f"expected pass, got {result.status}: {failing(result)}"


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
    worker = next(p for p in objects["pods"]["items"] if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
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
    pods = [c[0] for c in pod_exec.calls if c[2][:2] == ["python", "-c"]]
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
        pod_reads = [p for p in api.requests if "/pods" in p]
    rows = failing(result)
    assert list(rows) == ["GPU nodes hugepages-2Mi"] and pod_reads == [], f"got {rows}, pod reads {pod_reads}"
    assert f"{worlds.GPU_NODE} has 0Mi" in rows["GPU nodes hugepages-2Mi"], rows


def test_efa_is_checked_with_fi_info_in_one_worker_pod_per_gpu_node():
    pod_exec = ray_says(8)
    run_verify(helpers.load_k8s(), pod_exec)
    got = sorted(c[0] for c in pod_exec.calls if "fi_info -p efa" in " ".join(c[2]))
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
    asked_ray = [c for c in pod_exec.calls if c[2][:2] == ["python", "-c"]]
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
