"""What EC2 says about an instance type in a region: the type itself, the AZs that offer it, and the vCPUs its
On-Demand quota leaves free. Preflight (automation/steps/preflight.py) and the capacity finder
(automation/capacity_finder.py) read them the same way, from the clients they are given.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from botocore.exceptions import BotoCoreError, ClientError

from automation.aws_clients import Ec2, ServiceQuotas
from automation.pipeline import Finding

# The On-Demand vCPU quota that covers an instance family (EC2's "Running On-Demand ... instances"), by the
# letters before the generation digit. The codes and titles are Service Quotas' own (`aws service-quotas
# list-service-quotas --service-code ec2`, as published listings of it show them, read 2026-12-06); gr6 is a G
# instance, so it counts under G and VT, and trn, inf and dl each have a quota of their own.
QUOTA_BY_FAMILY = {
    **dict.fromkeys(("g", "gr", "vt"), ("L-DB2E81BA", "Running On-Demand G and VT instances")),
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
    "f": ("L-74FC7D96", "Running On-Demand F instances"),
    "x": ("L-7295265B", "Running On-Demand X instances"),
    "hpc": ("L-F7808C92", "Running On-Demand HPC instances"),
}
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def family(instance_type: str) -> str:
    """The letters before the generation digit: 'g' for g6.12xlarge, 'vt' for vt1.3xlarge, 'p' for p5.48xlarge."""
    return re.split(r"[\d.]", instance_type, maxsplit=1)[0]


def quota_for(instance_type: str) -> tuple[str, str]:
    return QUOTA_BY_FAMILY.get(family(instance_type), STANDARD_QUOTA)


# The Spot vCPU quota of a family ("All ... Spot Instance Requests", Service Quotas for EC2; the codes as the EC2
# user guide's "Spot Instance quotas" and `aws service-quotas list-service-quotas --service-code ec2` name them,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html). A new account's is often 0.
SPOT_QUOTA_BY_FAMILY = {
    **dict.fromkeys(("g", "gr", "vt"), ("L-3819A6DF", "All G and VT Spot Instance Requests")),
    "p": ("L-7212CCBC", "All P Spot Instance Requests"),
    "trn": ("L-6B0D517C", "All Trn Spot Instance Requests"),
    "inf": ("L-B5D1601B", "All Inf Spot Instance Requests"),
}


def spot_quota_for(instance_type: str) -> tuple[str, str] | None:
    """The Spot vCPU quota covering the type's family, or None for a family not listed here."""
    return SPOT_QUOTA_BY_FAMILY.get(family(instance_type))


def spot_quota_vcpus(quotas: ServiceQuotas, instance_type: str) -> float | None:
    """The account's Spot vCPU quota for the type's family in the client's region (None: no quota known here)."""
    if (found := spot_quota_for(instance_type)) is None:
        return None
    return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=found[0])["Quota"]["Value"])


def error_code(e: Exception) -> str:
    if isinstance(e, ClientError):
        return e.response.get("Error", {}).get("Code", "ClientError")
    return type(e).__name__


def aws_error(e: Exception) -> str:
    return f"{error_code(e)}: {e.response.get('Error', {}).get('Message') if isinstance(e, ClientError) else e}"


def describe_type(ec2: Ec2, instance_type: str) -> dict | None:
    try:
        found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except ClientError as e:
        if e.response["Error"]["Code"].startswith("InvalidInstanceType"):
            return None
        raise
    return found[0] if found else None


def offered_azs(ec2: Ec2, instance_type: str) -> set[str]:
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )
    return {o["Location"] for page in pages for o in page["InstanceTypeOfferings"]}


def running_vcpus(ec2: Ec2, families: set[str]) -> int:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    running = (i["InstanceType"] for page in pages for res in page["Reservations"] for i in res["Instances"])
    counts = Counter(t for t in running if family(t) in families)
    if not counts:
        return 0
    types = ec2.describe_instance_types(InstanceTypes=sorted(counts))["InstanceTypes"]
    vcpus = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in types}
    return sum(vcpus[t] * n for t, n in counts.items())


def check_quota(
    quotas: ServiceQuotas, ec2: Ec2, instance_type: str, vcpus_per_node: int, node_count: int, region: str
) -> tuple[Finding, int, float | None]:
    """The family's On-Demand vCPU quota minus what already runs covers the node group."""
    code, title = quota_for(instance_type)
    check, need = f"vCPU quota {code}", vcpus_per_node * node_count
    try:
        value = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except (ClientError, BotoCoreError) as e:
        show = f"aws service-quotas get-service-quota --service-code ec2 --quota-code {code} --region {region}"
        return Finding(check, "fail", f"cannot read '{title}': {aws_error(e)}", show), need, None
    fams = {f for f, (c, _) in QUOTA_BY_FAMILY.items() if c == code} or {family(instance_type)}
    used = running_vcpus(ec2, fams)
    free = value - used
    detail = f"'{title}' is {value:g} vCPUs, {used} in use, {free:g} free; {node_count} x {instance_type} need {need}"
    fix = (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
        f"--desired-value {math.ceil(used + need)} --region {region}"
    )
    return Finding.judged(check, free >= need, detail, fix), need, free
