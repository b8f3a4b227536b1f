"""Pure builders of everything the components declare: subnet plan, EFA interfaces and
security-group rules, node labels and taints, Helm chart pins and values, and the RayCluster.

No Pulumi here: each function maps typed config to plain dicts/tuples, so the settings that
make EFA work (or silently not work) are unit-tested without the engine, and the components
only wire them into resources. Kubernetes objects use the API's camelCase keys; AWS arguments
use the Pulumi SDK's snake_case names.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from infra.config import ECR_PUBLIC, GpuNodesConfig, RayConfig, RayWorkerConfig, StackConfig
from infra.eks_facts import EFA_HUGEPAGES, EFA_HUGEPAGES_RESOURCE
from infra.names import (
    APP_LABEL,
    EFA_COUNTER_READER,
    EFA_COUNTER_READER_NAMESPACE,
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_ROLE,
    HOST_SYS,
    HOST_SYS_MOUNT,
    ROLE_LABEL,
    RUN_ROOT,
    SYSTEM_ROLE,
)
from workloads.env import NCCL_DEBUG_LEVEL  # the workers' level too: one definition (workloads imports nothing)

# --------------------------------------------------------------------------- labels, taints

# The NVIDIA device plugin chart's default node affinity requires one of its "GPU present"
# labels; without node-feature-discovery nothing sets it, so the node group does.
NVIDIA_GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_TAINT_KEY = "nvidia.com/gpu"  # the node group's taint and the worker pods' toleration must match
GPU_TAINT = {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"}
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# The EKS-optimized Amazon Linux 2023 AMI with the NVIDIA driver and container toolkit; the EFA
# kernel module ships in it as well.
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"


def system_node_labels() -> dict[str, str]:
    """Labels of the system node group (CoreDNS, KubeRay operator, Ray head)."""
    return {ROLE_LABEL: SYSTEM_ROLE}


def gpu_node_labels() -> dict[str, str]:
    """Labels of the EFA GPU node group."""
    return {ROLE_LABEL: GPU_ROLE, NVIDIA_GPU_PRESENT_LABEL: "true"}


# The node group properties `up` leaves alone: the driver (`run`, `scale`) and the idle guard set the desired size.
DRIVER_OWNED_PROPERTIES = ("scalingConfig.desiredSize",)


def gpu_scaling_config(node_count: int) -> dict[str, int]:
    """The GPU node group's sizes: created at ``node_count``, allowed down to 0 (scale-to-zero between runs) and up
    to ``node_count`` (the most a run asks for)."""
    return {"desired_size": node_count, "min_size": 0, "max_size": node_count}


def gpu_node_taints() -> list[dict[str, str]]:
    """Taints of the GPU nodes (EKS API spelling), keeping non-GPU pods off them."""
    return [dict(GPU_TAINT)]


# EKS repairs the GPU nodes (reboot or replace) when the node monitoring agent sets a condition such as
# AcceleratedHardwareReady=False (https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html); off by
# default on a managed node group (pulumi-aws 7.51.1, eks/_inputs.py, NodeGroupNodeRepairConfigArgs.enabled).
GPU_NODE_REPAIR = {"enabled": True}


def node_monitoring_agent_values() -> dict[str, Any]:
    """The node monitoring agent add-on's configuration values (its chart's values, charts/configuration.schema.json,
    aws/eks-node-monitoring-agent at tag v1.7.0, where the add-on's keys are `nodeAgent` and `dcgmAgent`; the EKS
    guide's node-health-nma page still names `monitoringAgent`, the schema's key before v1.6.0, commit 389d2b6).

    The agent itself tolerates every taint (values.yaml `nodeAgent.tolerations: [{operator: Exists}]`), but its DCGM
    host engine (`dcgm-server`, which reads the GPUs' health for the agent) tolerates none, so on the tainted GPU
    nodes it would not run and the agent would set AcceleratedHardwareReady=False with reason DCGMError
    (monitors/nvidia/dcgm/dcgm_reconcile.go; pkg/reasons/reasons.yaml: DCGMError is Fatal), for which EKS takes no
    repair action (the node-health-nma page's table)."""
    return {"dcgmAgent": {"tolerations": [dict(GPU_TOLERATION)]}}


# --------------------------------------------------------------------------- network


@dataclass(frozen=True)
class SubnetPlan:
    az: str
    private_cidr: str
    public_cidr: str


def subnet_plan(vpc_cidr: str, azs: tuple[str, ...]) -> tuple[SubnetPlan, ...]:
    """One private and one public subnet per AZ, carved from ``vpc_cidr`` without overlap.

    Private subnets get a quarter of the VPC each (the VPC CNI gives every pod a VPC address,
    so they need room); public subnets, which hold only the NAT gateway, get a sixty-fourth
    each out of the last quarter. At most three AZs fit.
    """
    vpc = ipaddress.IPv4Network(vpc_cidr)
    quarters = list(vpc.subnets(prefixlen_diff=2))
    if len(azs) > 3:
        raise ValueError(f"at most 3 AZs fit the subnet plan, got {len(azs)}")
    publics = list(quarters[3].subnets(prefixlen_diff=4))
    return tuple(
        SubnetPlan(az=az, private_cidr=str(quarters[i]), public_cidr=str(publics[i])) for i, az in enumerate(azs)
    )


def private_subnet_tags(cluster_name: str) -> dict[str, str]:
    """Tags EKS and the AWS load balancer controller look for on private subnets."""
    return {"kubernetes.io/role/internal-elb": "1", f"kubernetes.io/cluster/{cluster_name}": "shared"}


def public_subnet_tags(cluster_name: str) -> dict[str, str]:
    """Tags of the public (NAT-only) subnets."""
    return {"kubernetes.io/role/elb": "1", f"kubernetes.io/cluster/{cluster_name}": "shared"}


# --------------------------------------------------------------------------- EFA node group


def efa_network_interfaces(efa_interfaces: int) -> list[dict[str, Any]]:
    """The launch template's network interfaces: one EFA interface per network card.

    Card 0 carries the primary interface (device index 0) as ``efa`` (EFA + ENA, so the node
    also has its IP networking there); every further card gets an ``efa-only`` interface at
    device index 1, which is how AWS documents multi-card instances such as p5. No subnet: the
    managed node group supplies it. Security groups are added by the component.
    """
    if efa_interfaces < 1:
        raise ValueError(f"an EFA node needs at least one EFA interface, got {efa_interfaces}")
    return [
        {
            "network_card_index": card,
            "device_index": 0 if card == 0 else 1,
            "interface_type": "efa" if card == 0 else "efa-only",
            "delete_on_termination": "true",
        }
        for card in range(efa_interfaces)
    ]


def efa_security_group_rules() -> list[dict[str, Any]]:
    """Rules of the EFA security group: all traffic in from, and out to, the group itself.

    EFA's SRD transport needs both directions between the nodes' EFA interfaces; an EFA SG
    without the egress self-rule makes NCCL hang or fall back to sockets. Nothing else: no
    CIDR, so nothing from outside the group can reach the nodes through it.
    """
    return [
        {
            "direction": "ingress",
            "ip_protocol": "-1",
            "self": True,
            "description": "EFA: all traffic from members of this group",
        },
        {
            "direction": "egress",
            "ip_protocol": "-1",
            "self": True,
            "description": "EFA: all traffic to members of this group",
        },
    ]


# IMDSv2 only, and a hop limit of 1 so that no pod (one more network hop) reaches IMDS and the node
# role's credentials; the VPC CNI and the Pod Identity agent run on the host network and need no
# second hop. Pods that need AWS get their own role through EKS Pod Identity. Source: EKS best
# practices, "Restrict access to the instance profile assigned to the worker node"
# (https://docs.aws.amazon.com/eks/latest/best-practices/identity-and-access-management.html).
IMDS_HOP_LIMIT = 1


def launch_template_metadata_options() -> dict[str, Any]:
    """IMDSv2 required, hop limit IMDS_HOP_LIMIT (1): node credentials stay on the host network."""
    return {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": IMDS_HOP_LIMIT}


def root_volume(size_gib: int) -> dict[str, Any]:
    """A node's root volume of ``size_gib``: encrypted gp3 (AL2023's root device is /dev/xvda)."""
    return {
        "device_name": "/dev/xvda",
        "ebs": {
            "volume_size": size_gib,
            "volume_type": "gp3",
            "encrypted": "true",
            "delete_on_termination": "true",
        },
    }


USER_DATA_BOUNDARY = "==RAYEFAEKS=="
HUGEPAGES_SYSCTL_FILE = "/etc/sysctl.d/90-ray-efa-eks-hugepages.conf"


def gpu_node_user_data(hugepages_2mi: int) -> str:
    """The GPU launch template's user data: MIME multi-part with one shell part that reserves
    ``hugepages_2mi`` 2 MiB huge pages (never fewer than the node already has) before the kubelet starts;
    ``infra.eks_facts.efa_hugepages_pages`` gives the count for an instance type (the EFA installer's rule).

    The kubelet reads the huge-page pool once, at start, into the node's allocatable ``hugepages-2Mi``; a pool
    made later is never offered to pods. On AL2023, ``nodeadm-run.service`` (which starts the kubelet) runs
    ``After=cloud-final.service``, the unit that runs user-data scripts (awslabs/amazon-eks-ami
    templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service), so this part runs first. EKS merges
    its own NodeConfig part into MIME multi-part user data of a managed node group that uses the EKS AMI
    (https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html). The sysctl.d file keeps the pool
    across a reboot, when cloud-init does not run user scripts again.
    """
    script = f"""#!/bin/bash
# ray-efa-eks: reserve the EFA huge pages before nodeadm starts the kubelet (it reads the pool once).
want={hugepages_2mi}
have=$(cat /proc/sys/vm/nr_hugepages)
if [ "$have" -lt "$want" ]; then
  echo "vm.nr_hugepages = $want" > {HUGEPAGES_SYSCTL_FILE}
  sysctl -w vm.nr_hugepages="$want"
fi
echo "ray-efa-eks: vm.nr_hugepages=$(cat /proc/sys/vm/nr_hugepages) (wanted $want)"
"""
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{USER_DATA_BOUNDARY}"\n\n'
        f"--{USER_DATA_BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{script}\n"
        f"--{USER_DATA_BOUNDARY}--\n"
    )


@dataclass(frozen=True)
class GpuCapacity:
    """How the GPU nodes buy capacity: launch-template arguments and the node group's capacity type.

    ``launch_template_instance_type`` and ``node_group_instance_types`` hold the instance type in
    exactly one of the two places: EKS rejects a node group that lists instance types when its launch
    template names one (https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html).
    """

    capacity_reservation_specification: dict[str, Any] | None
    instance_market_options: dict[str, Any] | None
    capacity_type: str
    launch_template_instance_type: str | None
    node_group_instance_types: list[str] | None


def gpu_capacity(gpu: GpuNodesConfig) -> GpuCapacity:
    """On-Demand, a targeted On-Demand Capacity Reservation, or a Capacity Block for ML.

    A Capacity Block needs, in the launch template, the market type ``capacity-block``, the reservation
    and the instance type, and on the managed node group the capacity type ``CAPACITY_BLOCK`` and no
    instance types; otherwise EKS rejects the node group
    (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). Config validation
    admits the flag only for the types Capacity Blocks exist for (infra/eks_facts.py).
    """
    types = [gpu.instance_type]
    if not gpu.capacity_reservation_id:
        return GpuCapacity(None, None, "ON_DEMAND", None, types)
    target = {"capacity_reservation_target": {"capacity_reservation_id": gpu.capacity_reservation_id}}
    if gpu.capacity_block:
        return GpuCapacity(target, {"market_type": "capacity-block"}, "CAPACITY_BLOCK", gpu.instance_type, None)
    return GpuCapacity(target, None, "ON_DEMAND", None, types)


# --------------------------------------------------------------------------- Helm charts


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at an exact version from its repository."""

    release: str
    chart: str
    version: str
    repository: str
    namespace: str


NVIDIA_REPO = "https://nvidia.github.io/k8s-device-plugin"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"


def chart_pins(cfg: StackConfig) -> dict[str, ChartPin]:
    """The three charts, pinned to the stack's versions, by short name."""
    return {
        "nvidia-device-plugin": ChartPin(
            "nvidia-device-plugin", "nvidia-device-plugin", cfg.charts.nvidia_device_plugin, NVIDIA_REPO, "kube-system"
        ),
        # Chart v0.5.30 ships appVersion and image tag v0.5.20, like v0.5.29 (aws/eks-charts#1338);
        # v0.5.30 only adds EFA instance types (aws/eks-charts#1337, commit bfe91c4b9257, Chart.yaml and
        # values.yaml of stable/aws-efa-k8s-device-plugin). The v0.5.21-eksbuild.9 image came later
        # (aws/eks-charts#1363) in a chart version not checked here:
        # `helm search repo eks/aws-efa-k8s-device-plugin -l`. AWS's Ray Train sample pins v0.5.32
        # (aws-samples/sample-aws-deep-learning-containers training/ray-train/scripts/env.sh), but the
        # newest eks-charts snapshot read (5239609, 2026-08-03; read again 2026-12-05) ends at v0.5.30, so the
        # default stays there. The later chart bumps (aws/eks-charts#1363, 2026-08-21, image v0.5.21-eksbuild.9;
        # #1366, 2026-09-10, v0.5.21-eksbuild.13) are known only by their titles here: whether their
        # templates/daemonset.yaml changed could not be read, so the fixture could not be rebuilt for them.
        # v0.5.30's values.yaml already lists g6.12xlarge, and supportedInstanceLabels below makes the chart's
        # allow-list moot for the stack's type anyway, so the pin keeps no node from the plugin.
        "aws-efa-k8s-device-plugin": ChartPin(
            "aws-efa-k8s-device-plugin",
            "aws-efa-k8s-device-plugin",
            cfg.charts.efa_device_plugin,
            EKS_CHARTS_REPO,
            "kube-system",
        ),
        "kuberay-operator": ChartPin(
            "kuberay-operator", "kuberay-operator", cfg.charts.kuberay_operator, KUBERAY_REPO, "kuberay-system"
        ),
    }


def nvidia_device_plugin_values() -> dict[str, Any]:
    """Values of nvidia-device-plugin: only on the GPU nodes, tolerating their taint."""
    return {
        "nodeSelector": {ROLE_LABEL: GPU_ROLE},
        "tolerations": [dict(GPU_TOLERATION), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        # Plain device plugin: no GPU feature discovery (and so no NFD) sub-chart, which would
        # add DaemonSets this cluster does not need; the node group sets the label GFD would.
        "gfd": {"enabled": False},
    }


def efa_device_plugin_values(instance_type: str) -> dict[str, Any]:
    """Values of aws-efa-k8s-device-plugin: on the GPU nodes, listing their instance type.

    The chart schedules by an instance-type allow-list; setting it to the stack's type makes
    sure the plugin runs there even if the chart's own list lags behind new instance types.
    """
    return {
        "nodeSelector": {ROLE_LABEL: GPU_ROLE},
        "tolerations": [dict(GPU_TOLERATION)],
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"], "values": [instance_type]},
    }


# The reader is idle between reads: a shell that sleeps, and leaves at once on SIGTERM (PID 1 has no default handler).
READER_IDLE = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"
READER_RESOURCES = {"cpu": "10m", "memory": "32Mi"}  # `sh` and `cat` of a few dozen sysfs files


def efa_counter_reader_daemonset(image: str) -> dict[str, Any]:
    """The EFA counter reader: one idle pod per GPU node (the EFA device plugin's nodeSelector and toleration) that
    sees the host's sysfs read-only at HOST_SYS_MOUNT, where the driver execs `cat` of the port counters.

    Why the host's sysfs: a pod of its own network namespace sees a compat copy of each RDMA device without per-port
    hw_counters (Linux drivers/infiniband/core/sysfs.c `setup_port`; docs/efa-witnesses.md). A bind of the host's
    /sys keeps the view of the namespace it was mounted in (the initial one), as nebius/soperator#403's workaround
    does; the whole of /sys, because /sys/class/infiniband/<dev> are relative links into /sys/devices. Nothing more:
    no hostNetwork (it would reach IMDS past the hop limit of 1: EKS best practices, security), no privilege, no
    capability, no write, no service-account token. ``image``: the Ray image as the workers pull it (through the
    image cache when the stack has one), already on every GPU node for the worker, so the reader adds no pull.
    """
    labels = {APP_LABEL: EFA_COUNTER_READER}
    container = {
        "name": EFA_COUNTER_READER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", READER_IDLE],
        "resources": {"requests": dict(READER_RESOURCES), "limits": dict(READER_RESOURCES)},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,  # nobody: the counter files are mode 0444
            "runAsGroup": 65534,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "host-sys", "mountPath": HOST_SYS_MOUNT, "readOnly": True}],
    }
    pod = {
        "nodeSelector": {ROLE_LABEL: GPU_ROLE},
        "tolerations": [dict(GPU_TOLERATION)],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [{"name": "host-sys", "hostPath": {"path": HOST_SYS, "type": "Directory"}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": EFA_COUNTER_READER, "namespace": EFA_COUNTER_READER_NAMESPACE, "labels": labels},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def kuberay_operator_values() -> dict[str, Any]:
    """Values of kuberay-operator: on the system node."""
    return {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}}


# --------------------------------------------------------------------------- Ray

RAY_API_VERSION = "ray.io/v1"
RAY_KIND = "RayCluster"
# Ray's temp root: session logs and object-store spill. A volume keeps them off the container's
# writable layer; KubeRay's own examples mount an emptyDir at /tmp/ray for the same reason
# (https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/logging.html).
RAY_TMP = "/tmp/ray"
# The Ray pods' ServiceAccount; EKS Pod Identity maps it to the storage role (infra/pod_identity.py).
RAY_SERVICE_ACCOUNT = "ray-train"
RAY_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}

NCCL_EFA_ENV = {
    "FI_PROVIDER": "efa",
    "NCCL_NET_PLUGIN": "ofi",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_DEBUG": NCCL_DEBUG_LEVEL,
}


def _env(pairs: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def aws_region_env(region: str) -> dict[str, str]:
    """The stack's region for every AWS SDK in a Ray pod.

    EKS Pod Identity injects credentials, not a region, and with the IMDS hop limit of 1 an SDK's
    fallback to instance metadata times out from a pod. ``AWS_REGION`` is what the AWS SDKs read (the
    C++ SDK inside pyarrow's S3 filesystem included), ``AWS_DEFAULT_REGION`` what boto3 and the AWS CLI read
    (https://docs.aws.amazon.com/sdkref/latest/guide/feature-region.html).
    """
    return {"AWS_REGION": region, "AWS_DEFAULT_REGION": region}


# Ray's own health endpoints, probed by HTTP so that nothing runs inside the image. KubeRay v1.5.2 injects exec probes
# (`bash -c "wget ... | grep success"`) into a Ray container that sets none (ray-operator/controllers/ray/common/pod.go,
# initLivenessAndReadinessProbe, tag v1.5.2 = commit 9f65eca), and only where the container has none; whether the DLC
# image has wget is not established (docs/architecture.md). Paths and ports: utils/constant.go at that tag
# (RayAgentRayletHealthPath on DefaultDashboardAgentListenPort 52365, RayDashboardGCSHealthPath on DefaultDashboardPort
# 8265). Ray 2.58 answers 200 "success" or 503 on both (dashboard/modules/reporter/healthz_agent.py, reporter_head.py),
# so httpGet's 2xx test is KubeRay's `grep success`; the agent listens on the pod IP as well as localhost
# (dashboard/http_server_agent.py), and the dashboard on 0.0.0.0 (the head's dashboard-host below).
RAYLET_HEALTH = {"path": "/api/local_raylet_healthz", "port": 52365}
GCS_HEALTH = {"path": "/api/gcs_healthz", "port": RAY_PORTS["dashboard"]}
# KubeRay's numbers (constant.go): readiness after 10 s every 5 s, 10 failures; liveness after 30 s every 5 s,
# 120 failures (10 minutes); timeout 2 s, 5 s on the head.
READINESS_TIMING = {"initialDelaySeconds": 10, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 10}
LIVENESS_TIMING = {"initialDelaySeconds": 30, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 120}


def _http_probe(endpoint: dict[str, Any], timing: dict[str, int], timeout_s: int) -> dict[str, Any]:
    return {"httpGet": dict(endpoint), **timing, "timeoutSeconds": timeout_s}


def head_probes() -> dict[str, Any]:
    """The head's probes: Ready when the GCS answers through the dashboard, restarted when its raylet stops.

    KubeRay's exec probe checks both endpoints in one command; an httpGet probe checks one, so the head's readiness
    takes the GCS (what the workers and the driver need of the head) and its liveness the raylet.
    """
    return {
        "readinessProbe": _http_probe(GCS_HEALTH, READINESS_TIMING, 5),
        "livenessProbe": _http_probe(RAYLET_HEALTH, LIVENESS_TIMING, 5),
    }


def worker_probes() -> dict[str, Any]:
    """A worker's probes: both on its raylet, as KubeRay's own."""
    return {
        "readinessProbe": _http_probe(RAYLET_HEALTH, READINESS_TIMING, 2),
        "livenessProbe": _http_probe(RAYLET_HEALTH, LIVENESS_TIMING, 2),
    }


def _pre_stop_ray_stop() -> dict[str, Any]:
    # Lets Ray leave the cluster cleanly (drains, tells the GCS) before the container dies.
    return {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}


def _equal_requests_limits(resources: dict[str, Any]) -> dict[str, Any]:
    # Guaranteed QoS: requests == limits, so the kubelet never throttles or evicts a rank mid-step.
    return {"requests": dict(resources), "limits": dict(resources)}


def _runs_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        {"name": "runs", "emptyDir": {}},
        {"name": "runs", "mountPath": RUN_ROOT},
    )


def _ray_tmp_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    return (
        {"name": "ray-tmp", "emptyDir": {}},
        {"name": "ray-tmp", "mountPath": RAY_TMP},
    )


def ray_head_template(ray: RayConfig) -> dict[str, Any]:
    """Pod template of the Ray head: on the system node, no GPU, Ray ports inside the cluster."""
    runs_volume, runs_mount = _runs_volume()
    tmp_volume, tmp_mount = _ray_tmp_volume()
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": ray.cluster_name, "ray-efa-eks/role": "head"}},
        "spec": {
            "serviceAccountName": RAY_SERVICE_ACCOUNT,
            "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
            "containers": [
                {
                    "name": "ray-head",
                    "image": ray.image,
                    "resources": _equal_requests_limits({"cpu": ray.head.cpu, "memory": ray.head.memory}),
                    # The training image is a CUDA image: without this the NVIDIA runtime would
                    # try to expose GPUs to a pod on a node that has none.
                    "env": _env({"NVIDIA_VISIBLE_DEVICES": "void", **aws_region_env(ray.region)}),
                    "ports": [{"name": n, "containerPort": p} for n, p in RAY_PORTS.items()],
                    "lifecycle": _pre_stop_ray_stop(),
                    **head_probes(),
                    "volumeMounts": [runs_mount, tmp_mount],
                }
            ],
            "volumes": [runs_volume, tmp_volume],
        },
    }


def _worker_resources(w: RayWorkerConfig) -> dict[str, Any]:
    # The EKS guide's EFA pods also take the huge pages libfabric allocates its buffers from
    # (infra/eks_facts.py); the GPU nodes reserve the pool at boot (gpu_node_user_data) and config
    # validation counts it against the node's memory. rayWorkerHugepages false leaves the request out.
    resources: dict[str, Any] = {"cpu": w.cpu, "memory": w.memory, GPU_RESOURCE: w.num_gpus, EFA_RESOURCE: w.efa}
    if w.hugepages:
        resources[EFA_HUGEPAGES_RESOURCE] = EFA_HUGEPAGES
    return resources


def _hugepages_env(hugepages: bool) -> dict[str, str]:
    # A pod without a hugepages-2Mi limit gets a hugetlb limit of 0, so libfabric is told not to try them:
    # FI_EFA_USE_HUGE_PAGE=0 (libfabric's efa provider, fi_efa(7); aws-samples/awsome-distributed-training
    # EFA cheatsheet: "a minor performance hit").
    return {} if hugepages else {"FI_EFA_USE_HUGE_PAGE": "0"}


def ray_worker_template(ray: RayConfig) -> dict[str, Any]:
    """Pod template of a GPU worker: a whole GPU node, its EFA devices, NCCL over aws-ofi-nccl."""
    w = ray.worker
    runs_volume, runs_mount = _runs_volume()
    tmp_volume, tmp_mount = _ray_tmp_volume()
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": ray.cluster_name, "ray-efa-eks/role": GPU_ROLE}},
        "spec": {
            "serviceAccountName": RAY_SERVICE_ACCOUNT,
            "nodeSelector": {ROLE_LABEL: GPU_ROLE},
            "tolerations": [dict(GPU_TOLERATION)],
            "containers": [
                {
                    "name": "ray-worker",
                    "image": ray.image,
                    "resources": _equal_requests_limits(_worker_resources(w)),
                    "env": _env({**NCCL_EFA_ENV, **_hugepages_env(w.hugepages), **aws_region_env(ray.region)}),
                    # libfabric pins (registers) the buffers NCCL sends over EFA.
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                    "lifecycle": _pre_stop_ray_stop(),
                    **worker_probes(),
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, runs_mount, tmp_mount],
                }
            ],
            "volumes": [
                # NCCL's intra-node transport and Ray's object store live in /dev/shm; the
                # container runtime's default is 64 MiB, which makes NCCL fail at init.
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": w.shm_size}},
                runs_volume,
                tmp_volume,
            ],
        },
    }


