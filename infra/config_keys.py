"""The stack configuration's keys: one declaration each, the only list of them.

Each ``Key`` holds its name, type, default, description, section and the check of its own value;
``infra/config.py`` validates against this table, and ``Pulumi.yaml``'s ``config:`` block is
rendered from it (``python -m automation.job --write-pulumi-yaml``, which also knows the train:
block's keys; a test fails when the file differs). Adding a key is one ``Key(...)`` here plus the
regenerated ``Pulumi.yaml``.

Checks that need two keys (a pod that must fit its node, an AZ that must be in the region) are
the named rules of ``infra/config_rules.py``.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.catalog import instance_spec, known_instance_types

PROJECT = "ray-efa-eks"
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
FLOATING_TAGS = frozenset({"latest", "stable", "nightly", "edge", "main", "master", "dev"})

# EKS service quotas, default values: "Nodes per managed node group: 450" and "Public endpoint
# access CIDR ranges per cluster: 40" (https://docs.aws.amazon.com/eks/latest/userguide/service-quotas.html).
MAX_NODES_PER_MANAGED_NODE_GROUP = 450
MAX_PUBLIC_ACCESS_CIDRS = 40
# gp3 volumes hold 1 GiB to 16 TiB (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html).
MAX_GP3_GIB = 16384

# The train: block's keys, written from workloads.config.TrainConfig by
# `python -m automation.job --write-pulumi-yaml`: infra may not import the training code.
TRAIN_KEYS_FILE = Path(__file__).parent / "data" / "train_keys.json"

_EXACT_SEMVER = re.compile(r"^v?\d+\.\d+\.\d+$")
_K8S_VERSION = re.compile(r"^1\.\d+$")
# An EKS add-on version: major.minor.patch-eksbuild.build
# (https://docs.aws.amazon.com/eks/latest/userguide/managing-vpc-cni.html, "Considerations").
_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (no dots: TLS to
# virtual-hosted names with dots fails certificate checks).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_PLACEMENT_GROUP = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MEMORY_UNIT = re.compile(r"(Ki|Mi|Gi|Ti|k|M|G|T)$")


class ConfigError(ValueError):
    """A stack configuration that cannot work; the message names key, value and fix."""


class ConfigWarning(UserWarning):
    """A stack configuration that works but probably not as the user hopes."""


Check = Callable[[str, Any], None]


@dataclass(frozen=True)
class Key:
    """One key of the stack configuration (``ray-efa-eks:<name>``)."""

    name: str
    type: str  # string | integer | boolean | array | object (object: a mapping passed through as is)
    default: Any
    description: str
    section: str
    check: Check | None = None


def close_match(word: str, known: Sequence[str]) -> str:
    """' (did you mean X?)' for the closest of ``known``, or the list of them when none is close."""
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}?" if near else f"known: {', '.join(known)}"


# --------------------------------------------------------------------------- value checks


def between(low: int, high: int, fix: str = "") -> Check:
    def check(key: str, value: int) -> None:
        if not low <= value <= high:
            why = f": {fix}" if fix else ""
            raise ConfigError(f"{key} {value} is outside {low}..{high}{why}; set {key} within {low}..{high}")

    return check


def exact_version(key: str, value: str) -> None:
    if not _EXACT_SEMVER.fullmatch(value):
        raise ConfigError(
            f"{key} {value!r} is not an exact chart version: pin one such as 1.5.2 (no ranges, no latest)"
        )


def dns_label(limit: int) -> Check:
    def check(key: str, value: str) -> None:
        if not _DNS_LABEL.fullmatch(value) or len(value) > limit:
            raise ConfigError(
                f"{key} {value!r} is not a DNS-1123 label of at most {limit} characters: "
                "use lowercase letters, digits and '-'"
            )

    return check


def ipv4_cidr(key: str, value: str) -> None:
    try:
        ipaddress.IPv4Network(value)
    except ValueError:
        raise ConfigError(f"{key} entry {value!r} is not an IPv4 CIDR: use e.g. 203.0.113.7/32") from None


def vpc_cidr(key: str, value: str) -> None:
    try:
        net = ipaddress.IPv4Network(value)
    except ValueError:
        raise ConfigError(f"{key} {value!r} is not an IPv4 network: use e.g. 10.0.0.0/16") from None
    if not 16 <= net.prefixlen <= 22:
        raise ConfigError(f"{key} {value!r} has prefix /{net.prefixlen}: use a /16 to /22")


def two_or_three_azs(key: str, value: tuple[str, ...]) -> None:
    if len(set(value)) != len(value) or not 2 <= len(value) <= 3:
        raise ConfigError(
            f"{key} {list(value)!r} must be 2 or 3 distinct AZs: the EKS control plane needs two; "
            "set e.g. [us-west-2a, us-west-2b]"
        )


def public_cidrs(key: str, value: tuple[str, ...]) -> None:
    if len(value) > MAX_PUBLIC_ACCESS_CIDRS:
        raise ConfigError(
            f"{key} lists {len(value)} CIDRs but EKS accepts at most {MAX_PUBLIC_ACCESS_CIDRS}: merge them"
        )
    for cidr in value:
        ipv4_cidr(key, cidr)


def log_types(key: str, value: tuple[str, ...]) -> None:
    bad = [t for t in value if t not in CONTROL_PLANE_LOG_TYPES]
    if bad:
        raise ConfigError(f"{key} {bad!r} unknown: use some of {list(CONTROL_PLANE_LOG_TYPES)}")


def kubernetes_version(key: str, value: str) -> None:
    if not _K8S_VERSION.fullmatch(value) or int(value.split(".")[1]) < 30:
        raise ConfigError(
            f"{key} {value!r} is not an EKS version 1.30 or newer (the AL2023 NVIDIA AMI needs it): set e.g. '1.36'"
        )


def addon_version(key: str, value: str) -> None:
    if not _ADDON_VERSION.fullmatch(value):
        raise ConfigError(
            f"{key} {value!r} is not an EKS add-on version (vMAJOR.MINOR.PATCH-eksbuild.N): list the versions for "
            "your cluster with `aws eks describe-addon-versions --addon-name <vpc-cni|kube-proxy> "
            "--kubernetes-version 1.36 --query 'addons[].addonVersions[].addonVersion'`"
        )


def known_instance(key: str, value: str):
    """The catalog's facts of instance type ``value``; ConfigError with the closest known type."""
    try:
        return instance_spec(value)
    except KeyError:
        raise ConfigError(
            f"{key} {value!r} is not in infra/data/instance_types.json: "
            f"{close_match(value, known_instance_types())} (or add its facts there)"
        ) from None


