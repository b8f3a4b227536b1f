"""verify against recorded Kubernetes API objects, read through the real kubernetes client."""

from __future__ import annotations

import json
import socket

import _driver_helpers as helpers  # tests/integration is on pytest's pythonpath
import pytest

from automation.errors import DriverError
from automation.kube import ExecResult, KubeApi
from automation.steps.verify import RESOURCES_MARK, Expectations, verify_cluster

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


def ray_says(gpus: float):
    return helpers.ScriptedExec(
        lambda pod, cmd, stdin: ExecResult(0, f"{RESOURCES_MARK}{json.dumps({'CPU': 82.0, 'GPU': gpus})}\n", "")
    )


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
    assert "expected 2 Ready nodes labelled role=gpu-worker, got 1 Ready of 1" in rows.get("GPU nodes Ready", ""), rows


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
    pods = [c[0] for c in pod_exec.calls]
    assert pods == ["ray-efa-head-9xk2q"], f"expected one exec into the head pod, got {pods}"


def test_unreachable_cluster_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again on exit: nothing listens there
    kube = KubeApi(helpers.kubeconfig_for(f"http://127.0.0.1:{port}"))
    with pytest.raises(DriverError) as err:
        kube.list_nodes("role=gpu-worker")
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in str(err.value), str(err.value)
