"""infra.manifests and infra.catalog: the pure builders behind every EFA-relevant setting."""

from __future__ import annotations

import ast
import ipaddress
import re
from dataclasses import replace

import pytest
from conftest import REPO, quiet_stack

from infra import manifests as m
from infra.catalog import instance_spec, known_instance_types


@pytest.fixture(scope="module")
def cfg():
    return quiet_stack("us-east-2")


@pytest.fixture(scope="module")
def spec(cfg):
    return m.raycluster_spec(cfg.ray)


def _worker(spec):
    return spec["workerGroupSpecs"][0]


def _worker_container(spec):
    return _worker(spec)["template"]["spec"]["containers"][0]


def _head_container(spec):
    return spec["headGroupSpec"]["template"]["spec"]["containers"][0]


# --------------------------------------------------------------------------- catalog


def test_g6_12xlarge_allocatable_fits_the_reference_worker():
    g6 = instance_spec("g6.12xlarge")
    assert (g6.gpus, g6.vcpus, g6.memory_gib, g6.max_efa_interfaces) == (4, 48, 192, 1)
    assert 47.7 <= g6.allocatable_cpu <= 47.9, f"expected about 47.8 allocatable CPU, got {g6.allocatable_cpu}"
    assert 165 <= g6.allocatable_memory_gib <= 176, (
        f"expected about 170-175 GiB allocatable, got {g6.allocatable_memory_gib}"
    )


def test_catalog_efa_interfaces_never_exceed_network_cards():
    bad = [t for t in known_instance_types() if instance_spec(t).max_efa_interfaces > instance_spec(t).network_cards]
    assert not bad, f"more EFA interfaces than network cards for {bad}"


def test_unknown_instance_type_names_the_known_ones():
    with pytest.raises(KeyError, match="g6.12xlarge"):
        instance_spec("x9.large")


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("vpc, azs", [("10.0.0.0/16", ("a", "b")), ("10.1.0.0/22", ("a", "b", "c"))])
def test_subnet_plan_stays_inside_the_vpc_without_overlap(vpc, azs):
    plan = m.subnet_plan(vpc, azs)
    nets = [ipaddress.IPv4Network(c) for p in plan for c in (p.private_cidr, p.public_cidr)]
    outside = [str(n) for n in nets if not n.subnet_of(ipaddress.IPv4Network(vpc))]
    assert not outside, f"subnets outside {vpc}: {outside}"
    overlaps = [(str(a), str(b)) for i, a in enumerate(nets) for b in nets[i + 1 :] if a.overlaps(b)]
    assert not overlaps, f"overlapping subnets: {overlaps}"
    assert [p.az for p in plan] == list(azs)


def test_private_subnets_carry_the_eks_tags():
    tags = m.private_subnet_tags("c1")
    assert tags == {"kubernetes.io/role/internal-elb": "1", "kubernetes.io/cluster/c1": "shared"}


# --------------------------------------------------------------------------- EFA node group


def test_multi_card_instance_gets_efa_only_on_further_cards():
    nics = m.efa_network_interfaces(32)
    assert [n["network_card_index"] for n in nics] == list(range(32))
    assert (nics[0]["device_index"], nics[0]["interface_type"]) == (0, "efa")
    others = {(n["device_index"], n["interface_type"]) for n in nics[1:]}
    assert others == {(1, "efa-only")}, f"cards 1..31 should be device 1 efa-only, got {others}"


def test_efa_interfaces_name_no_subnet():
    assert all("subnet_id" not in n for n in m.efa_network_interfaces(4)), (
        "the node group, not the template, picks the subnet"
    )


def test_efa_security_group_allows_itself_both_ways_and_nothing_else():
    rules = m.efa_security_group_rules()
    assert {(r["direction"], r["ip_protocol"], r["self"]) for r in rules} == {
        ("ingress", "-1", True),
        ("egress", "-1", True),
    }
    assert not [r for r in rules if any("cidr" in k for k in r)], f"EFA rules must not use CIDRs: {rules}"


def test_capacity_block_sets_market_type_and_capacity_type(cfg):
    gpu = replace(cfg.gpu_nodes, capacity_reservation_id="cr-0123456789abcdef0", capacity_block=True)
    cap = m.gpu_capacity(gpu)
    got = (cap.instance_market_options, cap.capacity_type)
    assert got == ({"market_type": "capacity-block"}, "CAPACITY_BLOCK"), f"capacity block gave {got}"


def test_on_demand_reservation_keeps_on_demand(cfg):
    gpu = replace(cfg.gpu_nodes, capacity_reservation_id="cr-0123456789abcdef0", capacity_block=False)
    cap = m.gpu_capacity(gpu)
    got = (cap.capacity_reservation_specification, cap.instance_market_options, cap.capacity_type)
    assert got == (
        {"capacity_reservation_target": {"capacity_reservation_id": "cr-0123456789abcdef0"}},
        None,
        "ON_DEMAND",
    ), f"on-demand reservation gave {got}"