def efa_gpu_instance(key: str, value: str) -> None:
    spec = known_instance(key, value)
    efa_types = [t for t in known_instance_types() if instance_spec(t).efa_supported and instance_spec(t).gpus]
    if spec.gpus == 0:
        raise ConfigError(f"{key} {value!r} has no GPU: use one of {efa_types}")
    if not spec.efa_supported:
        raise ConfigError(f"{key} {value!r} does not support EFA: use one of {efa_types}")


POD_IDENTITY, IRSA = "pod-identity", "irsa"
POD_IDENTITY_MODES = (POD_IDENTITY, IRSA)


def pod_identity_mode(key: str, value: str) -> None:
    if value not in POD_IDENTITY_MODES:
        raise ConfigError(
            f"{key} {value!r} is not one of {list(POD_IDENTITY_MODES)}: {close_match(value, POD_IDENTITY_MODES)}"
        )


def reservation_id(key: str, value: str) -> None:
    if value and not _CAPACITY_RESERVATION.fullmatch(value):
        raise ConfigError(f"{key} {value!r} is not a capacity reservation id: use cr-xxxxxxxxxxxxxxxxx or ''")


def is_floating_image(image: str) -> bool:
    """True if ``image`` has no digest and no tag, or a tag that moves (latest, stable, ...)."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True
    tag = last.rsplit(":", 1)[1]
    return tag.lower() in FLOATING_TAGS or tag.lower().endswith("-latest")


def pinned_image(key: str, value: str) -> None:
    if is_floating_image(value):
        raise ConfigError(
            f"{key} {value!r} has a floating or missing tag: pin a version tag or a digest, e.g. "
            "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
        )


def placement_group(key: str, value: str) -> None:
    if value and not _PLACEMENT_GROUP.fullmatch(value):
        raise ConfigError(
            f"{key} {value!r} is not a placement group name: use letters, digits, '.', '_' and '-' (at most 255), "
            "or '' to let the stack create one"
        )


def role_arns(key: str, value: tuple[str, ...]) -> None:
    for arn in value:
        if not _ROLE_ARN.fullmatch(arn):
            raise ConfigError(f"{key} entry {arn!r} is not an IAM role ARN: use arn:aws:iam::<account-id>:role/<name>")


def bucket_name(key: str, value: str) -> None:
    if value and (not _BUCKET_NAME.fullmatch(value) or "--" in value):
        raise ConfigError(
            f"{key} {value!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits and '-' "
            "(no dots), or '' to let Pulumi name it"
        )


def ray_version(key: str, value: str) -> None:
    if not _EXACT_SEMVER.fullmatch(value) or value.startswith("v"):
        raise ConfigError(f"{key} {value!r} is not an exact Ray version: set e.g. 2.58.0")


def parse_quantity(key: str, value: str) -> float:
    """A Kubernetes CPU or memory quantity in cores or GiB. ConfigError if malformed."""
    m = _QUANTITY.fullmatch(str(value).strip())
    if not m:
        raise ConfigError(f"{key} {value!r} is not a Kubernetes quantity: use e.g. '40', '500m', '160Gi'")
    factors = {"": 1.0, "m": 1e-3, "Ki": 1 / 1024**2, "Mi": 1 / 1024, "Gi": 1.0, "Ti": 1024.0}
    factors |= {"k": 1e3 / 1024**3, "M": 1e6 / 1024**3, "G": 1e9 / 1024**3, "T": 1e12 / 1024**3}
    return float(m.group(1)) * factors[m.group(2) or ""]


def memory_gib(key: str, value: str) -> float:
    if not _MEMORY_UNIT.search(str(value).strip()):
        raise ConfigError(f"{key} {value!r} has no unit: write memory as e.g. '160Gi'")
    return parse_quantity(key, value)


def cpu_cores(key: str, value: str) -> float:
    if _MEMORY_UNIT.search(str(value).strip()):
        raise ConfigError(f"{key} {value!r} is a memory unit: write CPU as cores ('40') or millicores ('500m')")
    cores = parse_quantity(key, value)
    if cores <= 0:
        raise ConfigError(f"{key} {value!r} is no CPU at all: set e.g. '2'")
    return cores


def _memory(key: str, value: str) -> None:
    if memory_gib(key, value) <= 0:
        raise ConfigError(f"{key} {value!r} is no memory at all: set e.g. '8Gi'")


def _cpu(key: str, value: str) -> None:
    cpu_cores(key, value)


# --------------------------------------------------------------------------- the table

_GPU_AZ = (
    "The one AZ of the GPU nodes (a cluster placement group lives in one AZ); one of availabilityZones. "
    "Empty means preflight chooses one of availabilityZones that offers gpuInstanceType, and "
    "`python -m automation run` sets it in the stack before preview/up; the Pulumi program refuses an empty value."
)
_RESERVATION = (
    "Optional targeted capacity reservation (cr-...) for the GPU nodes, in gpuAvailabilityZone: an On-Demand Capacity "
    "Reservation or, with gpuCapacityBlock true, a Capacity Block for ML. A matching open On-Demand Capacity "
    "Reservation is used by instances in a cluster placement group too; AWS recommends (does not require) making the "
    "reservation in the cluster placement group, which needs the group to exist first: create it, make the reservation "
    "in it, and set gpuPlacementGroupName to its name "
    "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups-limitations.html, "
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html). A reservation made in a placement group is "
    "used only by instances in that group; preflight checks it. Empty for plain on-demand capacity."
)


def train_block(key: str, value: Mapping[str, Any]) -> None:
    """Refuse a train: key that TrainConfig lacks or that the driver sets (TRAIN_KEYS_FILE); values are
    judged by TrainConfig itself when automation parses the block."""
    known = json.loads(TRAIN_KEYS_FILE.read_text(encoding="utf-8"))
    for name in value:
        label = f"{PROJECT}:{key}.{name}"
        if name in known["driver_keys"]:
            raise ConfigError(f"{label} is set by the driver for every run: remove it from {PROJECT}:{key}")
        if name not in known["keys"]:
            raise ConfigError(f"unknown training option {label} ({name!r}): {close_match(str(name), known['keys'])}")


_TRAIN = (
    "The training job on this cluster: a mapping of TrainConfig fields (python -m workloads.train --help explains "
    "each) that overrides the cluster's job defaults in automation/job.py key by key. "
    "The driver sets launcher, run_id, run_dir, nccl_log_dir, summary_json and name itself. No type is declared: "
    "Pulumi.yaml cannot type an object key (https://github.com/pulumi/pulumi/issues/11321, "
    "https://github.com/pulumi/pulumi/issues/16056)."
)

KEYS: tuple[Key, ...] = (
    # --- network
    Key(
        "vpcCidr",
        "string",
        "10.0.0.0/16",
        "IPv4 CIDR of the VPC (a /16 to /22); private subnets get a quarter each, public subnets a sixty-fourth.",
        "network",
        vpc_cidr,
    ),
    Key(
        "availabilityZones",
        "array",
        ("us-west-2a", "us-west-2b"),
        "AZs of the private subnets (2 or 3, all in aws:region); the EKS control plane needs at least two, and "
        "gpuAvailabilityZone must be one of them.",
        "network",
        two_or_three_azs,
    ),
    # --- cluster
    Key("clusterName", "string", "ray-efa-eks", "Name of the EKS cluster.", "cluster", dns_label(100)),
    Key(
        "kubernetesVersion",
        "string",
        "1.36",
        "EKS Kubernetes version (major.minor); the AL2023 NVIDIA AMI type needs 1.30 or newer. 1.36 is in EKS "
        "standard support until 2027-08-02 (EKS released it on 2026-06-02; standard support lasts 14 months: "
        "https://endoflife.date/amazon-eks), 1.35 until 2027-03-27; 1.34's ended on 2026-12-02. AWS's own Ray "
        "Train sample defaults to 1.36 (aws-samples/sample-aws-deep-learning-containers, "
        "training/ray-train/scripts/env.sh). A version past its standard support is accepted with a warning, because "
        "EKS bills extended support per cluster hour "
        "(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html).",
        "cluster",
        kubernetes_version,
    ),
    Key(
        "vpcCniVersion",
        "string",
        "v1.22.4-eksbuild.3",
        "Version of the EKS-managed VPC CNI add-on (vpc-cni), pinned so that a later `pulumi up` never changes "
        "pod networking unasked (pulumi-eks otherwise takes the newest for the cluster's Kubernetes version). "
        "v1.22.4-eksbuild.3 is the version EKS offered for Kubernetes 1.31 to 1.36 in published records of "
        "2026, one of them an EKS 1.36 cluster that resolved to it; the EKS guide's managing-vpc-cni table read "
        "here stops before 1.36. Preflight checks it with `aws eks describe-addon-versions --addon-name vpc-cni "
        "--kubernetes-version <kubernetesVersion>`.",
        "cluster",
        addon_version,
    ),
    Key(
        "kubeProxyVersion",
        "string",
        "v1.36.0-eksbuild.21",
        "Version of the EKS-managed kube-proxy add-on, pinned like vpcCniVersion (pulumi-eks otherwise takes the "
        "newest at every `up`). kube-proxy follows the Kubernetes minor version, so change it with "
        "kubernetesVersion. v1.36.0-eksbuild.21 is what an EKS 1.36 cluster resolved to in a published record of "
        "2026-09 (beside vpc-cni v1.22.4-eksbuild.3); the EKS guide's managing-kube-proxy table read here stops "
        "before 1.36. Preflight checks it with `aws eks describe-addon-versions --addon-name kube-proxy "
        "--kubernetes-version <kubernetesVersion>`.",
        "cluster",
        addon_version,
    ),
    Key(
        "apiPublicAccess",
        "boolean",
        True,
        "Whether the Kubernetes API has a public endpoint (limited to apiPublicAccessCidrs); false makes it "
        "private only, reachable from inside the VPC.",
        "cluster",
    ),
    Key(
        "apiPublicAccessCidrs",
        "array",
        ("0.0.0.0/0",),
        "CIDRs allowed to reach the public API endpoint; set it to your own address (x.x.x.x/32). Ignored when "
        "apiPublicAccess is false.",
        "cluster",
        public_cidrs,
    ),
    Key(
        "controlPlaneLogTypes",
        "array",
        ("api", "audit", "authenticator"),
        "EKS control-plane log types sent to CloudWatch (api, audit, authenticator, controllerManager, scheduler).",
        "cluster",
        log_types,
    ),
    Key(
        "systemInstanceType",
        "string",
        "m7i.xlarge",
        "Instance type of the system node group (label role=system) that runs CoreDNS, the KubeRay operator and"
        " the Ray head.",
        "cluster",
        known_instance,
    ),
    Key(
        "systemNodeCount",
        "integer",
        1,
        f"Number of system nodes (1 to {MAX_NODES_PER_MANAGED_NODE_GROUP}, the EKS quota of nodes per managed "
        f"node group).",
        "cluster",
        between(
            1,
            MAX_NODES_PER_MANAGED_NODE_GROUP,
            "the operator and the Ray head need a node, and EKS allows 450 per managed node group",
        ),
    ),
    Key(
        "systemRootVolumeGib",
        "integer",
        100,
        "Size of the system nodes' encrypted gp3 root volume in GiB; the Ray head pulls the same large CUDA image "
        "as the workers.",
        "cluster",
        between(50, MAX_GP3_GIB, "below 50 GiB the Ray head's CUDA image does not fit; gp3 ends at 16 TiB"),
    ),
    Key(
        "clusterAdminRoleArns",
        "array",
        (),
        "IAM role ARNs (arn:aws:iam::<account>:role/<name>) given cluster-admin through an EKS access entry, e.g. a "
        "CI or on-call role; the principal that creates the cluster is admin anyway.",
        "cluster",
        role_arns,
    ),
    # --- GPU nodes
    Key(
        "gpuInstanceType",
        "string",
        "g6.12xlarge",
        "EFA-capable GPU instance type of the worker node group (label role=gpu-worker); must be in "
        "infra/data/instance_types.json.",
        "gpu nodes",
        efa_gpu_instance,
    ),
    Key(
        "gpuNodeCount",
        "integer",
        2,
        f"Number of GPU nodes while a run trains (the node group's max; 1 to {MAX_NODES_PER_MANAGED_NODE_GROUP}, "
        f"the EKS quota of nodes per managed node group). One node is allowed, but then no traffic crosses EFA.",
        "gpu nodes",
        between(
            1, MAX_NODES_PER_MANAGED_NODE_GROUP, "2 or more test EFA, and EKS allows 450 nodes per managed node group"
        ),
    ),
    Key("gpuAvailabilityZone", "string", "", _GPU_AZ, "gpu nodes"),
    Key(
        "gpuIdleNodes",
        "integer",
        0,
        "GPU nodes left running between runs: `python -m automation run` scales the node group to this many when it "
        "ends (unless --keep-nodes) and back to gpuNodeCount at its start; the idle guard scales to it too. 0 to "
        "gpuNodeCount.",
        "gpu nodes",
        between(0, MAX_NODES_PER_MANAGED_NODE_GROUP, "at most gpuNodeCount nodes stay up between runs"),
    ),
    Key(
        "gpuIdleMinutes",
        "integer",
        30,
        "Minutes without a running Ray job after which the in-cluster idle guard (a CronJob on the system node) "
        "scales the GPU node group to gpuIdleNodes; 0 turns the guard off (no CronJob).",
        "gpu nodes",
        between(0, 10080, "0 turns the guard off; a week (10080 minutes) is the longest wait"),
    ),
    Key(
        "gpuEfaInterfaces",
        "integer",
        1,
        "EFA interfaces per GPU node; must equal the instance type's maximum (one per network card).",
        "gpu nodes",
    ),
    Key("gpuCapacityReservationId", "string", "", _RESERVATION, "gpu nodes", reservation_id),
    Key(
        "gpuCapacityBlock",
        "boolean",
        False,
        "True when gpuCapacityReservationId is a Capacity Block for ML (its ReservationType is capacity-block): the "
        "launch template then names the instance type and sets the capacity-block market type, and the node group "
        "takes the CAPACITY_BLOCK capacity type and lists no instance types "
        "(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). Capacity Blocks exist only "
        "for some types (P4d, P5, P5e, P5en, P6, Trn1, Trn2: "
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html); config refuses true for "
        "any other gpuInstanceType (g6 included). EKS updates a node group on a Capacity Block only at desired "
        "size 0: scale it to 0 before an `up` that changes it. Preflight reads the reservation's type and says "
        "which value to set.",
        "gpu nodes",
    ),
    Key(
        "gpuPlacementGroupName",
        "string",
        "",
        "Name of an existing cluster placement group in gpuAvailabilityZone for the GPU nodes (needed with a "
        "capacity reservation made in a placement group, which only instances in that group use). Empty makes the "
        "stack create its own cluster placement group.",
        "gpu nodes",
        placement_group,
    ),
    Key(
        "gpuRootVolumeGib",
        "integer",
        200,
        "Size of the GPU nodes' encrypted gp3 root volume in GiB (the Ray training image is large).",
        "gpu nodes",
        between(50, MAX_GP3_GIB, "below 50 GiB the training image does not fit; gp3 ends at 16 TiB"),
    ),
    # --- Helm charts (exact versions; ranges and 'latest' are rejected)
    Key(
        "nvidiaDevicePluginChartVersion",
        "string",
        "0.20.0",
        "Version of the nvidia-device-plugin chart (https://nvidia.github.io/k8s-device-plugin).",
        "charts",
        exact_version,
    ),
    Key(
        "efaDevicePluginChartVersion",
        "string",
        "v0.5.30",
        "Version of the aws-efa-k8s-device-plugin chart (https://aws.github.io/eks-charts).",
        "charts",
        exact_version,
    ),
    Key(
        "kuberayOperatorChartVersion",
        "string",
        "1.5.2",
        "Version of the kuberay-operator chart (https://ray-project.github.io/kuberay-helm/); the RayCluster is"
        " checked against the 1.5.2 CRD.",
        "charts",
        exact_version,
    ),
    # --- Ray
    Key("rayNamespace", "string", "ray", "Kubernetes namespace of the RayCluster.", "ray", dns_label(50)),
    Key(
        "rayClusterName",
        "string",
        "ray-efa",
        "Name of the RayCluster; its head service is <name>-head-svc.",
        "ray",
        dns_label(50),
    ),
    Key(
        "rayImage",
        "string",
        "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0",
        "Container image of the Ray head and workers (pinned tag or digest; never latest). The default is the full "
        "tag of Ray Train DLC v1.1 (Ray 2.58.0, PyTorch 2.13.0, EFA 1.49.0 with aws-ofi-nccl 1.20.0); "
        "train-ml-cuda-v1.1 and train-ml-cuda-v1 move with later patch releases "
        "(aws/deep-learning-containers docs/ray-train/changelog/index.md).",
        "ray",
        pinned_image,
    ),
    Key(
        "rayVersion",
        "string",
        "2.58.0",
        "Ray version inside rayImage (the RayCluster's rayVersion).",
        "ray",
        ray_version,
    ),
    Key("rayHeadCpu", "string", "2", "CPU request and limit of the Ray head pod (on a system node).", "ray", _cpu),
    Key("rayHeadMemory", "string", "8Gi", "Memory request and limit of the Ray head pod.", "ray", _memory),
    Key(
        "rayWorkerGroupName",
        "string",
        "gpu-workers",
        "Name of the RayCluster's GPU worker group.",
        "ray",
        dns_label(50),
    ),
    Key(
        "rayWorkerGpus",
        "integer",
        4,
        "nvidia.com/gpu request and limit of each worker pod, and its Ray num-gpus; must equal the GPU "
        "instance's GPU count.",
        "ray",
    ),
    Key(
        "rayWorkerCpu",
        "string",
        "40",
        "CPU request and limit of each worker pod; must fit the GPU instance's allocatable CPU.",
        "ray",
        _cpu,
    ),
    Key(
        "rayWorkerMemory",
        "string",
        "160Gi",
        "Memory request and limit of each worker pod; must fit the GPU instance's allocatable memory.",
        "ray",
        _memory,
    ),
    Key(
        "rayWorkerEfa",
        "integer",
        1,
        "vpc.amazonaws.com/efa request and limit of each worker pod; must equal gpuEfaInterfaces (one worker "
        "per node takes them all).",
        "ray",
    ),
    Key(
        "rayWorkerShmSize",
        "string",
        "32Gi",
        "Size of the memory-backed /dev/shm of each worker (NCCL's shared-memory transport and Ray's object "
        "store); counts against rayWorkerMemory.",
        "ray",
        _memory,
    ),
    Key(
        "rayWorkerHugepages",
        "boolean",
        True,
        "Whether each worker pod requests hugepages-2Mi: 5120Mi, as the EKS EFA guide's pods do, from the pool the "
        "GPU nodes reserve at boot (their launch template's user data). false leaves the request out and sets "
        "FI_EFA_USE_HUGE_PAGE=0, so libfabric uses ordinary pages (a small performance cost): for an AMI or node "
        "where the pool cannot be reserved.",
        "ray",
    ),
    # --- storage (the run bucket every Ray pod reaches through EKS Pod Identity)
    Key(
        "storageBucketName",
        "string",
        "",
        "Name of the private S3 bucket that holds Ray Train's checkpoints under s3://<bucket>/<stack>/runs. Empty "
        "means Pulumi names it <clusterName>-<stack>- plus a random suffix; a set name must be a valid S3 bucket "
        "name (3-63 lowercase letters, digits and '-', no dots).",
        "storage",
        bucket_name,
    ),
    Key(
        "storageRetentionDays",
        "integer",
        30,
        "Days after which objects under <stack>/ in the bucket expire (a lifecycle rule); 0 keeps them forever. "
        "Incomplete multipart uploads are always aborted after 1 day.",
        "storage",
        between(0, 36500, "0 keeps objects forever"),
    ),
    Key(
        "storageForceDestroy",
        "boolean",
        False,
        "Whether `destroy` deletes the bucket with every checkpoint in it. The default (false) keeps the bucket "
        "and its data: destroy leaves it in the account (Pulumi's retainOnDelete) and prints its name.",
        "storage",
    ),
    Key(
        "podIdentityMode",
        "string",
        POD_IDENTITY,
        "How the Ray pods get the run bucket's role. pod-identity: EKS Pod Identity (an agent add-on and an "
        "association; https://docs.aws.amazon.com/eks/latest/userguide/pod-identities.html). irsa: IAM roles for "
        "service accounts through the cluster's OIDC provider (a role trusting sts:AssumeRoleWithWebIdentity for "
        "the ray-train ServiceAccount only, which carries the eks.amazonaws.com/role-arn annotation; no Pod "
        "Identity association; https://docs.aws.amazon.com/eks/latest/userguide/iam-roles-for-service-accounts.html). "
        "Use irsa when the pods' AWS SDK is too old for Pod Identity: pyarrow's S3 filesystem needs the AWS SDK for "
        "C++ 1.11.263 or newer (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-minimum-sdk.html). The S3 "
        "permissions are the same policy document in both modes.",
        "storage",
        pod_identity_mode,
    ),
    # --- the training job
    Key("train", "object", {}, _TRAIN, "training job", train_block),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}


def coerce(key: Key, value: Any) -> Any:
    """``value`` as ``key``'s declared type; accepts the strings the Pulumi engine passes."""
    kind = key.type
    article = "an" if kind[0] in "aeiou" else "a"
    bad = ConfigError(f"{key.name} {value!r} is not {article} {kind}: set {PROJECT}:{key.name} to {article} {kind}")
    if kind in ("array", "object") and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise bad from None
    if kind == "string" and not isinstance(value, (dict, list, tuple, bool)):
        return "" if value is None else str(value)
    if kind == "integer" and not isinstance(value, bool):
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    if kind == "array" and isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if kind == "object" and isinstance(value, dict):
        return dict(value)
    raise bad


