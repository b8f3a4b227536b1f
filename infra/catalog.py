"""Facts about EC2 instance types, read from ``infra/data/instance_types.json``.

The JSON file notes where each fact comes from. Allocatable CPU and memory are derived here
from those facts with the formulas the EKS AMIs use for kube-reserved resources, so that
config validation can tell a user, before anything is created, that a pod will not fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_FILE = Path(__file__).parent / "data" / "instance_types.json"

# Share of the nominal memory the kubelet sees as capacity after the kernel, firmware and
# hypervisor take theirs; 0.92 is deliberately a little pessimistic so a worker that fits on
# paper also fits on the node.
_KUBELET_VISIBLE_MEMORY = 0.92
_KUBE_RESERVED_MIB_PER_POD = 11
_KUBE_RESERVED_MIB_BASE = 255
_EVICTION_HARD_MIB = 100


@dataclass(frozen=True)
class InstanceSpec:
    """What an instance type offers; see DATA_FILE for the sources."""

    instance_type: str
    gpus: int
    gpu_model: str | None
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    efa_supported: bool
    max_efa_interfaces: int
    network_cards: int
    max_pods: int

    @property
    def allocatable_cpu(self) -> float:
        """CPU cores left to pods after EKS's kube-reserved CPU (cores, 3 decimals)."""
        return round(self.vcpus - kube_reserved_cpu_millicores(self.vcpus) / 1000, 3)

    @property
    def allocatable_memory_gib(self) -> float:
        """Memory left to pods after kube-reserved memory and the eviction threshold (GiB)."""
        reserved_mib = _KUBE_RESERVED_MIB_PER_POD * self.max_pods + _KUBE_RESERVED_MIB_BASE + _EVICTION_HARD_MIB
        return round(self.memory_gib * _KUBELET_VISIBLE_MEMORY - reserved_mib / 1024, 2)


def kube_reserved_cpu_millicores(vcpus: int) -> float:
    """EKS AMI kube-reserved CPU: 6% of core 1, 1% of core 2, 0.5% of cores 3-4, 0.25% above."""
    reserved = 0.0
    for core in range(1, vcpus + 1):
        if core == 1:
            reserved += 60
        elif core == 2:
            reserved += 10
        elif core <= 4:
            reserved += 5
        else:
            reserved += 2.5
    return reserved


@cache
def _catalog() -> dict[str, InstanceSpec]:
    raw = json.loads(DATA_FILE.read_text())["instance_types"]
    return {name: InstanceSpec(instance_type=name, **facts) for name, facts in raw.items()}


def known_instance_types() -> tuple[str, ...]:
    """The instance types the catalog has facts for, sorted."""
    return tuple(sorted(_catalog()))


def instance_spec(instance_type: str) -> InstanceSpec:
    """The facts of ``instance_type``; KeyError naming the known types if it is not in the catalog."""
    try:
        return _catalog()[instance_type]
    except KeyError:
        raise KeyError(
            f"instance type {instance_type!r} is not in {DATA_FILE.name}; known: {', '.join(known_instance_types())}"
        ) from None
