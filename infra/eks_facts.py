"""Facts from AWS's EKS documentation that both config validation and the manifests rely on.

No Pulumi and no config here, so ``infra.config`` (validation) and ``infra.manifests`` (the pod
specs) read the same numbers without importing each other.
"""

from __future__ import annotations

from datetime import date

# EFA instances pre-allocate 2 MiB huge pages for libfabric's buffers, and the EKS user guide's
# EFA pods request this much in requests and limits:
# https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html (example manifest,
# "hugepages-2Mi: 5120Mi"). Kubernetes takes pre-allocated huge pages out of a node's allocatable
# memory, so the pool counts against what a worker pod's memory can use.
EFA_HUGEPAGES_RESOURCE = "hugepages-2Mi"
EFA_HUGEPAGES = "5120Mi"
EFA_HUGEPAGES_GIB = 5.0

# End of EKS standard support per Kubernetes minor version: 14 months after EKS released it, then
# 12 months of extended support at extra cost per cluster hour
# (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html). Dates as listed
# by https://endoflife.date/amazon-eks (which follows the EKS release calendar), read 2026-12-04.
# A version missing here is newer than this table: no warning.
STANDARD_SUPPORT_ENDS = {
    "1.30": date(2025, 7, 23),
    "1.31": date(2025, 11, 26),
    "1.32": date(2026, 3, 23),
    "1.33": date(2026, 7, 29),
    "1.34": date(2026, 12, 2),
    "1.35": date(2027, 3, 27),
}


def extended_support_note(version: str, today: date) -> str | None:
    """A warning when ``version`` is past its EKS standard support on ``today``, else None."""
    ends = STANDARD_SUPPORT_ENDS.get(version)
    if ends is None or today <= ends:
        return None
    return (
        f"kubernetesVersion {version!r} left EKS standard support on {ends.isoformat()}: the cluster runs in "
        f"extended support at extra cost per cluster hour; set kubernetesVersion to a version in standard support "
        f"(https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)"
    )