# --------------------------------------------------------------------------- Pulumi.yaml


def pulumi_yaml_config(object_keys: Mapping[str, Sequence[str]]) -> str:
    """Pulumi.yaml's ``config:`` block, rendered from KEYS (sections as comments).

    ``object_keys`` lists, for each object key, the keys its mapping may hold: infra passes an
    object through without knowing them (the train: block's are TrainConfig's fields), so the
    caller that does know them supplies them for the documentation.
    """
    import textwrap

    import yaml

    def scalar(value: Any) -> str:
        value = list(value) if isinstance(value, tuple) else value
        return yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("\n...\n").strip()

    lines = ["config:"]
    section = None
    for key in KEYS:
        if key.section != section:
            section = key.section
            lines.append(f"  # --- {section} ---")
        lines.append(f"  {key.name}:")
        description = key.description
        if key.type == "object":  # Pulumi.yaml cannot type an object key (see _TRAIN)
            description += f" Keys: {', '.join(object_keys[key.name])}."
        else:
            lines.append(f"    type: {key.type}")
            if key.type == "array":
                lines += ["    items:", "      type: string"]
            lines.append(f"    default: {scalar(key.default)}")
        lines.append("    description: >-")
        lines += ["      " + line for line in textwrap.wrap(description, 100, break_on_hyphens=False)]
    return "\n".join(lines) + "\n"


def train_keys_json(keys: Sequence[str], driver_keys: Sequence[str]) -> str:
    """TRAIN_KEYS_FILE's text: the train: block's allowed keys and the ones the driver sets."""
    doc = {
        "$comment": "Generated by `python -m automation.job --write-pulumi-yaml` from workloads.config.TrainConfig "
        "(keys) and automation.job.DRIVER_FIELDS (driver_keys); do not edit.",
        "keys": list(keys),
        "driver_keys": list(driver_keys),
    }
    return json.dumps(doc, indent=2) + "\n"


def write_train_keys(keys: Sequence[str], driver_keys: Sequence[str], path: Path = TRAIN_KEYS_FILE) -> bool:
    """Write TRAIN_KEYS_FILE from the caller's lists; True if it changed."""
    new = train_keys_json(keys, driver_keys)
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old


def write_pulumi_yaml(path: Path, object_keys: Mapping[str, Sequence[str]]) -> bool:
    """Replace the ``config:`` block at the end of ``path`` with the rendered one; True if it changed."""
    text = path.read_text(encoding="utf-8")
    head = text[: text.index("\nconfig:\n") + 1]
    new = head + pulumi_yaml_config(object_keys)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
