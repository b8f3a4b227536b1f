"""Typed, validated stack configuration.

``Pulumi.yaml``'s ``config:`` block declares every key with its type, default and description;
``Pulumi.<stack>.yaml`` sets ``aws:region`` and what differs. Two ways in, one validation:

- ``load_stack(stack, project_dir)`` reads both files without the pulumi CLI or runtime
  (tests, the driver, the offline render);
- ``from_pulumi_config(project_dir)`` reads the values the Pulumi engine hands the program.

Both end in ``validate(raw, stack=..., region=..., schema=...)``, which coerces each value to its
declared type and applies the cross-field rules. A broken rule raises ``ConfigError`` whose
message names the key, the value and the fix; a legal but doubtful setting (one GPU node, a
public API open to the world) is returned in ``StackConfig.warnings`` and emitted as a
``ConfigWarning``.
"""

from __future__ import annotations

import ipaddress
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.catalog import instance_spec, known_instance_types

PROJECT = "ray-efa-eks"

# Room left on a node for the DaemonSets (aws-node, kube-proxy, the device plugins) and
# system pods, so a pod sized to "allocatable" does not stay Pending.
NODE_CPU_HEADROOM = 0.5
NODE_MEMORY_HEADROOM_GIB = 1.0

TRAIN_PRESETS = ("tiny", "qwen2.5-1.5b")
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
FLOATING_TAGS = frozenset({"latest", "stable", "nightly", "edge", "main", "master", "dev"})

_EXACT_SEMVER = re.compile(r"^v?\d+\.\d+\.\d+$")
_K8S_VERSION = re.compile(r"^1\.\d+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{8,17}$")
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (no dots: TLS to
# virtual-hosted names with dots fails certificate checks).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
BUCKET_PREFIX_MAX = 37  # aws.s3.Bucket's bucketPrefix limit (the provider adds a 26-character suffix)
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")


class ConfigError(ValueError):
    """A stack configuration that cannot work; the message names key, value and fix."""


class ConfigWarning(UserWarning):
    """A stack configuration that works but probably not as the user hopes."""


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


@dataclass(frozen=True)
class SystemNodesConfig:
    instance_type: str
    count: int


@dataclass(frozen=True)
class GpuNodesConfig:
    instance_type: str
    node_count: int
    availability_zone: str
    efa_interfaces: int
    gpus_per_node: int
    capacity_reservation_id: str | None
    root_volume_gib: int


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


@dataclass(frozen=True)
class RayConfig:
    namespace: str
    cluster_name: str
    image: str
    version: str
    head: RayHeadConfig
    worker: RayWorkerConfig

    @property
    def head_service_name(self) -> str:
        """KubeRay names the head service ``<cluster>-head-svc``."""
        return f"{self.cluster_name}-head-svc"


@dataclass(frozen=True)
class TrainingConfig:
    preset: str
    steps: int
    batch_size: int
    seq_len: int
    num_workers: int
    gpus_per_worker: int
    activation_checkpointing: bool = True


@dataclass(frozen=True)
class StorageConfig:
    bucket_name: str  # empty: Pulumi names it from bucket_prefix
    bucket_prefix: str  # <clusterName>-<stack>-, used when bucket_name is empty
    object_prefix: str  # the stack name: every key the Ray pods may touch starts with "<object_prefix>/"
    retention_days: int  # 0: objects never expire
    force_destroy: bool


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
    training: TrainingConfig
    storage: StorageConfig
    warnings: tuple[str, ...] = ()


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class KeySchema:
    """One key of Pulumi.yaml's ``config:`` block."""

    name: str
    type: str  # string | integer | boolean | array
    default: Any
    description: str


def read_project_schema(project_dir: Path) -> dict[str, KeySchema]:
    """The typed keys declared in ``project_dir/Pulumi.yaml``, by name."""
    import yaml  # pulumi itself depends on PyYAML, so the Pulumi virtualenv has it

    project = yaml.safe_load((Path(project_dir) / "Pulumi.yaml").read_text())
    schema = {}
    for name, decl in (project.get("config") or {}).items():
        if not isinstance(decl, dict) or "type" not in decl:
            raise ConfigError(f"Pulumi.yaml config key {name!r} has no type: declare type, default and description")
        schema[name] = KeySchema(name, decl["type"], decl.get("default"), decl.get("description", ""))
    return schema


def _coerce(key: str, kind: str, value: Any) -> Any:
    """``value`` as the declared ``kind``; accepts the strings the Pulumi engine passes."""
    article = "an" if kind[0] in "aeiou" else "a"
    bad = ConfigError(f"{key} {value!r} is not {article} {kind}: set {PROJECT}:{key} to {article} {kind}")
    if kind == "string":
        if isinstance(value, (dict, list, bool)):
            raise bad
        return "" if value is None else str(value)
    if kind == "integer":
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        raise bad
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad
    if kind == "array":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise bad from None
        if not isinstance(value, list):
            raise bad
        return tuple(str(v) for v in value)
    raise ConfigError(f"Pulumi.yaml declares {key} with unsupported type {kind!r}")


# --------------------------------------------------------------------------- loading


def known_stacks(project_dir: Path) -> tuple[str, ...]:
    """Stack names that have a ``Pulumi.<stack>.yaml`` in ``project_dir``."""
    return tuple(sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(project_dir).glob("Pulumi.*.yaml")))


