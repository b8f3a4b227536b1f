"""Rules that need more than one stack key, each a small named function over the coerced values.

A rule raises ConfigError naming the key, the value and the fix; a note returns the text of a
ConfigWarning (a legal but doubtful setting) or None. ``RULES`` runs in order, so that a setting
is blamed before what depends on it (the AZs before the GPU AZ, the instance before the pods).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

from infra.catalog import instance_spec
from infra.config_keys import ConfigError, cpu_cores, memory_gib
from infra.eks_facts import (
    CAPACITY_BLOCK_UPDATE_NOTE,
    EFA_HUGEPAGES,
    EFA_HUGEPAGES_GIB,
    capacity_block_eligible,
    capacity_block_refusal,
    extended_support_note,
)

# Room left on a node for the DaemonSets (aws-node, kube-proxy, the device plugins) and
# system pods, so a pod sized to "allocatable" does not stay Pending.
NODE_CPU_HEADROOM = 0.5
NODE_MEMORY_HEADROOM_GIB = 1.0

Values = Mapping[str, Any]


def azs_in_region(v: Values, region: str) -> None:
    for az in v["availabilityZones"]:
        if not re.fullmatch(re.escape(region) + r"[a-z]", az):
            raise ConfigError(
                f"availabilityZones entry {az!r} is not an AZ of aws:region {region!r}: use AZs such as {region}a"
            )


def gpu_az_in_network(v: Values, region: str) -> None:
    # Empty is legal here: preflight chooses an AZ that offers the type and the driver sets it in
    # the stack; the Pulumi program (require_gpu_az) refuses to build without one.
    az, azs = v["gpuAvailabilityZone"], list(v["availabilityZones"])
    if az and az not in azs:
        raise ConfigError(
            f"gpuAvailabilityZone {az!r} is not one of the network's private-subnet AZs {azs}: "
            "set gpuAvailabilityZone to one of them or add it to availabilityZones"
        )


def public_endpoint_has_cidrs(v: Values, region: str) -> None:
    if v["apiPublicAccess"] and not v["apiPublicAccessCidrs"]:
        raise ConfigError(
            "apiPublicAccessCidrs [] leaves the public endpoint reachable by nobody: list your address as x.x.x.x/32 "
            "or set apiPublicAccess to false"
        )


def efa_interfaces_match_instance(v: Values, region: str) -> None:
    gpu = instance_spec(v["gpuInstanceType"])
    if v["gpuEfaInterfaces"] != gpu.max_efa_interfaces:
        raise ConfigError(
            f"gpuEfaInterfaces is {v['gpuEfaInterfaces']} but gpuInstanceType {gpu.instance_type!r} has "
            f"{gpu.max_efa_interfaces} EFA interface(s) ({gpu.network_cards} network card(s)): "
            f"set gpuEfaInterfaces to {gpu.max_efa_interfaces}"
        )


def worker_gpus_match_instance(v: Values, region: str) -> None:
    gpu = instance_spec(v["gpuInstanceType"])
    if v["rayWorkerGpus"] != gpu.gpus:
        raise ConfigError(
            f"gpuInstanceType {gpu.instance_type!r} has {gpu.gpus} GPUs but rayWorkerGpus is {v['rayWorkerGpus']}: "
            f"set rayWorkerGpus to {gpu.gpus} (one worker pod per node, Ray num-gpus = the pod's GPU limit)"
        )


def worker_efa_matches_nodes(v: Values, region: str) -> None:
    if v["rayWorkerEfa"] != v["gpuEfaInterfaces"]:
        raise ConfigError(
            f"rayWorkerEfa is {v['rayWorkerEfa']} but each node has {v['gpuEfaInterfaces']} EFA interface(s): "
            f"set rayWorkerEfa to {v['gpuEfaInterfaces']}"
        )


def worker_fits_gpu_node(v: Values, region: str) -> None:
    # EFA nodes pre-allocate a huge-page pool that allocatable memory loses (infra/eks_facts.py).
    _check_fits(
        "rayWorker", v["rayWorkerCpu"], v["rayWorkerMemory"], v["gpuInstanceType"], "gpuInstanceType", EFA_HUGEPAGES_GIB
    )


def head_fits_system_node(v: Values, region: str) -> None:
    _check_fits("rayHead", v["rayHeadCpu"], v["rayHeadMemory"], v["systemInstanceType"], "systemInstanceType")


def shm_within_worker_memory(v: Values, region: str) -> None:
    shm = memory_gib("rayWorkerShmSize", v["rayWorkerShmSize"])
    if not 1 <= shm <= memory_gib("rayWorkerMemory", v["rayWorkerMemory"]) / 2:
        raise ConfigError(
            f"rayWorkerShmSize {v['rayWorkerShmSize']!r} must be between 1Gi and half of rayWorkerMemory "
            f"({v['rayWorkerMemory']}): /dev/shm is memory-backed and counts against the pod's limit"
        )


def _check_fits(
    prefix: str, cpu: str, memory: str, instance_type: str, instance_key: str, hugepages_gib: float = 0.0
) -> None:
    spec = instance_spec(instance_type)
    cpu_room = round(spec.allocatable_cpu - NODE_CPU_HEADROOM, 2)
    mem_room = round(spec.allocatable_memory_gib - NODE_MEMORY_HEADROOM_GIB - hugepages_gib, 1)
    if cpu_cores(f"{prefix}Cpu", cpu) > cpu_room:
        raise ConfigError(
            f"{prefix}Cpu {cpu!r} does not fit {instance_key} {instance_type!r} (allocatable {spec.allocatable_cpu} "
            f"CPU, {NODE_CPU_HEADROOM} kept for DaemonSets): set {prefix}Cpu to at most {int(cpu_room)}"
        )
    if memory_gib(f"{prefix}Memory", memory) > mem_room:
        raise ConfigError(
            f"{prefix}Memory {memory!r} does not fit {instance_key} {instance_type!r} (allocatable "
            f"{spec.allocatable_memory_gib} GiB, {NODE_MEMORY_HEADROOM_GIB} GiB kept for DaemonSets"
            + (f", {EFA_HUGEPAGES} of EFA huge pages" if hugepages_gib else "")
            + f"): set {prefix}Memory to at most {int(mem_room)}Gi"
        )


def capacity_block_has_reservation(v: Values, region: str) -> None:
    if v["gpuCapacityBlock"] and not v["gpuCapacityReservationId"]:
        raise ConfigError(
            "gpuCapacityBlock is true but gpuCapacityReservationId is empty: set gpuCapacityReservationId to the "
            "Capacity Block's cr-... id, or set gpuCapacityBlock to false"
        )


def capacity_block_type_eligible(v: Values, region: str) -> None:
    if v["gpuCapacityBlock"] and not capacity_block_eligible(v["gpuInstanceType"]):
        raise ConfigError(capacity_block_refusal(v["gpuInstanceType"]))


def idle_nodes_within_count(v: Values, region: str) -> None:
    if v["gpuIdleNodes"] > v["gpuNodeCount"]:
        raise ConfigError(
            f"gpuIdleNodes {v['gpuIdleNodes']} is more than gpuNodeCount {v['gpuNodeCount']}: the node group holds "
            f"at most gpuNodeCount nodes; set gpuIdleNodes within 0..{v['gpuNodeCount']}"
        )


def capacity_block_update_note(v: Values, region: str) -> str | None:
    return CAPACITY_BLOCK_UPDATE_NOTE if v["gpuCapacityBlock"] else None


def kube_proxy_minor_note(v: Values, region: str) -> str | None:
    # kube-proxy follows the cluster's minor version (the EKS guide's managing-kube-proxy table pairs each
    # Kubernetes version with its own kube-proxy), so a kubernetesVersion changed alone leaves an old pin.
    proxy_minor = ".".join(v["kubeProxyVersion"].lstrip("v").split(".")[:2])
    if proxy_minor != v["kubernetesVersion"]:
        return (
            f"kubeProxyVersion {v['kubeProxyVersion']!r} is for Kubernetes {proxy_minor} but kubernetesVersion is "
            f"{v['kubernetesVersion']!r}: set kubeProxyVersion to a v{v['kubernetesVersion']}.x version "
            f"(aws eks describe-addon-versions --addon-name kube-proxy --kubernetes-version {v['kubernetesVersion']})"
        )
    return None


def extended_support(v: Values, region: str) -> str | None:
    return extended_support_note(v["kubernetesVersion"], date.today())


def single_gpu_node_note(v: Values, region: str) -> str | None:
    if v["gpuNodeCount"] == 1:
        return (
            "gpuNodeCount is 1: NCCL keeps all traffic inside the node, so no inter-node traffic will exist to prove "
            "EFA; set gpuNodeCount to 2 or more to test EFA"
        )
    return None


def open_endpoint_note(v: Values, region: str) -> str | None:
    if v["apiPublicAccess"] and "0.0.0.0/0" in v["apiPublicAccessCidrs"]:
        return (
            "apiPublicAccessCidrs includes 0.0.0.0/0: the Kubernetes API endpoint is reachable from anywhere "
            "(IAM authentication still applies); set it to your address as x.x.x.x/32"
        )
    return None


RULES: tuple[Callable[[Values, str], None], ...] = (
    azs_in_region,
    gpu_az_in_network,
    public_endpoint_has_cidrs,
    efa_interfaces_match_instance,
    worker_gpus_match_instance,
    worker_efa_matches_nodes,
    worker_fits_gpu_node,
    head_fits_system_node,
    shm_within_worker_memory,
    capacity_block_has_reservation,
    capacity_block_type_eligible,
    idle_nodes_within_count,
)
NOTES: tuple[Callable[[Values, str], str | None], ...] = (
    single_gpu_node_note,
    open_endpoint_note,
    extended_support,
    capacity_block_update_note,
    kube_proxy_minor_note,
)
