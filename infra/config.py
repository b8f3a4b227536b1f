"""Typed, validated stack configuration: what the infra components consume.

Every key is declared once, in ``infra/config_keys.py`` (name, type, default, description, check);
``Pulumi.yaml``'s ``config:`` block is rendered from that table. ``Pulumi.<stack>.yaml`` sets
``aws:region`` and what differs. Two ways in, one validation:

- ``load_stack(stack, project_dir)`` reads both files once, without the pulumi CLI or runtime
  (tests, the driver, the offline render);
- ``from_pulumi_config()`` reads the values the Pulumi engine hands the program.

Both end in ``validate(raw, stack=..., region=...)``, which checks in an order that blames the
real cause first: the region, each key's type, each key's own value, then the cross-field rules
of ``infra/config_rules.py``. A broken rule raises ``ConfigError`` whose message names the key,
the value and the fix; a legal but doubtful setting (one GPU node, a public API open to the
world) is returned in ``StackConfig.warnings`` and emitted as a ``ConfigWarning``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.config_files import check_project_file, check_region, known_stacks, read_stack_file
from infra.config_keys import (
    IRSA,
    KEYS,
    KEYS_BY_NAME,
    POD_IDENTITY,
    PROJECT,
    ConfigError,
    ConfigWarning,
    coerce,
    is_floating_image,
    parse_quantity,
)
from infra.config_rules import NODE_CPU_HEADROOM, NODE_MEMORY_HEADROOM_GIB, NOTES, RULES

__all__ = [
    "IRSA",
    "NODE_CPU_HEADROOM",
    "NODE_MEMORY_HEADROOM_GIB",
    "POD_IDENTITY",
    "PROJECT",
    "ChartsConfig",
    "ClusterConfig",
    "ConfigError",
    "ConfigWarning",
    "GpuNodesConfig",
    "NetworkConfig",
    "RayConfig",
    "RayHeadConfig",
    "RayWorkerConfig",
    "StackConfig",
    "StorageConfig",
    "SystemNodesConfig",
    "from_pulumi_config",
    "is_floating_image",
    "known_stacks",
    "load_stack",
    "parse_quantity",
    "require_gpu_az",
    "stack_config_values",
    "validate",
]

# --------------------------------------------------------------------------- typed config


@dataclass(frozen=True)
class NetworkConfig:
    vpc_cidr: str
    azs: tuple[str, ...]  # private-subnet AZs, in order


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    kubernetes_version: str
    endpoint_public_access: bool
    public_access_cidrs: tuple[str, ...]  # empty when the endpoint is private only
    log_types: tuple[str, ...]
    vpc_cni_version: str  # the EKS-managed vpc-cni add-on's version, pinned
    kube_proxy_version: str  # the EKS-managed kube-proxy add-on's version, pinned
    admin_role_arns: tuple[str, ...] = ()  # given cluster-admin through an EKS access entry


@dataclass(frozen=True)
class SystemNodesConfig:
    instance_type: str
    count: int
    root_volume_gib: int = 100


@dataclass(frozen=True)
class GpuNodesConfig:
    instance_type: str
    node_count: int
    availability_zone: str
    efa_interfaces: int
    gpus_per_node: int
    capacity_reservation_id: str | None
    root_volume_gib: int
    capacity_block: bool = False  # the reservation is a Capacity Block for ML
    placement_group_name: str | None = None  # an existing cluster placement group; None: the stack creates one
    idle_nodes: int = 0  # nodes kept between runs (gpuIdleNodes)
    idle_minutes: int = 30  # the idle guard's wait; 0: no guard (gpuIdleMinutes)


@dataclass(frozen=True)
class ChartsConfig:
    nvidia_device_plugin: str
    efa_device_plugin: str
    kuberay_operator: str


@dataclass(frozen=True)
class RayHeadConfig:
    cpu: str
    memory: str


@dataclass(frozen=True)
class RayWorkerConfig:
    group_name: str
    replicas: int
    num_gpus: int
    cpu: str
    memory: str
    efa: int
    shm_size: str
    hugepages: bool = True  # request the EFA huge pages (rayWorkerHugepages)


@dataclass(frozen=True)
class RayConfig:
    namespace: str
    cluster_name: str
    image: str
    version: str
    head: RayHeadConfig
    worker: RayWorkerConfig
    region: str  # aws:region of the stack: the pods' AWS_REGION / AWS_DEFAULT_REGION

    @property
    def head_service_name(self) -> str:
        """KubeRay names the head service ``<cluster>-head-svc``."""
        return f"{self.cluster_name}-head-svc"


@dataclass(frozen=True)
class StorageConfig:
    bucket_name: str  # empty: Pulumi names it from bucket_prefix
    bucket_prefix: str  # <clusterName>-<stack>-, used when bucket_name is empty
    object_prefix: str  # the stack name: every key the Ray pods may touch starts with "<object_prefix>/"
    retention_days: int  # 0: objects never expire
    force_destroy: bool
    pod_identity_mode: str = POD_IDENTITY  # how the pods get the bucket's role: POD_IDENTITY | IRSA


@dataclass(frozen=True)
class StackConfig:
    stack: str
    region: str
    network: NetworkConfig
    cluster: ClusterConfig
    system_nodes: SystemNodesConfig
    gpu_nodes: GpuNodesConfig
    charts: ChartsConfig
    ray: RayConfig
    storage: StorageConfig
    # The stack's train: block, un-interpreted: automation/job.py parses it into a TrainConfig.
    train: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


# --------------------------------------------------------------------------- loading


def load_stack(stack: str, project_dir: Path) -> StackConfig:
    """Read ``Pulumi.<stack>.yaml`` (and check ``Pulumi.yaml``) once, then validate.

    Works offline without the pulumi CLI. Raises ConfigError for a missing or broken file, an
    unknown stack (listing the known ones), a misspelled key, or any broken rule of ``validate``.
    """
    check_project_file(Path(project_dir))
    found = read_stack_file(stack, Path(project_dir))
    return validate(found.values, stack=stack, region=found.region)


def stack_config_values(stack: str, project_dir: Path) -> dict[str, str]:
    """The merged config of a stack as the Pulumi engine would pass it (``project:key`` -> string).

    Used to run the program under Pulumi's mocks exactly as the engine would: the table's defaults,
    overridden by the stack file, arrays and objects as JSON.
    """
    check_project_file(Path(project_dir))
    found = read_stack_file(stack, Path(project_dir))
    with warnings.catch_warnings():  # the program reports the warnings when it validates again
        warnings.simplefilter("ignore", ConfigWarning)
        validate(found.values, stack=stack, region=found.region)  # fail early, with the clear message
    values: dict[str, Any] = {f"{PROJECT}:{k.name}": k.default for k in KEYS}
    values.update(found.raw)

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
        check_project_file(Path(project_dir))
    cfg = pulumi.Config(PROJECT)
    raw = {k.name: cfg.get(k.name) for k in KEYS if cfg.get(k.name) is not None}
    raw |= {k: v for k, v in _engine_keys().items() if k not in KEYS_BY_NAME}  # validate refuses these
    region = pulumi.Config("aws").get("region")
    with warnings.catch_warnings():  # the program reports StackConfig.warnings through pulumi.log
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(raw, stack=pulumi.get_stack(), region=region)


def _engine_keys() -> dict[str, Any]:
    """Every ``ray-efa-eks:*`` key the engine passed, declared or not (unprefixed).

    pulumi.Config reads one named key at a time; the whole bag is the runtime's config map and the
    PULUMI_CONFIG environment variable (pulumi/runtime/config.py in the pulumi Python SDK).
    """
    from pulumi.runtime import config as runtime_config

    bag = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{PROJECT}:"
    return {k[len(prefix) :]: v for k, v in bag.items() if k.startswith(prefix)}


# --------------------------------------------------------------------------- validation


def validate(raw: Mapping[str, Any], *, stack: str, region: str | None) -> StackConfig:
    """Coerce ``raw`` (our keys without the project prefix) over the table's defaults and check it.

    Order: unknown keys, the region, every key's type, every key's own check, the cross-field
    rules. Raises ConfigError on the first broken one; returns a StackConfig whose ``warnings``
    list the doubtful settings, each also emitted as a ConfigWarning.
    """
    from infra.config_keys import close_match

    for name in raw:
        if name not in KEYS_BY_NAME:
            raise ConfigError(f"unknown config key {PROJECT}:{name}: {close_match(name, list(KEYS_BY_NAME))}")
    region = check_region(stack, region)
    v = {k.name: coerce(k, raw.get(k.name, k.default)) for k in KEYS}
    for k in KEYS:
        if k.check is not None:
            k.check(k.name, v[k.name])
    for rule in RULES:
        rule(v, region)
    notes = tuple(note for note in (n(v, region) for n in NOTES) if note)
    for note in notes:
        warnings.warn(note, ConfigWarning, stacklevel=2)
    return _build(stack, region, v, notes)


def _build(stack: str, region: str, v: Mapping[str, Any], notes: tuple[str, ...]) -> StackConfig:
    from infra.catalog import instance_spec

    public = v["apiPublicAccess"]
    return StackConfig(
        stack=stack,
        region=region,
        network=NetworkConfig(vpc_cidr=str(v["vpcCidr"]), azs=tuple(v["availabilityZones"])),
        cluster=ClusterConfig(
            name=v["clusterName"],
            kubernetes_version=v["kubernetesVersion"],
            endpoint_public_access=public,
            public_access_cidrs=tuple(v["apiPublicAccessCidrs"]) if public else (),
            log_types=tuple(v["controlPlaneLogTypes"]),
            admin_role_arns=tuple(v["clusterAdminRoleArns"]),
            vpc_cni_version=v["vpcCniVersion"],
            kube_proxy_version=v["kubeProxyVersion"],
        ),
        system_nodes=SystemNodesConfig(
            instance_type=v["systemInstanceType"], count=v["systemNodeCount"], root_volume_gib=v["systemRootVolumeGib"]
        ),
        gpu_nodes=GpuNodesConfig(
            instance_type=v["gpuInstanceType"],
            node_count=v["gpuNodeCount"],
            availability_zone=v["gpuAvailabilityZone"],
            efa_interfaces=v["gpuEfaInterfaces"],
            gpus_per_node=instance_spec(v["gpuInstanceType"]).gpus,
            capacity_reservation_id=v["gpuCapacityReservationId"] or None,
            root_volume_gib=v["gpuRootVolumeGib"],
            capacity_block=v["gpuCapacityBlock"],
            placement_group_name=v["gpuPlacementGroupName"] or None,
            idle_nodes=v["gpuIdleNodes"],
            idle_minutes=v["gpuIdleMinutes"],
        ),
        charts=ChartsConfig(
            nvidia_device_plugin=v["nvidiaDevicePluginChartVersion"],
            efa_device_plugin=v["efaDevicePluginChartVersion"],
            kuberay_operator=v["kuberayOperatorChartVersion"],
        ),
        ray=RayConfig(
            namespace=v["rayNamespace"],
            cluster_name=v["rayClusterName"],
            image=v["rayImage"],
            version=v["rayVersion"],
            head=RayHeadConfig(cpu=v["rayHeadCpu"], memory=v["rayHeadMemory"]),
            worker=RayWorkerConfig(
                group_name=v["rayWorkerGroupName"],
                # Each worker pod takes every GPU of its node, so one pod per GPU node.
                replicas=v["gpuNodeCount"],
                num_gpus=v["rayWorkerGpus"],
                cpu=v["rayWorkerCpu"],
                memory=v["rayWorkerMemory"],
                efa=v["rayWorkerEfa"],
                shm_size=v["rayWorkerShmSize"],
                hugepages=v["rayWorkerHugepages"],
            ),
            region=region,
        ),
        storage=_storage(v, stack),
        train=dict(v["train"]),
        warnings=notes,
    )


BUCKET_PREFIX_MAX = 37  # aws.s3.Bucket's bucketPrefix limit (the provider adds a 26-character suffix)


def _storage(v: Mapping[str, Any], stack: str) -> StorageConfig:
    name = v["storageBucketName"]
    prefix = f"{v['clusterName']}-{stack}-"
    if not name and len(prefix) > BUCKET_PREFIX_MAX:
        raise ConfigError(
            f"the bucket name prefix {prefix!r} (clusterName-stack-) is longer than {BUCKET_PREFIX_MAX} characters: "
            f"set {PROJECT}:storageBucketName to a bucket name"
        )
    return StorageConfig(
        bucket_name=name,
        bucket_prefix=prefix,
        object_prefix=stack,
        retention_days=v["storageRetentionDays"],
        force_destroy=v["storageForceDestroy"],
        pod_identity_mode=v["podIdentityMode"],
    )


def require_gpu_az(cfg: StackConfig) -> str:
    """The GPU nodes' AZ; ConfigError (naming the two ways to set it) when the stack left it empty."""
    az = cfg.gpu_nodes.availability_zone
    if not az:
        raise ConfigError(
            f"gpuAvailabilityZone is empty for stack {cfg.stack!r}: "
            f"run `python -m automation preflight --stack {cfg.stack}` "
            f"to see which of availabilityZones {list(cfg.network.azs)} offer {cfg.gpu_nodes.instance_type} "
            f"(`python -m automation run --stack {cfg.stack}` chooses one and sets it in the stack), "
            f"or set {PROJECT}:gpuAvailabilityZone in Pulumi.{cfg.stack}.yaml"
        )
    return az