def load_stack(stack: str, project_dir: Path) -> StackConfig:
    """Read ``Pulumi.yaml`` defaults merged with ``Pulumi.<stack>.yaml`` and validate them.

    Works offline without the pulumi CLI. Raises ConfigError for an unknown stack (listing the
    known ones), an undeclared key, or any broken rule of ``validate``.
    """
    import yaml

    project_dir = Path(project_dir)
    path = project_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"stack {stack!r} has no {path.name} in {project_dir}: known stacks are "
            f"{', '.join(known_stacks(project_dir)) or '(none)'}"
        )
    stack_values = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    schema = read_project_schema(project_dir)
    raw: dict[str, Any] = {}
    region = stack_values.get("aws:region")
    for full_key, value in stack_values.items():
        namespace, _, key = full_key.partition(":")
        if namespace != PROJECT:
            continue  # provider keys (aws:region, ...) are not ours to check
        if key not in schema:
            raise ConfigError(
                f"{path.name} sets {full_key} which Pulumi.yaml does not declare: "
                f"fix the name (known: {', '.join(sorted(schema))})"
            )
        raw[key] = value
    return validate(raw, stack=stack, region=region, schema=schema)


def stack_config_values(stack: str, project_dir: Path) -> dict[str, str]:
    """The merged config of a stack as the Pulumi engine would pass it (``project:key`` -> string).

    Used to run the program under Pulumi's mocks exactly as the engine would: defaults from
    Pulumi.yaml, overridden by the stack file, arrays as JSON.
    """
    import yaml

    project_dir = Path(project_dir)
    with warnings.catch_warnings():  # the program reports the warnings when it validates again
        warnings.simplefilter("ignore", ConfigWarning)
        load_stack(stack, project_dir)  # fail early, with the clear message
    schema = read_project_schema(project_dir)
    values: dict[str, Any] = {f"{PROJECT}:{k}": s.default for k, s in schema.items()}
    stack_values = (yaml.safe_load((project_dir / f"Pulumi.{stack}.yaml").read_text()) or {}).get("config") or {}
    values.update(stack_values)
    return {k: json.dumps(v) if isinstance(v, (list, dict, bool)) else str(v) for k, v in values.items()}


def from_pulumi_config(project_dir: Path) -> StackConfig:
    """The validated config of the running Pulumi program (stack, ``aws:region`` and our keys)."""
    import pulumi

    schema = read_project_schema(project_dir)
    cfg = pulumi.Config(PROJECT)
    raw = {key: cfg.get(key) for key in schema if cfg.get(key) is not None}
    region = pulumi.Config("aws").get("region")
    with warnings.catch_warnings():  # the program reports StackConfig.warnings through pulumi.log
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(raw, stack=pulumi.get_stack(), region=region, schema=schema)


# --------------------------------------------------------------------------- validation