def test_gpu_root_volume_is_encrypted(cfg):
    vol = m.root_volume(cfg.gpu_nodes.root_volume_gib)
    assert vol["ebs"]["encrypted"] == "true" and vol["ebs"]["volume_size"] == cfg.gpu_nodes.root_volume_gib


def test_gpu_nodes_carry_role_and_nvidia_present_labels():
    assert m.gpu_node_labels() == {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
    assert m.system_node_labels() == {"role": "system"}


def test_gpu_taint_is_tolerated_by_workers_and_plugins(spec):
    taint = m.gpu_node_taints()[0]
    effect = {"NO_SCHEDULE": "NoSchedule"}[taint["effect"]]

    def tolerates(tols):
        return any(t["key"] == taint["key"] and t["effect"] == effect and t["operator"] == "Exists" for t in tols)

    assert tolerates(_worker(spec)["template"]["spec"]["tolerations"]), "Ray workers do not tolerate the GPU taint"
    assert tolerates(m.nvidia_device_plugin_values()["tolerations"]), "NVIDIA plugin does not tolerate the GPU taint"
    assert tolerates(m.efa_device_plugin_values("g6.12xlarge")["tolerations"]), (
        "EFA plugin does not tolerate the GPU taint"
    )


# --------------------------------------------------------------------------- charts


def test_chart_pins_are_exact_and_from_their_repositories(cfg):
    pins = {k: (p.chart, p.version, p.repository) for k, p in m.chart_pins(cfg).items()}
    assert pins == {
        "nvidia-device-plugin": ("nvidia-device-plugin", "0.20.0", "https://nvidia.github.io/k8s-device-plugin"),
        "aws-efa-k8s-device-plugin": ("aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts"),
        "kuberay-operator": ("kuberay-operator", "1.5.2", "https://ray-project.github.io/kuberay-helm/"),
    }


def test_device_plugins_select_gpu_nodes_and_operator_the_system_node():
    assert m.nvidia_device_plugin_values()["nodeSelector"] == {"role": "gpu-worker"}
    assert m.efa_device_plugin_values("g6.12xlarge")["nodeSelector"] == {"role": "gpu-worker"}
    assert m.kuberay_operator_values()["nodeSelector"] == {"role": "system"}


def test_efa_plugin_lists_the_stack_instance_type():
    values = m.efa_device_plugin_values("p5.48xlarge")["supportedInstanceLabels"]
    assert values == {"keys": ["node.kubernetes.io/instance-type"], "values": ["p5.48xlarge"]}


def _reader_pod(image: str = "img:1") -> dict:
    return m.efa_counter_reader_daemonset(image)["spec"]["template"]["spec"]


def test_counter_reader_lands_where_the_efa_plugin_does():
    plugin = m.efa_device_plugin_values("g6.12xlarge")
    got = {k: _reader_pod()[k] for k in ("nodeSelector", "tolerations")}
    assert got == {k: plugin[k] for k in ("nodeSelector", "tolerations")}, f"reader {got}, plugin {plugin}"


def test_counter_reader_requests_equal_limits():
    res = _reader_pod()["containers"][0]["resources"]
    assert res["requests"] == res["limits"], res


def test_counter_reader_runs_unprivileged_on_a_read_only_root():
    sc = _reader_pod()["containers"][0]["securityContext"]
    got = (sc["runAsNonRoot"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"], sc["capabilities"])
    assert got == (True, False, True, {"drop": ["ALL"]}), f"got {sc}"


def test_counter_reader_has_no_host_network_and_no_api_token():
    pod = _reader_pod()
    assert (pod.get("hostNetwork"), pod["automountServiceAccountToken"]) == (None, False), pod


def test_counter_reader_selector_matches_its_pods():
    ds = m.efa_counter_reader_daemonset("img:1")["spec"]
    assert ds["selector"]["matchLabels"] == ds["template"]["metadata"]["labels"], ds


# --------------------------------------------------------------------------- RayCluster


def test_ray_version_and_image_are_unchanged(cfg, spec):
    assert spec["rayVersion"] == "2.58.0"
    images = {_head_container(spec)["image"], _worker_container(spec)["image"]}
    assert images == {"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"}, f"images: {images}"


def test_head_requests_equal_limits(spec):
    """The workers' requests == limits is the policy pack's (ray-worker-pods-efa-resources)."""
    res = _head_container(spec)["resources"]
    assert res["requests"] == res["limits"], f"head: requests {res['requests']} != limits {res['limits']}"


def test_worker_resources_are_the_reference_ones(spec):
    assert _worker_container(spec)["resources"]["limits"] == {
        "cpu": "40",
        "memory": "160Gi",
        "nvidia.com/gpu": 4,
        "vpc.amazonaws.com/efa": 1,
        "hugepages-2Mi": "5120Mi",
    }


@pytest.mark.parametrize("which", ["head", "worker"])
def test_ray_tmp_is_a_volume(spec, which):
    pod = spec["headGroupSpec"]["template"] if which == "head" else _worker(spec)["template"]
    mounts = {v["mountPath"]: v["name"] for v in pod["spec"]["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "/tmp/ray" in mounts and "emptyDir" in volumes.get(mounts["/tmp/ray"], {}), (
        f"{which}: mounts {mounts}, volumes {list(volumes)}"
    )


def test_worker_num_gpus_equals_gpu_limit(cfg):
    for gpus, instance in ((4, "g6.12xlarge"), (8, "p5.48xlarge")):
        ray = replace(cfg.ray, worker=replace(cfg.ray.worker, num_gpus=gpus))
        worker = _worker(m.raycluster_spec(ray))
        limit = worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        assert worker["rayStartParams"]["num-gpus"] == str(limit) == str(gpus), (
            f"{instance}: {worker['rayStartParams']} vs {limit}"
        )


def test_worker_env_selects_efa_for_nccl(spec):
    env = {e["name"]: e["value"] for e in _worker_container(spec)["env"]}
    expected = {"FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}
    assert {k: env.get(k) for k in expected} == expected


def test_worker_dev_shm_is_memory_backed_and_sized(cfg, spec):
    worker = _worker(spec)["template"]["spec"]
    mounts = {vm["mountPath"]: vm["name"] for vm in worker["containers"][0]["volumeMounts"]}
    volume = {v["name"]: v for v in worker["volumes"]}[mounts["/dev/shm"]]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": cfg.ray.worker.shm_size}


@pytest.mark.parametrize("which", ["head", "worker"])
def test_pods_run_ray_stop_before_stopping(spec, which):
    container = (_head_container if which == "head" else _worker_container)(spec)
    command = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert command.endswith("ray stop"), f"{which} preStop: {command}"


def test_head_on_system_node_without_gpus(spec):
    head = spec["headGroupSpec"]
    env = {e["name"]: e["value"] for e in _head_container(spec)["env"]}
    assert head["template"]["spec"]["nodeSelector"] == {"role": "system"}
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "void"
    assert "nvidia.com/gpu" not in _head_container(spec)["resources"]["limits"]


def test_workers_select_gpu_nodes(spec):
    assert _worker(spec)["template"]["spec"]["nodeSelector"] == {"role": "gpu-worker"}


def test_head_service_is_cluster_ip_only(spec):
    assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"
    text = repr(spec)
    assert "LoadBalancer" not in text and "NodePort" not in text and "hostPort" not in text, (
        "a Ray port would leave the cluster"
    )


def test_worker_replicas_are_fixed_to_gpu_node_count(cfg, spec):
    w = _worker(spec)
    counts = (w["replicas"], w["minReplicas"], w["maxReplicas"])
    assert counts == (cfg.gpu_nodes.node_count,) * 3, f"expected {cfg.gpu_nodes.node_count} x3, got {counts}"


def test_run_dir_root_exists_in_head_and_workers(spec):
    for container in (_head_container(spec), _worker_container(spec)):
        paths = [vm["mountPath"] for vm in container["volumeMounts"]]
        assert "/tmp/ray-efa-eks" in paths, f"{container['name']} mounts {paths}"


# --------------------------------------------------------------------------- import direction


def test_infra_never_imports_training_code():
    """Of workloads, infra imports only the stdlib-only contract modules (.ci/checks/contract_imports.py)."""
    forbidden = re.compile(r"^(torch|ray|transformers|automation)(\.|$)")
    found = []
    for path in sorted((REPO / "infra").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            found += [f"{path.name}: {n}" for n in names if forbidden.match(n)]
    assert not found, f"infra imports training/driver code: {found}"


def test_requirements_pin_only_the_infra_stack():
    pins = dict(
        line.split("==")
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert {k: pins.get(k) for k in ("pulumi", "pulumi-aws", "pulumi-eks", "pulumi-kubernetes")} == {
        "pulumi": "3.272.0",
        "pulumi-aws": "7.51.1",
        "pulumi-eks": "4.4.0",
        "pulumi-kubernetes": "4.34.2",
    }
    assert not {"torch", "ray", "transformers"} & {k.split("[")[0].lower() for k in pins}, f"training deps in {pins}"