def raycluster_spec(ray: RayConfig) -> dict[str, Any]:
    """``spec`` of the RayCluster custom resource (KubeRay v1.5 ray.io/v1, camelCase keys)."""
    w = ray.worker
    return {
        "rayVersion": ray.version,
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            # ClusterIP only: 6379 and 8265 never leave the cluster; the driver reaches the
            # dashboard from inside the head pod.
            "serviceType": "ClusterIP",
            "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": ray_head_template(ray),
        },
        "workerGroupSpecs": [
            {
                "groupName": w.group_name,
                "replicas": w.replicas,
                "minReplicas": w.replicas,
                "maxReplicas": w.replicas,
                "numOfHosts": 1,
                "rayStartParams": {"num-gpus": str(w.num_gpus)},
                "template": ray_worker_template(ray),
            }
        ],
    }


def raycluster_manifest(ray: RayConfig) -> dict[str, Any]:
    """The whole RayCluster object, as it would be applied."""
    return {
        "apiVersion": RAY_API_VERSION,
        "kind": RAY_KIND,
        "metadata": {"name": ray.cluster_name, "namespace": ray.namespace},
        "spec": raycluster_spec(ray),
    }


def service_account_manifest(namespace: str) -> dict[str, Any]:
    """The core v1 ServiceAccount the Ray head and workers run as."""
    metadata = {"name": RAY_SERVICE_ACCOUNT, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}