def parse_quantity(key: str, value: str) -> float:
    """A Kubernetes CPU or memory quantity in cores or GiB. ConfigError if malformed."""
    m = _QUANTITY.fullmatch(str(value).strip())
    if not m:
        raise ConfigError(f"{key} {value!r} is not a Kubernetes quantity: use e.g. '40', '500m', '160Gi'")
    number, unit = float(m.group(1)), m.group(2) or ""
    factors = {
        "": 1.0,
        "m": 1e-3,
        "Ki": 1 / 1024**2,
        "Mi": 1 / 1024,
        "Gi": 1.0,
        "Ti": 1024.0,
        "k": 1e3 / 1024**3,
        "M": 1e6 / 1024**3,
        "G": 1e9 / 1024**3,
        "T": 1e12 / 1024**3,
    }
    return number * factors[unit]


def _memory_gib(key: str, value: str) -> float:
    text = str(value).strip()
    if not re.search(r"(Ki|Mi|Gi|Ti|k|M|G|T)$", text):
        raise ConfigError(f"{key} {value!r} has no unit: write memory as e.g. '160Gi'")
    return parse_quantity(key, text)


def _cpu_cores(key: str, value: str) -> float:
    if re.search(r"(Ki|Mi|Gi|Ti|k|M|G|T)$", str(value).strip()):
        raise ConfigError(f"{key} {value!r} is a memory unit: write CPU as cores ('40') or millicores ('500m')")
    return parse_quantity(key, value)


