"""Facts from AWS's EKS documentation that both config validation and the manifests rely on.

No Pulumi and no config here, so ``infra.config`` (validation) and ``infra.manifests`` (the pod
specs) read the same numbers without importing each other.
"""

from __future__ import annotations

from datetime import date

# Instance families that Capacity Blocks for ML exist for, from the EC2 user guide's "Supported
# instance types and Regions" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html
# and .../capacity-blocks-using.html#capacity-blocks-prerequisites, read 2026-12-05): P4d, P5, P5e,
# P5en, P6-B200, P6e-GB200, Trn1, Trn2 (P6-B300 from the AWS PCS guide's Capacity Blocks page,
# https://docs.aws.amazon.com/pcs/latest/userguide/capacity-blocks.html; P4de from the SageMaker
# reserved-capacity list of the same offering). EKS takes a managed node group on a Capacity Block only for such a type
# (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). A family added later
# is refused here until it is added: preflight and config name the command that lists offerings.
CAPACITY_BLOCK_FAMILIES = frozenset(
    {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200", "trn1", "trn2"}
)
CAPACITY_BLOCKS_GUIDE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html"


def capacity_block_eligible(instance_type: str) -> bool:
    """Whether EC2 sells Capacity Blocks for ML of ``instance_type`` (its family, before the '.')."""
    return instance_type.split(".", 1)[0] in CAPACITY_BLOCK_FAMILIES


# EFA instances pre-allocate 2 MiB huge pages for libfabric's buffers, and the EKS user guide's
# EFA pods request this much in requests and limits:
# https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html (example manifest,
# "hugepages-2Mi: 5120Mi"). Kubernetes takes pre-allocated huge pages out of a node's allocatable
# memory, so the pool counts against what a worker pod's memory can use.
EFA_HUGEPAGES_RESOURCE = "hugepages-2Mi"
EFA_HUGEPAGES = "5120Mi"
# The pool the GPU nodes reserve at boot, in 2 MiB pages, by the EFA installer's own rule. Its efa-config
# package runs /opt/amazon/bin/efa-hugepages-reserve.sh at boot (efa-config.service, Before=dev-hugepages.mount),
# which reserves "110 MB" per libfabric EFA endpoint (its two packet pools), times two endpoints (Open MPI opens
# one each for mtl/ofi and btl/ofi), times the CPU count `lscpu` prints, in pages of the default huge page size,
# plus one page, and never lowers a larger pool: for 2 MiB pages, 110 x vCPUs + 1 (g6.12xlarge: 5281 pages,
# 10562 MiB). Read from efa-config 1.15 of aws-efa-installer 1.24.1 (its env.sh) as mirrored in
# github.com/vanderlei-filho/efa-installer (commit f45e1ea, DEBS/UBUNTU2204/x86_64/efa-config_1.15_all.deb;
# the official tarball is https://efa-installer.amazonaws.com/aws-efa-installer-1.24.1.tar.gz), read 2026-12-05;
# the rule may have changed in later installers (the cluster's image bundles 1.49.0), which were not read.
# The AL2023 NVIDIA AMI installs EFA with `efa_installer.sh --minimal -y` (awslabs/amazon-eks-ami
# templates/al2023/provisioners/install-efa.sh, commit 11be534). The installer's README says --minimal installs
# "only the kernel module and rdma-core", but its efa_installer.sh (1.24.1) skips only libfabric, openmpi and
# efa-profile under --minimal, and efa-config only under --skip-limit-conf: so the AMI probably reserves this pool
# itself at boot. Which one holds for the installer the AMI bundles now was not read, so the nodes apply the same
# rule in their user data: the pool is the same either way, never lowered, and never below one worker's request.
EFA_ENDPOINT_HUGEPAGES_KIB = 110 * 1024
EFA_ENDPOINTS_PER_CPU = 2
HUGEPAGE_2MI_KIB = 2048
EFA_REQUEST_PAGES = 2560  # EFA_HUGEPAGES (5120Mi) in 2 MiB pages


def efa_hugepages_pages(vcpus: int) -> int:
    """2 MiB huge pages a GPU node with ``vcpus`` CPUs reserves: efa-config's rule, at least one worker's request."""
    rule = EFA_ENDPOINT_HUGEPAGES_KIB * vcpus * EFA_ENDPOINTS_PER_CPU // HUGEPAGE_2MI_KIB + 1
    return max(rule, EFA_REQUEST_PAGES)


def efa_hugepages_gib(vcpus: int) -> float:
    """The pool of ``efa_hugepages_pages`` in GiB: what the kubelet takes out of allocatable memory."""
    return efa_hugepages_pages(vcpus) * HUGEPAGE_2MI_KIB / 1024 / 1024


# End of EKS standard and extended support per Kubernetes minor version: standard support lasts 14 months
# after EKS released it, then 12 months of extended support at an additional cost per cluster hour; "on the end
# of extended support date, you can no longer create new Amazon EKS clusters with the unsupported version", and
# "billing for extended support starts at the beginning of the day that the version reaches end of standard
# support" (UTC). Source: the EKS user guide's "Understand the Kubernetes version lifecycle on EKS", release
# calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html; its source
# awsdocs/amazon-eks-user-guide latest/ug/versioning/kubernetes-versions.adoc at 0138560, rows 1.29 to 1.34),
# read 2026-12-06. 1.35 and 1.36 are past that copy's table: 1.35 from https://endoflife.date/amazon-eks (read
# 2026-12-04: standard to 2027-03-27, extended to 2028-03-27); 1.36 from its releases list read 2026-12-05 (EKS
# release 2026-06-02, standard to 2027-08-02) with the guide's 12 months of extended support after it.
# A version missing here is newer than this table: no warning, no refusal.
STANDARD_SUPPORT_ENDS = {
    "1.30": date(2025, 7, 23),
    "1.31": date(2025, 11, 26),
    "1.32": date(2026, 3, 23),
    "1.33": date(2026, 7, 29),
    "1.34": date(2026, 12, 2),
    "1.35": date(2027, 3, 27),
    "1.36": date(2027, 8, 2),
}
EXTENDED_SUPPORT_ENDS = {
    "1.30": date(2026, 7, 23),
    "1.31": date(2026, 11, 26),
    "1.32": date(2027, 3, 23),
    "1.33": date(2027, 7, 29),
    "1.34": date(2027, 12, 2),
    "1.35": date(2028, 3, 27),
    "1.36": date(2028, 8, 2),
}


def oldest_supported(today: date) -> str | None:
    """The oldest Kubernetes version EKS still creates clusters on at ``today`` (by EXTENDED_SUPPORT_ENDS), or
    None when every version listed has left extended support."""
    alive = [v for v, ends in EXTENDED_SUPPORT_ENDS.items() if today < ends]
    return min(alive, key=lambda v: tuple(int(p) for p in v.split("."))) if alive else None
