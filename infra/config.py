"""The typed stack configuration: the only declaration of the stack's keys, and what the infra consumes.

Each field declared with ``key(...)`` (``infra/config_schema.py``) is the stack key
``ray-efa-eks:<name>`` with its default, description and the check of its own value; the rules
that need two keys are the sections' ``check`` methods, and messages name a key through
``Section.keyname``. ``Pulumi.yaml``'s ``config:`` block is rendered from the tree
(``python -m infra.config --write-pulumi-yaml``). Two ways in, one validation:

- ``load_stack(stack, project_dir)`` reads both Pulumi files once, without the pulumi CLI or runtime
  (tests, the driver, the offline render);
- ``from_pulumi_config()`` reads the values the Pulumi engine hands the program.

Both end in ``validate(raw, stack=..., region=...)``, which checks in an order that blames the
real cause first: unknown keys, the region, each key's type, each key's own value, then the
sections' rules. A broken rule raises ``StackConfigError`` naming the key, the value and the fix; a
legal but doubtful setting (one GPU node, a public API open to the world) is returned in
``StackConfig.warnings`` and emitted as a ``ConfigWarning``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, ClassVar

from infra import config_files
from infra.catalog import instance_spec
from infra.config_files import StackFile, check_project_file, check_region, known_stacks, write_pulumi_yaml
from infra.config_schema import (
    IRSA,
    MAX_GP3_GIB,
    MAX_NODES_PER_MANAGED_NODE_GROUP,
    POD_IDENTITY,
    PROJECT,
    ConfigWarning,
    Section,
    StackConfigError,
    addon_version,
    between,
    bucket_name,
    build,
    close_match,
    coerce,
    cpu_cores,
    cpu_quantity,
    dns_label,
    efa_gpu_instance,
    exact_version,
    is_floating_image,
    key,
    keys_of,
    known_instance,
    kubernetes_version,
    log_retention_days,
    log_types,
    memory_gib,
    memory_quantity,
    optional_cidr,
    parse_quantity,
    pinned_image,
    placement_group,
    pod_identity_mode,
    public_cidrs,
    ray_version,
    reservation_id,
    role_arns,
    two_or_three_azs,
    vpc_cidr,
)
from infra.eks_facts import (
    CAPACITY_BLOCK_FAMILIES,
    CAPACITY_BLOCKS_GUIDE,
    EXTENDED_SUPPORT_ENDS,
    STANDARD_SUPPORT_ENDS,
    capacity_block_eligible,
    efa_hugepages_gib,
    oldest_supported,
)
from workloads.config import BLOCK_FIELDS, DRIVER_FIELDS, check_block_keys
from workloads.errors import TrainConfigError

__all__ = [
    "IRSA",
    "KEYS",
    "NODE_CPU_HEADROOM",
    "NODE_MEMORY_HEADROOM_GIB",
    "POD_IDENTITY",
    "PROJECT",
    "ChartsConfig",
    "ClusterConfig",
    "StackConfigError",
    "ConfigWarning",
    "GpuNodesConfig",
    "NetworkConfig",
    "RayConfig",
    "RayHeadConfig",
    "RayWorkerConfig",
    "StackConfig",
    "StorageConfig",
    "SystemNodesConfig",
    "capacity_block_fix",
    "extended_support_note",
    "from_pulumi_config",
    "MOCK_DEPLOYER_CIDR",
    "is_floating_image",
    "known_stacks",
    "load_stack",
    "parse_quantity",
    "read_stack_file",
    "require_gpu_az",
    "stack_config_values",
    "validate",
]

# Room left on a node for the DaemonSets (aws-node, kube-proxy, the device plugins) and
# system pods, so a pod sized to "allocatable" does not stay Pending.
NODE_CPU_HEADROOM = 0.5
NODE_MEMORY_HEADROOM_GIB = 1.0
BUCKET_PREFIX_MAX = 37  # aws.s3.Bucket's bucketPrefix limit (the provider adds a 26-character suffix)
ECR_PUBLIC = "public.ecr.aws"  # the registry imageCache's pull-through cache rule serves

# --------------------------------------------------------------------------- the sections


@dataclass(frozen=True)
class NetworkConfig(Section):
    title: ClassVar[str] = "network"

    vpc_cidr: str = key(
        "vpcCidr",
        "10.0.0.0/16",
        "IPv4 CIDR of the VPC (a /16 to /22); private subnets get a quarter each, public subnets a sixty-fourth.",
        vpc_cidr,
    )
    azs: tuple[str, ...] = key(
        "availabilityZones",
        ("us-west-2a", "us-west-2b"),
        "AZs of the private subnets (2 or 3, all in aws:region); the EKS control plane needs at least two, and "
        "gpuAvailabilityZone must be one of them. The first also holds the NAT gateway, whatever the GPU AZ.",
        two_or_three_azs,
    )

    @property
    def nat_az(self) -> str:
        """The NAT gateway's AZ: the first of availabilityZones, never the GPU AZ. A NAT gateway cannot change subnet
        in place, and its replacement, created before the old one is deleted, asks for the Elastic IP the old one
        still holds (pulumi/pulumi-aws#1483): a NAT that followed the GPU AZ made every `up --auto-az` move fail."""
        return self.azs[0]

    def check(self, region: str) -> None:
        for az in self.azs:
            if not re.fullmatch(re.escape(region) + r"[a-z]", az):
                raise StackConfigError(
                    f"{self.keyname('azs')} entry {az!r} is not an AZ of aws:region {region!r}: "
                    f"use AZs such as {region}a"
                )


@dataclass(frozen=True)
class ClusterConfig(Section):
    title: ClassVar[str] = "cluster"

    name: str = key("clusterName", "ray-efa-eks", "Name of the EKS cluster.", dns_label(100))
    kubernetes_version: str = key(
        "kubernetesVersion",
        "1.36",
        "EKS Kubernetes version (major.minor), 1.30 or newer for the AL2023 NVIDIA AMI type. A version past its EKS "
        "standard support is accepted with a warning, as EKS bills extended support per cluster hour; one past its "
        "extended support is refused (docs/architecture.md gives the support dates and where the default comes from).",
        kubernetes_version,
    )
    vpc_cni_version: str = key(
        "vpcCniVersion",
        "v1.22.4-eksbuild.3",
        "Version of the EKS-managed VPC CNI add-on (vpc-cni), pinned so that a later `pulumi up` never changes pod "
        "networking unasked; preflight checks that EKS offers it for kubernetesVersion (docs/architecture.md: the "
        "default's source).",
        addon_version,
    )
    kube_proxy_version: str = key(
        "kubeProxyVersion",
        "v1.36.0-eksbuild.21",
        "Version of the EKS-managed kube-proxy add-on, pinned like vpcCniVersion. It follows the Kubernetes minor "
        "version, so change it with kubernetesVersion (docs/architecture.md: the default's source).",
        addon_version,
    )
    coredns_version: str = key(
        "corednsVersion",
        "v1.14.3-eksbuild.14",
        "Version of the EKS-managed CoreDNS add-on (coredns), which the stack declares so that it is pinned like "
        "vpcCniVersion (docs/architecture.md: why, and the default's source).",
        addon_version,
    )
    node_monitoring_agent_version: str = key(
        "nodeMonitoringAgentVersion",
        "v1.7.0-eksbuild.1",
        "Version of the EKS node monitoring agent add-on (eks-node-monitoring-agent), which reads each node's logs "
        "(GPU Xid and DCGM faults, EFA and kernel errors) and sets node conditions such as AcceleratedHardwareReady "
        "that the GPU node group's auto repair acts on (https://docs.aws.amazon.com/eks/latest/userguide/"
        "node-health-nma.html). v1.7.0-eksbuild.1 is the agent image tag of the project's chart at tag v1.7.0, "
        "2026-08-04 (aws/eks-node-monitoring-agent, charts/eks-node-monitoring-agent/values.yaml); no source read "
        "here lists the add-on versions EKS offers for Kubernetes 1.36, so preflight checks it with `aws eks "
        "describe-addon-versions --addon-name eks-node-monitoring-agent --kubernetes-version <kubernetesVersion>`.",
        addon_version,
    )
    endpoint_public_access: bool = key(
        "apiPublicAccess",
        True,
        "Whether the Kubernetes API has a public endpoint (limited to apiPublicAccessCidrs); false makes it "
        "private only, reachable from inside the VPC.",
    )
    # Used only while endpoint_public_access is true (infra/cluster.py passes none otherwise). Empty means "the
    # deploying machine": the driver's `run`/`up` fills it before preview (automation/steps/stack_steps.py), and the
    # program refuses it still empty (require_api_cidrs) rather than open the endpoint to the world.
    public_access_cidrs: tuple[str, ...] = key(
        "apiPublicAccessCidrs",
        (),
        "CIDRs allowed to reach the public API endpoint. Empty (the default) means this machine: `python -m "
        "automation run` or `up` writes this machine's public IPv4 as x.x.x.x/32 here before preview (from "
        "https://checkip.amazonaws.com), and a plain `pulumi preview` refuses it still empty. Ignored when "
        "apiPublicAccess is false.",
        public_cidrs,
    )
    # Which entry the driver wrote, as a key of its own rather than a YAML comment: `pulumi config set` rewrites
    # Pulumi.<stack>.yaml and has dropped comments doing so (pulumi/pulumi#3613, #423, #5235), while a key is config
    # the CLI and the Automation API read and write like the list itself.
    driver_cidr: str = key(
        "apiPublicAccessDriverCidr",
        "",
        "The entry of apiPublicAccessCidrs that `python -m automation run` or `up` wrote (this machine's address "
        "then). Run from another address, the driver replaces that entry, and only it, with the new address before "
        "preview (an in-place update of the cluster at `up`). Empty: every entry is yours, and preflight fails, "
        "naming the command that adds your address, when none covers it.",
        optional_cidr,
    )
    log_types: tuple[str, ...] = key(
        "controlPlaneLogTypes",
        ("api", "audit", "authenticator"),
        "EKS control-plane log types sent to CloudWatch (api, audit, authenticator, controllerManager, scheduler).",
        log_types,
    )
    log_retention_days: int = key(
        "controlPlaneLogRetentionDays",
        30,
        "Days CloudWatch keeps the control-plane logs: the stack creates the log group /aws/eks/<clusterName>/cluster "
        "with this retention before the cluster (EKS would otherwise create it with none, kept forever) and "
        "`destroy` deletes it with its logs (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html).",
        log_retention_days,
    )
    admin_role_arns: tuple[str, ...] = key(
        "clusterAdminRoleArns",
        (),
        "IAM role ARNs (arn:aws:iam::<account>:role/<name>) given cluster-admin through an EKS access entry, e.g. a "
        "CI or on-call role; the principal that creates the cluster is admin anyway.",
        role_arns,
    )

    def admits(self, cidr: str) -> bool:
        """Whether an entry of apiPublicAccessCidrs covers ``cidr`` (this machine's address as x.x.x.x/32)."""
        mine = ipaddress.IPv4Network(cidr, strict=False)
        return any(mine.subnet_of(ipaddress.IPv4Network(c, strict=False)) for c in self.public_access_cidrs)

    @property
    def needs_address(self) -> bool:
        """Whether the public endpoint's allow-list is left to the driver to fill with this machine's address."""
        return self.endpoint_public_access and not self.public_access_cidrs

    def require_api_cidrs(self, stack: str) -> None:
        """The program's rule: an allow-list left empty is refused, never read as open to the world."""
        if self.needs_address:
            k = self.keyname
            raise StackConfigError(
                f"{k('public_access_cidrs', prefixed=True)} is empty in stack {stack}: it means this machine's "
                f"address, which `python -m automation up --stack {stack}` (or `run`) writes before preview; with "
                f"pulumi alone, set it: `pulumi config set --path '{k('public_access_cidrs', prefixed=True)}[0]' "
                f"x.x.x.x/32` (your address: curl https://checkip.amazonaws.com), or set "
                f"{k('endpoint_public_access')} to false"
            )

    def check(self, today: date) -> None:
        """A Kubernetes version past its EKS extended support on ``today`` is refused: EKS creates no cluster on it."""
        ends = EXTENDED_SUPPORT_ENDS.get(self.kubernetes_version)
        if ends is None or today < ends:
            return
        name, oldest = self.keyname("kubernetes_version"), oldest_supported(today)
        fix = (
            f"{oldest} or newer (the oldest EKS supports on {today.isoformat()})"
            if oldest
            else "a version `aws eks describe-cluster-versions` lists"
        )
        raise StackConfigError(
            f"{name} {self.kubernetes_version!r} left EKS extended support on {ends.isoformat()}: EKS no longer "
            f"creates clusters on it (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html); "
            f"set {name} to {fix}"
        )

    def notes(self, today: date) -> list[str | None]:
        k = self.keyname
        open_note = None
        if self.endpoint_public_access and "0.0.0.0/0" in self.public_access_cidrs:
            open_note = (
                f"{k('public_access_cidrs')} includes 0.0.0.0/0: the Kubernetes API endpoint is reachable from "
                "anywhere (IAM authentication still applies); set it to your address as x.x.x.x/32"
            )
        # kube-proxy follows the cluster's minor version (the EKS guide's managing-kube-proxy table pairs each
        # Kubernetes version with its own kube-proxy), so a kubernetesVersion changed alone leaves an old pin.
        proxy, version = self.kube_proxy_version, self.kubernetes_version
        proxy_minor = ".".join(proxy.lstrip("v").split(".")[:2])
        proxy_note = None
        if proxy_minor != version:
            proxy_note = (
                f"{k('kube_proxy_version')} {proxy!r} is for Kubernetes {proxy_minor} but {k('kubernetes_version')} "
                f"is {version!r}: set {k('kube_proxy_version')} to a v{version}.x version "
                f"(aws eks describe-addon-versions --addon-name kube-proxy --kubernetes-version {version})"
            )
        return [open_note, extended_support_note(version, today), proxy_note]


def extended_support_note(version: str, today: date) -> str | None:
    """A warning when Kubernetes ``version`` is past its EKS standard support on ``today``, else None. EKS bills
    extended support from the start (UTC) of the day standard support ends (infra/eks_facts.py), so that day warns."""
    ends = STANDARD_SUPPORT_ENDS.get(version)
    if ends is None or today < ends:
        return None
    name = ClusterConfig.keyname("kubernetes_version")
    return (
        f"{name} {version!r} left EKS standard support on {ends.isoformat()}: the cluster runs in extended "
        f"support (until {EXTENDED_SUPPORT_ENDS[version].isoformat()}) at an additional cost per cluster hour; set "
        f"{name} to a version in standard support "
        f"(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)"
    )


@dataclass(frozen=True)
class SystemNodesConfig(Section):
    title: ClassVar[str] = "system nodes"

    instance_type: str = key(
        "systemInstanceType",
        "m7i.xlarge",
        "Instance type of the system node group (label role=system) that runs CoreDNS, the KubeRay operator and"
        " the Ray head.",
        known_instance,
    )
    count: int = key(
        "systemNodeCount",
        1,
        f"Number of system nodes (1 to {MAX_NODES_PER_MANAGED_NODE_GROUP}, the EKS quota of nodes per managed "
        f"node group).",
        between(
            1,
            MAX_NODES_PER_MANAGED_NODE_GROUP,
            "the operator and the Ray head need a node, and EKS allows 450 per managed node group",
        ),
    )
    root_volume_gib: int = key(
        "systemRootVolumeGib",
        100,
        "Size of the system nodes' encrypted gp3 root volume in GiB; the Ray head pulls the same large CUDA image "
        "as the workers.",
        between(50, MAX_GP3_GIB, "below 50 GiB the Ray head's CUDA image does not fit; gp3 ends at 16 TiB"),
    )


@dataclass(frozen=True)
class GpuNodesConfig(Section):
    title: ClassVar[str] = "gpu nodes"

    instance_type: str = key(
        "gpuInstanceType",
        "g6.12xlarge",
        "EFA-capable GPU instance type of the worker node group (label role=gpu-worker); must be in "
        "infra/data/instance_types.json.",
        efa_gpu_instance,
    )
    node_count: int = key(
        "gpuNodeCount",
        2,
        f"Number of GPU nodes while a run trains (the node group's max; 1 to {MAX_NODES_PER_MANAGED_NODE_GROUP}, "
        f"the EKS quota of nodes per managed node group). One node is allowed, but then no traffic crosses EFA.",
        between(
            1, MAX_NODES_PER_MANAGED_NODE_GROUP, "2 or more test EFA, and EKS allows 450 nodes per managed node group"
        ),
    )
    # Empty is legal here: preflight chooses an AZ that offers the type and the driver sets it in
    # the stack; the Pulumi program (require_gpu_az) refuses to build without one.
    availability_zone: str = key(
        "gpuAvailabilityZone",
        "",
        "The one AZ of the GPU nodes (a cluster placement group lives in one AZ); one of availabilityZones. "
        "Empty means preflight chooses one of availabilityZones that offers gpuInstanceType, and "
        "`python -m automation run` sets it in the stack before preview/up; the Pulumi program refuses an empty "
        "value.",
    )
    efa_interfaces: int = key(
        "gpuEfaInterfaces",
        1,
        "EFA interfaces per GPU node; must equal the instance type's maximum (one per network card).",
    )
    capacity_reservation_id: str = key(
        "gpuCapacityReservationId",
        "",
        "Optional targeted capacity reservation (cr-...) for the GPU nodes in gpuAvailabilityZone: an On-Demand "
        "Capacity Reservation or, with gpuCapacityBlock true, a Capacity Block for ML; empty for plain on-demand "
        "capacity. Preflight checks its type, state, AZ and placement group (docs/cost-and-capacity.md).",
        reservation_id,
    )
    capacity_block: bool = key(
        "gpuCapacityBlock",
        False,
        "True when gpuCapacityReservationId is a Capacity Block for ML, which only some instance types have (not "
        "g6). EKS updates a node group on a Capacity Block only at desired size 0: scale it to 0 before an `up` that "
        "changes it (docs/cost-and-capacity.md).",
    )
    placement_group_name: str = key(
        "gpuPlacementGroupName",
        "",
        "Name of an existing cluster placement group in gpuAvailabilityZone for the GPU nodes (needed with a "
        "capacity reservation made in a placement group, which only instances in that group use). Empty makes the "
        "stack create its own cluster placement group.",
        placement_group,
    )
    root_volume_gib: int = key(
        "gpuRootVolumeGib",
        200,
        "Size of the GPU nodes' encrypted gp3 root volume in GiB (the Ray training image is large).",
        between(50, MAX_GP3_GIB, "below 50 GiB the training image does not fit; gp3 ends at 16 TiB"),
    )
    idle_nodes: int = key(
        "gpuIdleNodes",
        0,
        "GPU nodes left running between runs: `python -m automation run` scales the node group to this many when it "
        "ends (unless --keep-nodes) and back to gpuNodeCount at its start; the idle guard scales to it too. 0 to "
        "gpuNodeCount (0 pays for no GPU while nothing trains).",
        between(0, MAX_NODES_PER_MANAGED_NODE_GROUP),
    )
    live_desired_size: int = key(
        "gpuLiveDesiredSize",
        -1,
        "Set by the driver for the length of each `up` and removed after it, not by hand: the GPU node group's "
        "desired size as EKS reports it then, which the program sends instead of the one in Pulumi's state (with "
        "the desired size ignored, Pulumi would send its state's value whenever another scaling field changes, "
        "starting GPU nodes on a group scaled to 0). -1: none read; the node group keeps ignoring the desired size.",
        between(-1, MAX_NODES_PER_MANAGED_NODE_GROUP),
    )
    idle_minutes: int = key(
        "gpuIdleMinutes",
        30,
        "Minutes without a running Ray job after which the in-cluster idle guard (a CronJob on the system node) "
        "scales the GPU node group to gpuIdleNodes (0 turns the guard off: no CronJob; at most 1440, a day).",
        between(0, 1440, "0 turns the guard off"),
    )

    # The instance type's GPUs, from infra/data/instance_types.json unless given (preflight's tests hand in
    # types the catalog lacks, with the count AWS's answer would give).
    gpus_per_node: int = 0

    def __post_init__(self) -> None:
        if not self.gpus_per_node:
            object.__setattr__(self, "gpus_per_node", instance_spec(self.instance_type).gpus)

    def check(self, network: NetworkConfig) -> None:
        k = self.keyname
        if self.availability_zone and self.availability_zone not in network.azs:
            raise StackConfigError(
                f"{k('availability_zone')} {self.availability_zone!r} is not one of the network's private-subnet "
                f"AZs {list(network.azs)}: set {k('availability_zone')} to one of them or add it to "
                f"{network.keyname('azs')}"
            )
        spec = instance_spec(self.instance_type)
        if self.efa_interfaces != spec.max_efa_interfaces:
            raise StackConfigError(
                f"{k('efa_interfaces')} is {self.efa_interfaces} but {k('instance_type')} {spec.instance_type!r} has "
                f"{spec.max_efa_interfaces} EFA interface(s) ({spec.network_cards} network card(s)): "
                f"set {k('efa_interfaces')} to {spec.max_efa_interfaces}"
            )
        if self.idle_nodes > self.node_count:
            raise StackConfigError(
                f"{k('idle_nodes')} {self.idle_nodes} is more than {k('node_count')} {self.node_count}: "
                f"the node group holds at most {self.node_count} nodes; "
                f"set {k('idle_nodes')} within 0..{self.node_count}"
            )
        if self.capacity_block and not self.capacity_reservation_id:
            raise StackConfigError(
                f"{k('capacity_block')} is true but {k('capacity_reservation_id')} is empty: set "
                f"{k('capacity_reservation_id')} to the Capacity Block's cr-... id, or set {k('capacity_block')} to "
                "false"
            )
        if self.capacity_block and not capacity_block_eligible(self.instance_type):
            raise StackConfigError(
                f"{k('capacity_block')} is true but Capacity Blocks for ML do not exist for {self.instance_type} "
                f"({CAPACITY_BLOCKS_GUIDE}): {capacity_block_fix(self.instance_type)}"
            )

    def notes(self) -> list[str | None]:
        k = self.keyname
        one_node = None
        if self.node_count == 1:
            one_node = (
                f"{k('node_count')} is 1: NCCL keeps all traffic inside the node, so no inter-node traffic will exist "
                f"to prove EFA; set {k('node_count')} to 2 or more to test EFA"
            )
        # A managed node group on a Capacity Block may be updated (AMI, launch template version, Kubernetes
        # version) only while its desired size is 0 (EKS guide capacity-blocks-mng, "Considerations").
        block = None
        if self.capacity_block:
            block = (
                f"{k('capacity_block')} is true: EKS updates a node group on a Capacity Block only at desired size 0, "
                "so before an `up` that changes the GPU node group (launch template, AMI, "
                f"{ClusterConfig.keyname('kubernetes_version')}) scale it to 0 "
                "(aws eks update-nodegroup-config --scaling-config minSize=0,maxSize=<n>,desiredSize=0), then back "
                "(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)"
            )
        return [one_node, block]


def capacity_block_fix(instance_type: str) -> str:
    """The two ways out when ``instance_type`` cannot run on a Capacity Block."""
    k = GpuNodesConfig.keyname
    return (
        f"set {k('capacity_block')} to false (an On-Demand Capacity Reservation of {instance_type} needs only "
        f"{k('capacity_reservation_id')}), or choose a type of {', '.join(sorted(CAPACITY_BLOCK_FAMILIES))} "
        f"(aws ec2 describe-capacity-block-offerings --instance-type <type> --instance-count 1 "
        f"--capacity-duration-hours 24 lists the blocks on sale)"
    )


@dataclass(frozen=True)
class ChartsConfig(Section):
    title: ClassVar[str] = "charts"

    nvidia_device_plugin: str = key(
        "nvidiaDevicePluginChartVersion",
        "0.20.0",
        "Version of the nvidia-device-plugin chart (https://nvidia.github.io/k8s-device-plugin).",
        exact_version,
    )
    efa_device_plugin: str = key(
        "efaDevicePluginChartVersion",
        "v0.5.30",
        "Version of the aws-efa-k8s-device-plugin chart (https://aws.github.io/eks-charts).",
        exact_version,
    )
    kuberay_operator: str = key(
        "kuberayOperatorChartVersion",
        "1.5.2",
        "Version of the kuberay-operator chart (https://ray-project.github.io/kuberay-helm/); the RayCluster is"
        " checked against the 1.5.2 CRD.",
        exact_version,
    )


@dataclass(frozen=True)
class RayHeadConfig(Section):
    title: ClassVar[str] = "ray"

    cpu: str = key("rayHeadCpu", "2", "CPU request and limit of the Ray head pod (on a system node).", cpu_quantity)
    memory: str = key("rayHeadMemory", "8Gi", "Memory request and limit of the Ray head pod.", memory_quantity)


@dataclass(frozen=True)
class RayWorkerConfig(Section):
    title: ClassVar[str] = "ray"

    group_name: str = key(
        "rayWorkerGroupName", "gpu-workers", "Name of the RayCluster's GPU worker group.", dns_label(50)
    )
    num_gpus: int = key(
        "rayWorkerGpus",
        4,
        "nvidia.com/gpu request and limit of each worker pod, and its Ray num-gpus; must equal the GPU "
        "instance's GPU count.",
    )
    cpu: str = key(
        "rayWorkerCpu",
        "40",
        "CPU request and limit of each worker pod; must fit the GPU instance's allocatable CPU.",
        cpu_quantity,
    )
    memory: str = key(
        "rayWorkerMemory",
        "160Gi",
        "Memory request and limit of each worker pod; must fit the GPU instance's allocatable memory.",
        memory_quantity,
    )
    efa: int = key(
        "rayWorkerEfa",
        1,
        "vpc.amazonaws.com/efa request and limit of each worker pod; must equal gpuEfaInterfaces (one worker "
        "per node takes them all).",
    )
    shm_size: str = key(
        "rayWorkerShmSize",
        "32Gi",
        "Size of the memory-backed /dev/shm of each worker (NCCL's shared-memory transport and Ray's object "
        "store); counts against rayWorkerMemory.",
        memory_quantity,
    )
    hugepages: bool = key(
        "rayWorkerHugepages",
        True,
        "Whether each worker pod requests hugepages-2Mi: 5120Mi, as the EKS EFA guide's pods do, from the pool the "
        "GPU nodes reserve at boot (their launch template's user data). false leaves the request out and sets "
        "FI_EFA_USE_HUGE_PAGE=0, so libfabric uses ordinary pages (a small performance cost): for an AMI or node "
        "where the pool cannot be reserved.",
    )
    replicas: int = 0  # one worker pod per GPU node: StackConfig sets it to gpu_nodes.node_count


@dataclass(frozen=True)
class RayConfig(Section):
    title: ClassVar[str] = "ray"

    namespace: str = key("rayNamespace", "ray", "Kubernetes namespace of the RayCluster.", dns_label(50))
    cluster_name: str = key(
        "rayClusterName", "ray-efa", "Name of the RayCluster; its head service is <name>-head-svc.", dns_label(50)
    )
    image: str = key(
        "rayImage",
        "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0",
        "Container image of the Ray head and workers (pinned tag or digest; never latest). The default is Ray Train "
        "DLC v1.1 (Ray 2.58.0, PyTorch 2.13.0, EFA 1.49.0 with aws-ofi-nccl 1.20.0; docs/architecture.md).",
        pinned_image,
    )
    version: str = key(
        "rayVersion", "2.58.0", "Ray version inside rayImage (the RayCluster's rayVersion).", ray_version
    )
    image_cache: bool = key(
        "imageCache",
        True,
        "Pull rayImage through an ECR pull-through cache in the stack's region, so that its layers come from S3 over "
        "the free gateway endpoint instead of through the NAT gateway (docs/cost-and-capacity.md). Needs rayImage on "
        "public.ecr.aws; false pulls it directly.",
    )
    head: RayHeadConfig = field(default_factory=RayHeadConfig)
    worker: RayWorkerConfig = field(default_factory=RayWorkerConfig)
    region: str = ""  # aws:region of the stack (StackConfig sets it): the pods' AWS_REGION / AWS_DEFAULT_REGION

    @property
    def head_service_name(self) -> str:
        """KubeRay names the head service ``<cluster>-head-svc``."""
        return f"{self.cluster_name}-head-svc"

    def check(self, gpu_nodes: GpuNodesConfig, system_nodes: SystemNodesConfig) -> None:
        w, gk = self.worker, gpu_nodes.keyname
        spec = instance_spec(gpu_nodes.instance_type)
        if w.num_gpus != spec.gpus:
            raise StackConfigError(
                f"{gk('instance_type')} {spec.instance_type!r} has {spec.gpus} GPUs but {w.keyname('num_gpus')} is "
                f"{w.num_gpus}: set {w.keyname('num_gpus')} to {spec.gpus} (one worker pod per node, Ray num-gpus = "
                "the pod's GPU limit)"
            )
        if w.efa != gpu_nodes.efa_interfaces:
            raise StackConfigError(
                f"{w.keyname('efa')} is {w.efa} but each node has {gpu_nodes.efa_interfaces} EFA interface(s): "
                f"set {w.keyname('efa')} to {gpu_nodes.efa_interfaces}"
            )
        if self.image_cache and not self.image.startswith(f"{ECR_PUBLIC}/"):
            raise StackConfigError(
                f"{self.keyname('image_cache')} is true but {self.keyname('image')} {self.image!r} is not on "
                f"{ECR_PUBLIC}, the only upstream the stack's cache rule serves: set {self.keyname('image_cache')} "
                "to false, or use an image from public.ecr.aws"
            )
        # EFA nodes pre-allocate a huge-page pool that allocatable memory loses (infra/eks_facts.py).
        _check_fits(w, gpu_nodes.instance_type, gk("instance_type"), efa_hugepages_gib(spec.vcpus))
        _check_fits(self.head, system_nodes.instance_type, system_nodes.keyname("instance_type"))
        shm = memory_gib(w.keyname("shm_size"), w.shm_size)
        if not 1 <= shm <= memory_gib(w.keyname("memory"), w.memory) / 2:
            raise StackConfigError(
                f"{w.keyname('shm_size')} {w.shm_size!r} must be between 1Gi and half of {w.keyname('memory')} "
                f"({w.memory}): /dev/shm is memory-backed and counts against the pod's limit"
            )


def _check_fits(
    pod: RayHeadConfig | RayWorkerConfig, instance_type: str, instance_key: str, hugepages_gib: float = 0.0
) -> None:
    spec, cpu_key, mem_key = instance_spec(instance_type), pod.keyname("cpu"), pod.keyname("memory")
    cpu_room = round(spec.allocatable_cpu - NODE_CPU_HEADROOM, 2)
    mem_room = round(spec.allocatable_memory_gib - NODE_MEMORY_HEADROOM_GIB - hugepages_gib, 1)
    if cpu_cores(cpu_key, pod.cpu) > cpu_room:
        raise StackConfigError(
            f"{cpu_key} {pod.cpu!r} does not fit {instance_key} {instance_type!r} (allocatable {spec.allocatable_cpu} "
            f"CPU, {NODE_CPU_HEADROOM} kept for DaemonSets): set {cpu_key} to at most {int(cpu_room)}"
        )
    if memory_gib(mem_key, pod.memory) > mem_room:
        raise StackConfigError(
            f"{mem_key} {pod.memory!r} does not fit {instance_key} {instance_type!r} (allocatable "
            f"{spec.allocatable_memory_gib} GiB, {NODE_MEMORY_HEADROOM_GIB} GiB kept for DaemonSets"
            + (f", {hugepages_gib:.1f} GiB of EFA huge pages" if hugepages_gib else "")
            + f"): set {mem_key} to at most {int(mem_room)}Gi"
        )


@dataclass(frozen=True)
class StorageConfig(Section):
    title: ClassVar[str] = "storage"

    bucket_name: str = key(
        "storageBucketName",
        "",
        "Name of the private S3 bucket that holds Ray Train's checkpoints under s3://<bucket>/<stack>/runs. Empty "
        "means Pulumi names it <clusterName>-<stack>- plus a random suffix; a set name must be a valid S3 bucket "
        "name (3-63 lowercase letters, digits and '-', no dots).",
        bucket_name,
    )
    retention_days: int = key(
        "storageRetentionDays",
        30,
        "Days after which objects under <stack>/ in the bucket expire (a lifecycle rule); 0 keeps them forever. "
        "Incomplete multipart uploads are always aborted after 1 day.",
        between(0, 36500, "0 keeps objects forever"),
    )
    force_destroy: bool = key(
        "storageForceDestroy",
        False,
        "Whether `destroy` deletes the bucket with every checkpoint in it. The default (false) keeps the bucket "
        "and its data: destroy leaves it in the account (Pulumi's retainOnDelete) and prints its name.",
    )
    pod_identity_mode: str = key(
        "podIdentityMode",
        POD_IDENTITY,
        "How the Ray pods get the run bucket's role: pod-identity (EKS Pod Identity) or irsa (IAM roles for service "
        "accounts, for pods whose AWS SDK is too old for Pod Identity); the S3 permissions are the same in both "
        "(docs/storage.md says why pod-identity is the default).",
        pod_identity_mode,
    )
    # Set by StackConfig from the cluster name and the stack:
    bucket_prefix: str = ""  # <clusterName>-<stack>-, used when bucket_name is empty
    object_prefix: str = ""  # the stack name: every key the Ray pods may touch starts with "<object_prefix>/"

    def check(self, cluster: ClusterConfig) -> None:
        if not self.bucket_name and len(self.bucket_prefix) > BUCKET_PREFIX_MAX:
            raise StackConfigError(
                f"the bucket name prefix {self.bucket_prefix!r} ({cluster.keyname('name')}-stack-) is longer than "
                f"{BUCKET_PREFIX_MAX} characters: set {self.keyname('bucket_name', prefixed=True)} to a bucket name"
            )


def _train_block(name: str, value: Mapping[str, Any]) -> None:
    """Refuse a train: key that TrainConfig lacks or that the driver sets; the values are judged by
    TrainConfig itself when the driver parses the block over the cluster's job (automation/job.py)."""
    try:
        check_block_keys(value, lambda field: f"{PROJECT}:{name}.{field}", f"{PROJECT}:{name}")
    except TrainConfigError as e:  # the program and render report infra's StackConfigError
        raise StackConfigError(str(e)) from None


@dataclass(frozen=True)
class StackConfig(Section):
    title: ClassVar[str] = "training job"

    stack: str
    region: str
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    system_nodes: SystemNodesConfig = field(default_factory=SystemNodesConfig)
    gpu_nodes: GpuNodesConfig = field(default_factory=GpuNodesConfig)
    charts: ChartsConfig = field(default_factory=ChartsConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    # The stack's train: block, keys checked, values un-interpreted: automation/job.py parses it into a TrainConfig.
    train: Mapping[str, Any] = key(
        "train",
        {},
        "The training job on this cluster: a mapping of TrainConfig fields (python -m workloads.train --help explains "
        "each) that overrides the cluster's job defaults in automation/job.py key by key. "
        f"The driver sets {', '.join(DRIVER_FIELDS[:-1])} and {DRIVER_FIELDS[-1]} itself. No type is declared: "
        "Pulumi.yaml cannot type an object key (https://github.com/pulumi/pulumi/issues/11321, "
        f"https://github.com/pulumi/pulumi/issues/16056). Keys: {', '.join(BLOCK_FIELDS)}.",
        _train_block,
    )
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # What one section takes from the others: the pods' region, one worker pod per GPU node, the bucket's names.
        worker = dataclasses.replace(self.ray.worker, replicas=self.gpu_nodes.node_count)
        object.__setattr__(self, "ray", dataclasses.replace(self.ray, region=self.region, worker=worker))
        prefix = f"{self.cluster.name}-{self.stack}-"
        storage = dataclasses.replace(self.storage, bucket_prefix=prefix, object_prefix=self.stack)
        object.__setattr__(self, "storage", storage)

    def check(self, today: date) -> None:
        """The rules over several keys, in an order that blames a setting before what depends on it; ``today``
        (UTC) dates the EKS version's support."""
        self.cluster.check(today)
        self.network.check(self.region)
        self.gpu_nodes.check(self.network)
        self.ray.check(self.gpu_nodes, self.system_nodes)
        self.storage.check(self.cluster)

    def notes(self, today: date) -> tuple[str, ...]:
        """The warnings of a legal but doubtful config."""
        return tuple(n for n in (*self.gpu_nodes.notes(), *self.cluster.notes(today)) if n)


KEYS = keys_of(StackConfig)
KEYS_BY_NAME = {k.name: k for k in KEYS}

# --------------------------------------------------------------------------- loading and validation


def validate(raw: Mapping[str, Any], *, stack: str, region: str | None, today: date | None = None) -> StackConfig:
    """Coerce ``raw`` (our keys without the project prefix) over the defaults and check it.

    Order: unknown keys, the region, every key's type, every key's own check, the sections' rules.
    Raises StackConfigError on the first broken one; returns a StackConfig whose ``warnings`` list the
    doubtful settings, each also emitted as a ConfigWarning. ``today`` (default: the UTC date, as EKS dates
    its support) dates the rules that depend on the calendar.
    """
    today = today or datetime.now(UTC).date()
    for name in raw:
        if name not in KEYS_BY_NAME:
            raise StackConfigError(f"unknown config key {PROJECT}:{name}: {close_match(name, list(KEYS_BY_NAME))}")
    region = check_region(stack, region)
    values = {k.name: coerce(k, raw.get(k.name, k.default)) for k in KEYS}
    for k in KEYS:
        if k.check is not None:
            k.check(k.name, values[k.name])
    cfg: StackConfig = build(StackConfig, values, stack=stack, region=region)
    cfg.check(today)
    notes = cfg.notes(today)
    for note in notes:
        warnings.warn(note, ConfigWarning, stacklevel=2)
    return dataclasses.replace(cfg, warnings=notes)


def load_stack(stack: str, project_dir: Path) -> StackConfig:
    """Read ``Pulumi.<stack>.yaml`` (and check ``Pulumi.yaml``) once, then validate.

    Works offline without the pulumi CLI. Raises StackConfigError for a missing or broken file, an
    unknown stack (listing the known ones), a misspelled key, or any broken rule of ``validate``.
    """
    check_project_file(Path(project_dir), KEYS)
    found = read_stack_file(stack, project_dir)
    return validate(found.values, stack=stack, region=found.region)


def read_stack_file(stack: str, project_dir: Path) -> StackFile:
    """Our keys and the region that ``Pulumi.<stack>.yaml`` sets, every key's name checked against the schema."""
    return config_files.read_stack_file(stack, Path(project_dir), KEYS_BY_NAME)


# What the mocks take for the deploying machine's address: 203.0.113.0/24 is TEST-NET-3, for documentation
# (RFC 5737), so a render never shows a real address.
MOCK_DEPLOYER_CIDR = "203.0.113.10/32"


def stack_config_values(stack: str, project_dir: Path) -> dict[str, str]:
    """The merged config of a stack as the Pulumi engine would pass it (``project:key`` -> string).

    Used to run the program under Pulumi's mocks exactly as the engine would after the driver's `up`: the
    defaults, overridden by the stack file, arrays and objects as JSON; an empty apiPublicAccessCidrs holds
    MOCK_DEPLOYER_CIDR where `up` would write this machine's address.
    """
    check_project_file(Path(project_dir), KEYS)
    found = read_stack_file(stack, project_dir)
    with warnings.catch_warnings():  # the program reports the warnings when it validates again
        warnings.simplefilter("ignore", ConfigWarning)
        validate(found.values, stack=stack, region=found.region)  # fail early, with the clear message
    values: dict[str, Any] = {f"{PROJECT}:{k.name}": k.default for k in KEYS}
    values.update(found.raw)
    cidrs = f"{PROJECT}:{ClusterConfig.keyname('public_access_cidrs')}"
    if not values[cidrs]:  # left to the driver, which writes this machine's address before the engine runs
        values[cidrs] = [MOCK_DEPLOYER_CIDR]

    def text(v: Any) -> str:
        return (
            json.dumps(list(v) if isinstance(v, tuple) else v) if isinstance(v, (list, tuple, dict, bool)) else str(v)
        )

    return {k: text(v) for k, v in values.items()}


def from_pulumi_config(project_dir: Path | None = None) -> StackConfig:
    """The validated config of the running Pulumi program (stack, ``aws:region`` and our keys).

    With ``project_dir``, its ``Pulumi.yaml`` is checked first (the engine has read it already).
    """
    import pulumi

    if project_dir is not None:
        check_project_file(Path(project_dir), KEYS)
    cfg = pulumi.Config(PROJECT)
    raw = {k.name: cfg.get(k.name) for k in KEYS if cfg.get(k.name) is not None}
    raw |= {k: v for k, v in _engine_keys().items() if k not in KEYS_BY_NAME}  # validate refuses these
    region = pulumi.Config("aws").get("region")
    with warnings.catch_warnings():  # the program reports StackConfig.warnings through pulumi.log
        warnings.simplefilter("ignore", ConfigWarning)
        stack_cfg = validate(raw, stack=pulumi.get_stack(), region=region)
    stack_cfg.cluster.require_api_cidrs(stack_cfg.stack)
    return stack_cfg


def _engine_keys() -> dict[str, Any]:
    """Every ``ray-efa-eks:*`` key the engine passed, declared or not (unprefixed).

    pulumi.Config reads one named key at a time; the whole bag is the runtime's config map and the
    PULUMI_CONFIG environment variable (pulumi/runtime/config.py in the pulumi Python SDK).
    """
    from pulumi.runtime import config as runtime_config

    bag = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{PROJECT}:"
    return {k[len(prefix) :]: v for k, v in bag.items() if k.startswith(prefix)}


def require_gpu_az(cfg: StackConfig) -> str:
    """The GPU nodes' AZ; StackConfigError (naming the two ways to set it) when the stack left it empty."""
    az, name = cfg.gpu_nodes.availability_zone, cfg.gpu_nodes.keyname("availability_zone")
    if not az:
        raise StackConfigError(
            f"{name} is empty for stack {cfg.stack!r}: "
            f"run `python -m automation preflight --stack {cfg.stack}` "
            f"to see which of {cfg.network.keyname('azs')} {list(cfg.network.azs)} offer "
            f"{cfg.gpu_nodes.instance_type} (`python -m automation run --stack {cfg.stack}` chooses one and sets it "
            f"in the stack), or set {PROJECT}:{name} in Pulumi.{cfg.stack}.yaml"
        )
    return az


if __name__ == "__main__":
    import sys

    from infra.config_files import write_config_docs  # the page is written here only

    root = Path(__file__).resolve().parent.parent
    writers = {
        "--write-pulumi-yaml": (root / "Pulumi.yaml", write_pulumi_yaml),
        "--write-docs": (root / "docs" / "configuration.md", write_config_docs),
    }
    if len(sys.argv) != 2 or sys.argv[1] not in writers:
        sys.exit(f"usage: python -m infra.config {{{' | '.join(writers)}}}")
    path, write = writers[sys.argv[1]]
    print(f"{path}: {'rewritten' if write(path, KEYS) else 'up to date'}")
