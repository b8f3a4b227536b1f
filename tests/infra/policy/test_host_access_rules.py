"""The two policies added with the EFA counter reader (infra/policy/policies.py), over hand-built resources in
the shapes the Kubernetes API and the EKS provider take them (pod templates where each workload kind keeps them,
the node group's `nodeRepairConfig`, the add-on's `addonName`): every kind and every container is judged, every
mount of the host's /sys must be read-only, and node auto repair counts only when stated on."""

from __future__ import annotations

import pytest

from infra.names import (
    EFA_COUNTER_READER,
    EFA_COUNTER_READER_NAMESPACE,
    GPU_ROLE,
    HOST_SYS,
    NODE_MONITORING_AGENT,
    ROLE_LABEL,
)
from infra.policy import policies as pp
from tests.infra.policy.test_policies import resource, violations

SYS = {"name": "host-sys", "hostPath": {"path": HOST_SYS, "type": "Directory"}}


def mount(read_only) -> dict:
    m = {"name": "host-sys", "mountPath": "/host/sys"}
    return m if read_only == "unset" else {**m, "readOnly": read_only}


def reader(init_mount=None, main_mount=True, namespace=EFA_COUNTER_READER_NAMESPACE, kind="apps/v1:DaemonSet"):
    """The counter reader's DaemonSet (or another kind of that name), its pod's mounts of the host's /sys."""
    init = [{"name": "init", "volumeMounts": [mount(init_mount)]}] if init_mount is not None else []
    main = [{"name": "read", "volumeMounts": [mount(main_mount)] if main_mount is not None else []}]
    sys_volume = {**SYS, "hostPath": dict(SYS["hostPath"])}  # a copy: a test may edit it
    pod = {"volumes": [{"name": "tmp", "emptyDir": {}}, sys_volume], "initContainers": init, "containers": main}
    props = {"metadata": {"name": EFA_COUNTER_READER, "namespace": namespace}, "spec": {"template": {"spec": pod}}}
    return resource(f"kubernetes:{kind}", "reader", props)


def host_access(*resources) -> list[str]:
    return violations(pp.host_access_only_the_counter_reader, list(resources))


def test_the_reader_mounting_the_host_sys_read_only_in_every_container_passes():
    assert host_access(reader(init_mount=True, main_mount=True)) == []


@pytest.mark.parametrize(("init", "main"), [(False, True), (True, "unset"), (None, False), (True, "true")])
def test_any_one_mount_of_the_host_sys_not_read_only_is_reported(init, main):
    got = host_access(reader(init_mount=init, main_mount=main))
    assert got == [f"hostPath {HOST_SYS} mounted writable (every mount must be readOnly)"], got