def is_floating_image(image: str) -> bool:
    """True if ``image`` has no digest and no tag, or a tag that moves (latest, stable, ...)."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return True
    tag = last.rsplit(":", 1)[1]
    return tag.lower() in FLOATING_TAGS or tag.lower().endswith("-latest")


def validate(
    raw: Mapping[str, Any],
    *,
    stack: str,
    region: str | None,
    schema: Mapping[str, KeySchema],
) -> StackConfig:
    """Coerce ``raw`` (our keys without the project prefix) over the schema defaults and check it.

    Raises ConfigError on the first broken rule; returns a StackConfig whose ``warnings`` list
    the doubtful settings, each also emitted as a ConfigWarning.
    """
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {', '.join(unknown)}: fix the name (known: {', '.join(sorted(schema))})"
        )
    v = {k: _coerce(k, s.type, raw.get(k, s.default)) for k, s in schema.items()}
    notes: list[str] = []

    if not region:
        raise ConfigError(
            f"aws:region is not set for stack {stack!r}: add 'aws:region: <region>' to Pulumi.{stack}.yaml"
        )

    # --- network
    try:
        vpc = ipaddress.IPv4Network(v["vpcCidr"])
    except ValueError:
        raise ConfigError(f"vpcCidr {v['vpcCidr']!r} is not an IPv4 network: use e.g. 10.0.0.0/16") from None
    if not 16 <= vpc.prefixlen <= 22:
        raise ConfigError(f"vpcCidr {v['vpcCidr']!r} has prefix /{vpc.prefixlen}: use a /16 to /22")
    azs = v["availabilityZones"]
    if len(set(azs)) != len(azs) or not 2 <= len(azs) <= 3:
        raise ConfigError(
            f"availabilityZones {list(azs)!r} must be 2 or 3 distinct AZs: the EKS control plane needs two; "
            f"set e.g. [{region}a, {region}b]"
        )
    for az in azs:
        if not re.fullmatch(re.escape(region) + r"[a-z]", az):
            raise ConfigError(
                f"availabilityZones entry {az!r} is not an AZ of aws:region {region!r}: use AZs such as {region}a"
            )
    gpu_az = v["gpuAvailabilityZone"]
    # Empty is legal here: preflight chooses an AZ that offers the type and the driver sets it in
    # the stack; the Pulumi program (require_gpu_az) refuses to build without one.
    if gpu_az and gpu_az not in azs:
        raise ConfigError(
            f"gpuAvailabilityZone {gpu_az!r} is not one of the network's private-subnet AZs {list(azs)}: "
            f"set gpuAvailabilityZone to one of them or add it to availabilityZones"
        )

    # --- cluster
    if not _DNS_LABEL.fullmatch(v["clusterName"]) or len(v["clusterName"]) > 100:
        raise ConfigError(
            f"clusterName {v['clusterName']!r} is not a valid EKS name: use lowercase letters, digits and '-'"
        )
    if not _K8S_VERSION.fullmatch(v["kubernetesVersion"]) or int(v["kubernetesVersion"].split(".")[1]) < 30:
        raise ConfigError(
            f"kubernetesVersion {v['kubernetesVersion']!r} is not an EKS version 1.30 or newer (the AL2023 NVIDIA AMI "
            f"needs it): set e.g. '1.34'"
        )
    public_cidrs: tuple[str, ...] = ()
    if v["apiPublicAccess"]:
        if not v["apiPublicAccessCidrs"]:
            raise ConfigError(
                "apiPublicAccessCidrs [] leaves the public endpoint reachable by nobody: list your address as x.x.x.x/32 "
                "or set apiPublicAccess to false"
            )
        for cidr in v["apiPublicAccessCidrs"]:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError:
                raise ConfigError(
                    f"apiPublicAccessCidrs entry {cidr!r} is not an IPv4 CIDR: use e.g. 203.0.113.7/32"
                ) from None
        public_cidrs = v["apiPublicAccessCidrs"]
        if "0.0.0.0/0" in public_cidrs:
            notes.append(
                "apiPublicAccessCidrs includes 0.0.0.0/0: the Kubernetes API endpoint is reachable from anywhere "
                "(IAM authentication still applies); set it to your address as x.x.x.x/32"
            )
    bad_logs = [t for t in v["controlPlaneLogTypes"] if t not in CONTROL_PLANE_LOG_TYPES]
    if bad_logs:
        raise ConfigError(f"controlPlaneLogTypes {bad_logs!r} unknown: use some of {list(CONTROL_PLANE_LOG_TYPES)}")

    # --- system nodes
    system = _known_instance("systemInstanceType", v["systemInstanceType"])
    if v["systemNodeCount"] < 1:
        raise ConfigError(
            f"systemNodeCount {v['systemNodeCount']} leaves no node for the operator and Ray head: set it to 1 or more"
        )

    # --- GPU nodes
    gpu = _known_instance("gpuInstanceType", v["gpuInstanceType"])
    efa_types = [t for t in known_instance_types() if instance_spec(t).efa_supported and instance_spec(t).gpus]
    if gpu.gpus == 0:
        raise ConfigError(f"gpuInstanceType {gpu.instance_type!r} has no GPU: use one of {efa_types}")
    if not gpu.efa_supported:
        raise ConfigError(f"gpuInstanceType {gpu.instance_type!r} does not support EFA: use one of {efa_types}")
    if v["gpuEfaInterfaces"] != gpu.max_efa_interfaces:
        raise ConfigError(
            f"gpuEfaInterfaces is {v['gpuEfaInterfaces']} but gpuInstanceType {gpu.instance_type!r} has "
            f"{gpu.max_efa_interfaces} EFA interface(s) ({gpu.network_cards} network card(s)): "
            f"set gpuEfaInterfaces to {gpu.max_efa_interfaces}"
        )
    if v["gpuNodeCount"] < 1:
        raise ConfigError(f"gpuNodeCount {v['gpuNodeCount']} gives no GPU node: set it to 2 (or 1 for a smoke test)")
    if v["gpuNodeCount"] == 1:
        notes.append(
            "gpuNodeCount is 1: NCCL keeps all traffic inside the node, so no inter-node traffic will exist to prove "
            "EFA; set gpuNodeCount to 2 or more to test EFA"
        )
    reservation = v["gpuCapacityReservationId"] or None
    if reservation is not None and not _CAPACITY_RESERVATION.fullmatch(reservation):
        raise ConfigError(
            f"gpuCapacityReservationId {reservation!r} is not a capacity reservation id: use cr-xxxxxxxxxxxxxxxxx or ''"
        )
    if v["gpuRootVolumeGib"] < 50:
        raise ConfigError(f"gpuRootVolumeGib {v['gpuRootVolumeGib']} cannot hold the training image: set 100 or more")

    # --- charts: exact versions only
    for key in ("nvidiaDevicePluginChartVersion", "efaDevicePluginChartVersion", "kuberayOperatorChartVersion"):
        if not _EXACT_SEMVER.fullmatch(v[key]):
            raise ConfigError(
                f"{key} {v[key]!r} is not an exact chart version: pin one such as 1.5.2 (no ranges, no latest)"
            )

    # --- Ray
    for key in ("rayNamespace", "rayClusterName", "rayWorkerGroupName"):
        if not _DNS_LABEL.fullmatch(v[key]) or len(v[key]) > 50:
            raise ConfigError(
                f"{key} {v[key]!r} is not a DNS-1123 label of at most 50 characters: use lowercase letters, digits and '-'"
            )
    if is_floating_image(v["rayImage"]):
        raise ConfigError(
            f"rayImage {v['rayImage']!r} has a floating or missing tag: pin a version tag or a digest, e.g. "
            f"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
        )
    if not _EXACT_SEMVER.fullmatch(v["rayVersion"]) or v["rayVersion"].startswith("v"):
        raise ConfigError(f"rayVersion {v['rayVersion']!r} is not an exact Ray version: set e.g. 2.58.0")

    if v["rayWorkerGpus"] != gpu.gpus:
        raise ConfigError(
            f"gpuInstanceType {gpu.instance_type!r} has {gpu.gpus} GPUs but rayWorkerGpus is {v['rayWorkerGpus']}: "
            f"set rayWorkerGpus to {gpu.gpus} (one worker pod per node, Ray num-gpus = the pod's GPU limit)"
        )
    if v["rayWorkerEfa"] != v["gpuEfaInterfaces"]:
        raise ConfigError(
            f"rayWorkerEfa is {v['rayWorkerEfa']} but each node has {v['gpuEfaInterfaces']} EFA interface(s): "
            f"set rayWorkerEfa to {v['gpuEfaInterfaces']}"
        )
    _check_fits("rayWorker", v["rayWorkerCpu"], v["rayWorkerMemory"], gpu, "gpuInstanceType")
    _check_fits("rayHead", v["rayHeadCpu"], v["rayHeadMemory"], system, "systemInstanceType")
    shm = _memory_gib("rayWorkerShmSize", v["rayWorkerShmSize"])
    worker_memory = _memory_gib("rayWorkerMemory", v["rayWorkerMemory"])
    if not 1 <= shm <= worker_memory / 2:
        raise ConfigError(
            f"rayWorkerShmSize {v['rayWorkerShmSize']!r} must be between 1Gi and half of rayWorkerMemory "
            f"({v['rayWorkerMemory']}): /dev/shm is memory-backed and counts against the pod's limit"
        )

    # --- training
    if v["trainPreset"] not in TRAIN_PRESETS:
        raise ConfigError(f"trainPreset {v['trainPreset']!r} unknown: use one of {list(TRAIN_PRESETS)}")
    for key in ("trainSteps", "trainBatchSize", "trainSeqLen", "trainNumWorkers", "trainGpusPerWorker"):
        if v[key] < 1:
            raise ConfigError(f"{key} is {v[key]}: set it to 1 or more")
    total_gpus = v["gpuNodeCount"] * gpu.gpus
    wanted = v["trainNumWorkers"] * v["trainGpusPerWorker"]
    if v["trainGpusPerWorker"] > gpu.gpus:
        raise ConfigError(
            f"trainGpusPerWorker {v['trainGpusPerWorker']} exceeds the {gpu.gpus} GPUs of one {gpu.instance_type}: "
            f"set it to at most {gpu.gpus}"
        )
    if wanted > total_gpus:
        raise ConfigError(
            f"trainNumWorkers {v['trainNumWorkers']} x trainGpusPerWorker {v['trainGpusPerWorker']} = {wanted} GPUs "
            f"but the cluster has {total_gpus}: set trainNumWorkers to at most {total_gpus // v['trainGpusPerWorker']}"
        )
    if v["gpuNodeCount"] > 1 and wanted <= gpu.gpus:
        notes.append(
            f"the training job uses {wanted} GPU(s), which fit on one node: Ray may place every worker on one node and "
            f"no traffic would cross EFA; set trainNumWorkers to {total_gpus // v['trainGpusPerWorker']}"
        )

    storage = _storage(v, stack)

    cfg = StackConfig(
        stack=stack,
        region=region,
        network=NetworkConfig(vpc_cidr=str(vpc), azs=tuple(azs)),
        cluster=ClusterConfig(
            name=v["clusterName"],
            kubernetes_version=v["kubernetesVersion"],
            endpoint_public_access=v["apiPublicAccess"],
            public_access_cidrs=tuple(public_cidrs),
            log_types=tuple(v["controlPlaneLogTypes"]),
        ),
        system_nodes=SystemNodesConfig(instance_type=system.instance_type, count=v["systemNodeCount"]),
        gpu_nodes=GpuNodesConfig(
            instance_type=gpu.instance_type,
            node_count=v["gpuNodeCount"],
            availability_zone=gpu_az,
            efa_interfaces=v["gpuEfaInterfaces"],
            gpus_per_node=gpu.gpus,
            capacity_reservation_id=reservation,
            root_volume_gib=v["gpuRootVolumeGib"],
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
            ),
        ),
        training=TrainingConfig(
            preset=v["trainPreset"],
            steps=v["trainSteps"],
            batch_size=v["trainBatchSize"],
            seq_len=v["trainSeqLen"],
            num_workers=v["trainNumWorkers"],
            gpus_per_worker=v["trainGpusPerWorker"],
            activation_checkpointing=v["trainActivationCheckpointing"],
        ),
        storage=storage,
        warnings=tuple(notes),
    )
    for note in notes:
        warnings.warn(note, ConfigWarning, stacklevel=2)
    return cfg


def _storage(v: Mapping[str, Any], stack: str) -> StorageConfig:
    name = v["storageBucketName"]
    if name and (not _BUCKET_NAME.fullmatch(name) or "--" in name):
        raise ConfigError(
            f"storageBucketName {name!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits and '-' "
            "(no dots), or '' to let Pulumi name it"
        )
    prefix = f"{v['clusterName']}-{stack}-"
    if not name and len(prefix) > BUCKET_PREFIX_MAX:
        raise ConfigError(
            f"the bucket name prefix {prefix!r} (clusterName-stack-) is longer than {BUCKET_PREFIX_MAX} characters: "
            f"set {PROJECT}:storageBucketName to a bucket name"
        )
    if v["storageRetentionDays"] < 0:
        raise ConfigError(
            f"storageRetentionDays is {v['storageRetentionDays']}: set 0 (keep forever) or a number of days"
        )
    return StorageConfig(
        bucket_name=name,
        bucket_prefix=prefix,
        object_prefix=stack,
        retention_days=v["storageRetentionDays"],
        force_destroy=v["storageForceDestroy"],
    )


def require_gpu_az(cfg: StackConfig) -> str:
    """The GPU nodes' AZ; ConfigError (naming the two ways to set it) when the stack left it empty."""
    az = cfg.gpu_nodes.availability_zone
    if not az:
        raise ConfigError(
            f"gpuAvailabilityZone is empty for stack {cfg.stack!r}: run `python -m automation preflight --stack {cfg.stack}` "
            f"to see which of availabilityZones {list(cfg.network.azs)} offer {cfg.gpu_nodes.instance_type} "
            f"(`python -m automation run --stack {cfg.stack}` chooses one and sets it in the stack), "
            f"or set {PROJECT}:gpuAvailabilityZone in Pulumi.{cfg.stack}.yaml"
        )
    return az


