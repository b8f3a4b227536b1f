"""Settings of the Ray head and worker pods (and the NVIDIA plugin beside them) that decide whether Ray starts.

`rayStartParams` become `ray start --<key>=<value>` flags (KubeRay,
https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/config.html#ray-start-parameters), so a
key must be an option of the `ray start` of the container's Ray, 2.58.0, which is the version
pyproject.toml pins here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import quiet_stack
from ray.scripts.scripts import start as ray_start

from infra import manifests as m

REPO = Path(__file__).resolve().parents[2]
RAY_START_OPTIONS = {opt for param in ray_start.params for opt in param.opts}


@pytest.fixture(scope="module")
def cfg():
    return quiet_stack("us-west-2")


def groups(cfg) -> dict[str, dict]:
    spec = m.raycluster_spec(cfg.ray)
    return {"head": spec["headGroupSpec"], "worker": spec["workerGroupSpecs"][0]}


def container(cfg, group: str) -> dict:
    return groups(cfg)[group]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("group", ["head", "worker"])
def test_ray_start_params_are_options_of_ray_start(cfg, group):
    keys = groups(cfg)[group]["rayStartParams"]
    unknown = sorted(k for k in keys if f"--{k}" not in RAY_START_OPTIONS)
    assert not unknown, f"{group}: expected every rayStartParams key to be a `ray start` option, got unknown {unknown}"


def test_head_dashboard_host_is_an_ip_address(cfg):
    host = groups(cfg)["head"]["rayStartParams"]["dashboard-host"]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pytest.fail(f"expected dashboard-host to be an IP address the dashboard can bind, got {host!r}")


def test_worker_group_is_one_host_per_replica_without_autoscaling(cfg):
    spec = m.raycluster_spec(cfg.ray)
    got = (spec["enableInTreeAutoscaling"], spec["workerGroupSpecs"][0]["numOfHosts"])
    # numOfHosts > 1 is KubeRay's multi-host (TPU) group: it multiplies the pods per replica.
    assert got == (False, 1), f"expected (enableInTreeAutoscaling False, numOfHosts 1), got {got}"


@pytest.mark.parametrize("group", ["head", "worker"])
def test_pre_stop_runs_ray_stop_through_a_shell(cfg, group):
    command = container(cfg, group)["lifecycle"]["preStop"]["exec"]["command"]
    assert command == ["/bin/sh", "-c", "ray stop"], f"{group}: expected ['/bin/sh', '-c', 'ray stop'], got {command}"


def test_worker_may_lock_memory_for_efa(cfg):
    # libfabric registers (pins) NCCL's buffers; without IPC_LOCK the EFA provider cannot.
    caps = container(cfg, "worker")["securityContext"]["capabilities"]["add"]
    assert caps == ["IPC_LOCK"], f"expected capabilities.add ['IPC_LOCK'], got {caps}"


def test_head_requests_its_configured_cpu_and_memory(cfg):
    expected = {"cpu": cfg.ray.head.cpu, "memory": cfg.ray.head.memory}
    got = container(cfg, "head")["resources"]["requests"]
    assert got == expected, f"expected head requests {expected}, got {got}"


def test_worker_mounts_dev_shm(cfg):
    paths = [vm["mountPath"] for vm in container(cfg, "worker")["volumeMounts"]]
    assert "/dev/shm" in paths, f"expected a mount at /dev/shm (NCCL and the object store), got {paths}"


def test_nvidia_plugin_runs_without_gpu_feature_discovery():
    gfd = m.nvidia_device_plugin_values()["gfd"]
    assert gfd == {"enabled": False}, f"expected gfd {{'enabled': False}} (no NFD DaemonSets), got {gfd}"


def test_nvidia_plugin_tolerates_critical_addons_only():
    # The upstream chart's default toleration (github.com/NVIDIA/k8s-device-plugin, deployments/helm values.yaml),
    # kept because setting `tolerations` replaces the chart's list: the plugin is a critical add-on.
    tolerations = m.nvidia_device_plugin_values()["tolerations"]
    expected = {"key": "CriticalAddonsOnly", "operator": "Exists"}
    assert expected in tolerations, f"expected {expected} in {tolerations}"


@pytest.mark.parametrize("group", ["head", "worker"])
def test_every_ray_container_knows_the_stack_region(cfg, group):
    # Pod Identity gives credentials, not a region; IMDS is out of reach (hop limit 1).
    env = {e["name"]: e["value"] for e in container(cfg, group)["env"]}
    got = (env.get("AWS_REGION"), env.get("AWS_DEFAULT_REGION"))
    assert got == ("us-west-2", "us-west-2"), f"{group}: expected AWS_REGION/AWS_DEFAULT_REGION us-west-2, got {got}"


def test_worker_requests_the_efa_huge_pages_by_default(cfg):
    limits = container(cfg, "worker")["resources"]["limits"]
    assert limits.get("hugepages-2Mi") == "5120Mi", f"expected hugepages-2Mi 5120Mi, got {limits}"


def test_worker_hugepages_off_drops_the_request_and_tells_libfabric(cfg):
    ray = replace(cfg.ray, worker=replace(cfg.ray.worker, hugepages=False))
    worker = m.raycluster_spec(ray)["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in worker["env"]}
    got = ("hugepages-2Mi" in worker["resources"]["limits"], env.get("FI_EFA_USE_HUGE_PAGE"))
    assert got == (False, "0"), f"expected (no hugepages limit, FI_EFA_USE_HUGE_PAGE=0), got {got}"


def _ray_containers(cfg) -> list[tuple[str, dict]]:
    return [(g, c) for g, spec in groups(cfg).items() for c in spec["template"]["spec"]["containers"]]


def test_every_ray_container_sets_both_probes_so_kuberay_injects_none(cfg):
    # KubeRay v1.5.2 injects its wget exec probe into each probe a Ray container leaves unset (common/pod.go,
    # initLivenessAndReadinessProbe), so a container with only one of the two still gets a wget probe.
    missing = [
        (g, c["name"], p) for g, c in _ray_containers(cfg) for p in ("livenessProbe", "readinessProbe") if p not in c
    ]
    assert not missing, f"expected liveness and readiness probes on every Ray container, missing {missing}"


def test_no_ray_probe_runs_a_command_in_the_image(cfg):
    probes = {(g, p): c[p] for g, c in _ray_containers(cfg) for p in ("livenessProbe", "readinessProbe") if p in c}
    not_http = sorted(
        key for key, probe in probes.items() if set(probe) & {"exec", "tcpSocket", "grpc"} or "httpGet" not in probe
    )
    assert not not_http, f"expected httpGet probes that need no tool in the image, got other handlers at {not_http}"


def test_probes_reach_ray_on_the_ports_ray_start_listens_on(cfg):
    # The probes use Ray's default agent and dashboard ports; a rayStartParams override would leave them knocking
    # on a closed port and the liveness probe restarting healthy pods.
    overrides = {k for spec in groups(cfg).values() for k in spec["rayStartParams"]} & {
        "dashboard-agent-listen-port",
        "dashboard-port",
    }
    assert not overrides, f"expected Ray's default health ports, got rayStartParams overriding {sorted(overrides)}"