def test_the_host_sys_declared_but_mounted_by_no_container_is_reported():
    r = reader(main_mount=True)
    r.props["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = []
    assert host_access(r) == [f"hostPath {HOST_SYS} mounted writable (every mount must be readOnly)"]


@pytest.mark.parametrize(
    ("namespace", "kind"), [("ray", "apps/v1:DaemonSet"), (EFA_COUNTER_READER_NAMESPACE, "apps/v1:Deployment")]
)
def test_the_same_mount_by_the_readers_name_in_another_namespace_or_kind_is_reported(namespace, kind):
    got = host_access(reader(namespace=namespace, kind=kind))
    assert got == [f"hostPath '{HOST_SYS}' outside the {EFA_COUNTER_READER} DaemonSet"], got


def pod_of(kind: str, pod: dict) -> dict:
    """``pod`` placed where ``kind`` keeps its pod template (the API's workload resources, KubeRay's CRD)."""
    template = {"template": {"spec": pod}}
    return {
        "kubernetes:core/v1:Pod": {"spec": pod},
        "kubernetes:batch/v1:CronJob": {"spec": {"jobTemplate": {"spec": template}}},
        pp.RAY_CLUSTER: {"spec": {"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": [template]}},
    }.get(kind, {"spec": template})


KINDS = [
    "kubernetes:core/v1:Pod",
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:apps/v1:ReplicaSet",
    "kubernetes:batch/v1:Job",
    "kubernetes:batch/v1:CronJob",
    pp.RAY_CLUSTER,
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_workload_kinds_pod_is_judged_namespaces_privilege_and_host_paths_alike(kind):
    pod = {
        "hostNetwork": True,
        "hostPID": True,
        "hostIPC": True,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "initContainers": [{"name": "setup", "securityContext": {"privileged": True}}],
        "containers": [{"name": "app", "securityContext": {"privileged": False}}, {"name": "side"}],
    }
    got = host_access(resource(kind, "x", pod_of(kind, pod)))
    assert got == [
        "hostNetwork: true",
        "hostPID: true",
        "hostIPC: true",
        "container setup is privileged",
        f"hostPath '/' outside the {EFA_COUNTER_READER} DaemonSet",
    ], got


def test_the_ray_head_and_every_worker_group_are_judged():
    bad = {"hostPID": True}
    props = {
        "spec": {"headGroupSpec": {"template": {"spec": bad}}, "workerGroupSpecs": [{}, {"template": {"spec": bad}}]}
    }
    assert host_access(resource(pp.RAY_CLUSTER, "rc", props)) == ["hostPID: true", "hostPID: true"]


def test_a_kind_without_pod_templates_is_not_judged():
    assert host_access(resource("kubernetes:core/v1:ConfigMap", "cm", {"spec": {"hostNetwork": True}})) == []


def node_group(name: str, role: str, repair) -> object:
    props = {"labels": {ROLE_LABEL: role}}
    if repair is not None:
        props["nodeRepairConfig"] = repair
    return resource(pp.NODE_GROUP, name, props)


AGENT = resource(pp.ADDON, "agent", {"addonName": NODE_MONITORING_AGENT})


def repair(*resources) -> list[str]:
    return violations(pp.gpu_node_repair, list(resources))


@pytest.mark.parametrize("config", [None, {}, {"enabled": False}, {"enabled": "true"}, {"enabled": None}])
def test_node_auto_repair_counts_only_when_stated_on(config):
    got = repair(node_group("gpu", GPU_ROLE, config), AGENT)
    assert got == ["gpu: the GPU node group's node auto repair is off (nodeRepairConfig.enabled)"], got


def test_every_gpu_node_group_is_judged_and_only_gpu_node_groups():
    got = repair(
        node_group("sys", "system", None),
        node_group("g1", GPU_ROLE, {"enabled": True}),
        node_group("g2", GPU_ROLE, None),
        AGENT,
    )
    assert got == ["g2: the GPU node group's node auto repair is off (nodeRepairConfig.enabled)"], got


def test_without_the_monitoring_agent_add_on_a_gpu_node_group_is_reported_and_without_gpus_nothing():
    other = resource(pp.ADDON, "cni", {"addonName": "vpc-cni"})
    got = repair(node_group("gpu", GPU_ROLE, {"enabled": True}), other)
    assert got == [
        f"no {NODE_MONITORING_AGENT} add-on: nothing sets the GPU condition (AcceleratedHardwareReady) that node "
        "auto repair acts on"
    ], got
    assert repair(node_group("sys", "system", None), other) == []


def test_a_privileged_app_container_is_reported_by_name():
    pod = {"containers": [{"name": "app", "securityContext": {"privileged": True}}]}
    assert host_access(resource("kubernetes:core/v1:Pod", "p", {"spec": pod})) == ["container app is privileged"]


def test_the_readers_host_path_other_than_the_host_sys_directory_is_reported_with_path_and_type():
    r = reader()
    r.props["spec"]["template"]["spec"]["volumes"][1]["hostPath"] = {"path": "/sys/class", "type": "DirectoryOrCreate"}
    got = host_access(r)
    assert got == [f"hostPath '/sys/class' (type 'DirectoryOrCreate'): only {HOST_SYS} is allowed"], got


def test_a_gpu_node_group_without_repair_is_reported_against_that_node_group():
    """A stack policy names the resource by URN (pulumi_policy's ReportViolation), or the report is the stack's."""
    found = []
    ng = node_group("gpu", GPU_ROLE, None)
    pp.gpu_node_repair.validate(pp.StackValidationArgs([ng, AGENT]), lambda m, urn=None: found.append(urn))
    assert found == [ng.urn], found