def namespace_manifest(name: str) -> dict[str, Any]:
    """A core v1 Namespace."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"name": name}}}


# --------------------------------------------------------------------------- image cache
# An ECR pull-through cache rule for ECR Public: a pull of <account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<path>
# fetches public.ecr.aws/<path> once into a private repository <prefix>/<path>, and later pulls serve it from there
# (https://docs.aws.amazon.com/AmazonECR/latest/userguide/pull-through-cache.html). A repository prefix is unique in a
# registry, so each stack gets its own: 2-30 characters of lowercase letters, digits and . _ - / (ECR API,
# CreatePullThroughCacheRule, ecrRepositoryPrefix).
IMAGE_CACHE_PREFIX_MAX = 30


def image_cache_prefix(cluster_name: str, stack: str) -> str:
    """The stack's repository prefix of the cache rule: ``<cluster>-<stack>`` lowercased; a longer one is cut and ends
    in 6 hex digits of its hash, so that two long stack names stay apart."""
    raw = re.sub(r"[^a-z0-9]+", "-", f"{cluster_name}-{stack}".lower()).strip("-")
    if len(raw) <= IMAGE_CACHE_PREFIX_MAX:
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
    return f"{raw[: IMAGE_CACHE_PREFIX_MAX - 7].strip('-')}-{digest}"


def registry_host(account_id: str, region: str) -> str:
    """The private ECR registry of ``account_id`` in ``region``."""
    return f"{account_id}.dkr.ecr.{region}.amazonaws.com"


def cached_image(image: str, host: str, prefix: str) -> str:
    """``image`` (on public.ecr.aws) as pulled through the cache rule: ``<host>/<prefix>/<path>:<tag>``."""
    upstream = f"{ECR_PUBLIC}/"
    if not image.startswith(upstream):
        raise ValueError(f"{image!r} is not on {ECR_PUBLIC}: the cache rule serves only that registry")
    return f"{host}/{prefix}/{image[len(upstream) :]}"


def image_cache_node_policy(region: str, account_id: str, prefix: str) -> dict[str, Any]:
    """What the node role needs beyond AmazonEC2ContainerRegistryReadOnly for the first pull through the cache: create
    the repository and import the upstream image into it (ECR user guide, pull-through-cache-iam.html:
    ``ecr:CreateRepository`` when the repository does not exist yet, ``ecr:BatchImportUpstreamImage``), only under the
    stack's prefix."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "PullThroughCacheFirstPull",
                "Effect": "Allow",
                "Action": ["ecr:CreateRepository", "ecr:BatchImportUpstreamImage"],
                "Resource": f"arn:aws:ecr:{region}:{account_id}:repository/{prefix}/*",
            }
        ],
    }