def _known_instance(key: str, instance_type: str):
    try:
        return instance_spec(instance_type)
    except KeyError:
        raise ConfigError(
            f"{key} {instance_type!r} is not in infra/data/instance_types.json: use one of "
            f"{list(known_instance_types())} or add its facts there"
        ) from None


def _check_fits(prefix: str, cpu: str, memory: str, spec, instance_key: str) -> None:
    cores = _cpu_cores(f"{prefix}Cpu", cpu)
    gib = _memory_gib(f"{prefix}Memory", memory)
    cpu_room = round(spec.allocatable_cpu - NODE_CPU_HEADROOM, 2)
    mem_room = round(spec.allocatable_memory_gib - NODE_MEMORY_HEADROOM_GIB, 1)
    if cores <= 0 or cores > cpu_room:
        raise ConfigError(
            f"{prefix}Cpu {cpu!r} does not fit {instance_key} {spec.instance_type!r} (allocatable {spec.allocatable_cpu} "
            f"CPU, {NODE_CPU_HEADROOM} kept for DaemonSets): set {prefix}Cpu to at most {int(cpu_room)}"
        )
    if gib <= 0 or gib > mem_room:
        raise ConfigError(
            f"{prefix}Memory {memory!r} does not fit {instance_key} {spec.instance_type!r} (allocatable "
            f"{spec.allocatable_memory_gib} GiB, {NODE_MEMORY_HEADROOM_GIB} GiB kept for DaemonSets): "
            f"set {prefix}Memory to at most {int(mem_room)}Gi"
        )
