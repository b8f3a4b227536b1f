"""preflight: what AWS must offer before anything is created, one row per fact, each failure with its fix. Read-only
calls (STS, EC2 describe, Service Quotas get) and a look on PATH for the AWS CLI: it runs before any change, for free.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from automation.aws_clients import Ec2, Eks, ServiceQuotas, Sts
from automation.ec2 import aws_error, check_quota, describe_type, offered_azs, quota_for
from automation.errors import DriverError
from automation.job import one_node_note, stack_label
from automation.pipeline import Finding, PreflightFacts, Prior, StepResult, verdict
from automation.ray_head import WORKLOADS_DIR
from automation.steps.place import by_place
from automation.targets.aws import API_CIDRS_KEY, GPU_AZ_KEY, AwsTarget
from automation.targets.local import LocalTarget
from infra.config import (
    PROJECT,
    ClusterConfig,
    GpuNodesConfig,
    NetworkConfig,
    StackConfig,
    SystemNodesConfig,
)
from infra.names import NODE_MONITORING_AGENT
from workloads.config import TrainConfig, TrainConfigError
from workloads.uri import parse_location

# EC2's ReservationType of a Capacity Block for ML (DescribeCapacityReservations); "default" is an
# On-Demand Capacity Reservation
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html).
CAPACITY_BLOCK = "capacity-block"
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
_GPU = GpuNodesConfig.keyname  # the stack keys a fix names, from the schema


@dataclass(frozen=True)
class AwsClients:
    sts: Sts
    ec2: Ec2
    quotas: ServiceQuotas
    eks: Eks | None = None  # None: the add-on version row is skipped


def aws_cli_version(path: str) -> str:
    """What `aws --version` prints (v1 prints to stderr, v2 to stdout: `aws-cli/2.22.0 Python/...`), or ""."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout + done.stderr).strip()


def check_aws_cli(
    which: Callable[[str], str | None] = shutil.which, version: Callable[[str], str] | None = None
) -> Finding:
    """The `aws` command is on PATH and is v2 (the README's): pulumi-eks's kubeconfig runs `aws eks get-token` for
    every Kubernetes call, so without it `up` bills for the cluster and GPU nodes, then fails at the first Helm release.
    """
    path, install = which("aws"), f"install AWS CLI v2 ({AWS_CLI_INSTALL})"
    if path is None:
        detail = (
            "`aws` is not on PATH; the cluster's kubeconfig runs `aws eks get-token`, so `up` would fail after the "
            "cluster and GPU nodes exist"
        )
        return Finding("AWS CLI", "fail", detail, f"{install}, then check with: aws --version")
    said = (version or aws_cli_version)(path)
    major = re.match(r"aws-cli/(\d+)\.", said)
    if major and int(major.group(1)) < 2:
        detail = f"{path} is AWS CLI v{major.group(1)} ({said.split()[0]}); this project needs v2"
        return Finding("AWS CLI", "fail", detail, f"{install} ahead of v1 on PATH, then check with: aws --version")
    shown = said.split()[0] if said else "version unknown"
    return Finding("AWS CLI", "pass", f"{path}, {shown} (the kubeconfig runs `aws eks get-token`)")


def check_credentials(sts: Sts) -> tuple[Finding, str | None]:
    try:
        ident = sts.get_caller_identity()
    except NoCredentialsError:
        fix = "aws configure  (or export AWS_PROFILE=<profile>); `python -m automation run` runs locally without AWS"
        return Finding("credentials", "fail", "no AWS credentials found", fix), None
    except (ClientError, BotoCoreError) as e:
        fix = "aws sts get-caller-identity; refresh the credentials (aws sso login)"
        return Finding("credentials", "fail", aws_error(e), fix), None
    return Finding("credentials", "pass", f"account {ident['Account']} as {ident['Arn']}"), ident["Account"]


def check_instance_type(
    info: dict | None, instance_type: str, region: str, efa_wanted: int, gpus_wanted: int, stack: str
) -> list[Finding]:
    """The type exists here, supports EFA with enough interfaces, and has the GPUs the config counts on."""
    list_cmd = (
        f"aws ec2 describe-instance-types --region {region} --filters Name=network-info.efa-supported,Values=true "
        "--query 'InstanceTypes[].InstanceType'"
    )
    if info is None:
        fix = f"set {_GPU('instance_type', prefixed=True)} in Pulumi.{stack}.yaml to one of: {list_cmd}"
        return [Finding("instance type", "fail", f"{instance_type} does not exist in {region}", fix)]
    net = info.get("NetworkInfo", {})
    gpus = sum(int(g.get("Count", 0)) for g in info.get("GpuInfo", {}).get("Gpus", []))
    rows = [Finding("instance type", "pass", f"{instance_type}: {info['VCpuInfo']['DefaultVCpus']} vCPUs, {gpus} GPUs")]
    if not net.get("EfaSupported"):
        fix = f"choose an EFA type: {list_cmd}"
        return [*rows, Finding("EFA support", "fail", f"{instance_type} does not support EFA", fix)]
    max_efa = int(net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0))
    efa = f"{instance_type} supports EFA with up to {max_efa} interfaces; the stack asks for {efa_wanted}"
    efa_fix = f"set '{_GPU('efa_interfaces', prefixed=True)}: {max_efa}' in Pulumi.{stack}.yaml"
    gpu = f"{instance_type} has {gpus} GPUs; the stack counts on {gpus_wanted}"
    gpu_fix = (
        f"infra/data/instance_types.json says {gpus_wanted} GPUs for {instance_type}, EC2 says {gpus}: "
        "correct the catalog"
    )
    return [
        *rows,
        Finding.judged("EFA support", max_efa >= efa_wanted, efa, efa_fix),
        Finding.judged("GPUs per node", gpus == gpus_wanted, gpu, gpu_fix),
    ]


def check_az(
    offered: Iterable[str], stack_azs: Iterable[str], configured: str, instance_type: str, stack: str
) -> tuple[Finding, str | None, tuple[str, ...]]:
    """Pick or confirm the GPU AZ among those that offer the type and have a private subnet of the stack."""
    check, valid = "GPU availability zone", tuple(sorted(set(offered) & set(stack_azs)))
    listed = ", ".join(valid)
    if valid and configured in ("", *valid):
        detail = f"{configured} offers {instance_type}" if configured else f"chose {valid[0]}"
        return Finding(check, "pass", f"{detail} (valid: {listed})"), configured or valid[0], valid
    if valid:
        detail = (
            f"{configured} does not offer {instance_type} or has no private subnet of the stack; valid AZs: {listed}"
        )
        fix = f"set '{_GPU('availability_zone', prefixed=True)}: {valid[0]}' in Pulumi.{stack}.yaml (valid: {listed})"
    else:
        detail = (
            f"{instance_type} is offered in {sorted(offered) or 'no AZ'} but the stack's private subnets are in "
            f"{sorted(stack_azs)}"
        )
        fix = (
            f"add an AZ that offers it to {NetworkConfig.keyname('azs', prefixed=True)} in Pulumi.{stack}.yaml "
            "(aws ec2 describe-instance-type-offerings --location-type availability-zone "
            f"--filters Name=instance-type,Values={instance_type})"
        )
    return Finding(check, "fail", detail, fix), None, valid


NOT_YET_STATES = frozenset({"scheduled", "payment-pending", "pending", "assessing", "delayed"})
ENDED_STATES = frozenset(
    {"expired", "cancelled", "cancelling", "failed", "payment-failed", "unavailable", "unsupported"}
)
PLANNED_QUANTITY_TAG = "aws:ec2capacityreservation:incrementalRequestedQuantity"


def _when(value: object, fmt: str = "%Y-%m-%d %H:%M UTC", unknown: str = "an unknown time") -> str:
    """An AWS date as UTC text (boto3 parses them into aware datetimes), or ``unknown``."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime(fmt)
    return str(value) if value else unknown


_NOT_YET_WHY = {
    "payment-pending": "its upfront payment is not processed yet (EC2 releases the block if it fails within 12 hours)",
    "pending": "EC2 is still provisioning it",
    "assessing": "EC2 is still assessing the request",
    "delayed": "EC2 reports a delay in provisioning it",
}


def _replacement_fix(cr: dict, stack: str) -> str:
    itype, az = cr.get("InstanceType"), cr.get("AvailabilityZone")
    if cr.get("ReservationType") == CAPACITY_BLOCK:
        new = f"buy a new Capacity Block (aws ec2 describe-capacity-block-offerings --instance-type {itype} ...)"
        off = f"set it to '' and {_GPU('capacity_block')} to false"
    else:
        new = (
            f"create a new reservation (aws ec2 create-capacity-reservation --instance-type {itype} "
            f"--instance-platform Linux/UNIX --availability-zone {az} --instance-count N)"
        )
        off = "set it to ''"
    key = f"{_GPU('capacity_reservation_id', prefixed=True)} in Pulumi.{stack}.yaml"
    return f"{new} and set {key} to its id, or {off} for On-Demand capacity"


def _state_problem(cr: dict, stack: str) -> tuple[str, str]:
    """(problem, fix) when the reservation is not active, by its state; ("", "") when it is active."""
    state = cr.get("State")
    if state == "active":
        return "", ""
    start = _when(cr.get("StartDate"))
    if state in NOT_YET_STATES:
        why = _NOT_YET_WHY.get(state, f"{_reservation_kind(cr)} starts at {start}, ends at {_when(cr.get('EndDate'))}")
        return (
            f"state is {state}, not active yet: {why}; until it is active no GPU node can launch into it",
            f"run again once it is active (after {start}): `python -m automation run --stack {stack}` "
            "(an `up` now would leave the GPU node group waiting for instances that cannot launch)",
        )
    if state in ENDED_STATES:
        ended = f"it ended at {_when(cr['EndDate'])}" if state == "expired" and cr.get("EndDate") else "it has ended"
        return (
            f"state is {state}: {ended}; its capacity is released, so no GPU node can launch into it",
            _replacement_fix(cr, stack),
        )
    return f"state is {state}, not active", ""


def _problems(cr: dict, g: GpuNodesConfig, az: str | None) -> list[str]:
    """What keeps the reservation from holding the node group, one line each."""
    problems: list[str] = []
    if cr.get("InstanceType") != g.instance_type:
        problems.append(f"it reserves {cr.get('InstanceType')}, not {g.instance_type}")
    if az and cr.get("AvailabilityZone") != az:
        problems.append(f"it is in {cr.get('AvailabilityZone')}, not the GPU AZ {az}")
    if cr.get("State") in NOT_YET_STATES:  # not started: the instances it will hold are in its tag
        planned = {t.get("Key"): str(t.get("Value", "")) for t in cr.get("Tags") or []}.get(PLANNED_QUANTITY_TAG, "")
        if planned.isdigit() and int(planned) < g.node_count:
            problems.append(f"it will hold {planned} instances, {g.node_count} needed")
    elif (available := int(cr.get("AvailableInstanceCount", 0))) < g.node_count:
        problems.append(f"{available} of {cr.get('TotalInstanceCount')} instances available, {g.node_count} needed")
    is_block = cr.get("ReservationType") == CAPACITY_BLOCK
    if is_block != g.capacity_block:
        problems.append(
            f"it is {_reservation_kind(cr)} but {_GPU('capacity_block')} is {str(g.capacity_block).lower()}: "
            f"set {_GPU('capacity_block', prefixed=True)} to {str(is_block).lower()}"
        )
    reserved_for = (cr.get("PlacementGroupArn") or "").rsplit("/", 1)[-1] or None
    if reserved_for and reserved_for != g.placement_group_name:
        problems.append(
            f"it is reserved for placement group {reserved_for}, not "
            f"{g.placement_group_name or 'the one the stack creates'}: "
            f"set {_GPU('placement_group_name', prefixed=True)} to {reserved_for}"
        )
    return problems


def check_capacity_reservation(
    ec2: Ec2, g: GpuNodesConfig, az: str | None, region: str, stack: str = "<stack>"
) -> Finding:
    """An optional capacity reservation is active and can hold the node group (`_problems`). One made in a placement
    group serves only instances in that group (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html); one
    made outside any serves a cluster placement group too
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups-limitations.html). One not active says why
    by its state (a Capacity Block names its start, an ended one says its capacity is gone) and fails before `up`."""
    check, reservation_id = "capacity reservation", g.capacity_reservation_id
    if not reservation_id:
        return Finding(check, "skip", "none configured: On-Demand capacity")
    fix_show = f"aws ec2 describe-capacity-reservations --capacity-reservation-ids {reservation_id} --region {region}"
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except (ClientError, BotoCoreError) as e:
        return Finding(check, "fail", f"{reservation_id}: {aws_error(e)}", fix_show)
    if not found:
        return Finding(check, "fail", f"{reservation_id} not found in {region}", fix_show)
    cr = found[0]
    state, fix = _state_problem(cr, stack)
    problems = [p for p in (state, *_problems(cr, g, az)) if p]
    if problems:
        fixes = [f for f in (fix, f"{fix_show}; fix or remove {_GPU('capacity_reservation_id')}") if f]
        return Finding(check, "fail", f"{reservation_id}: " + "; ".join(problems), "; ".join(fixes))
    ends = f", ends {_when(cr['EndDate'])}" if cr.get("EndDate") else ""
    held = f"{g.instance_type} in {cr.get('AvailabilityZone')}, {int(cr.get('AvailableInstanceCount', 0))} available"
    return Finding(check, "pass", f"{reservation_id}: {_reservation_kind(cr)}, active, {held}{ends}")


def check_system_quota(cfg: StackConfig, clients: AwsClients) -> Finding:
    """The system node group fits its family's On-Demand vCPU quota (Standard for m7i), beside the GPU one."""
    s, check = cfg.system_nodes, "system vCPU quota"
    try:
        info = describe_type(clients.ec2, s.instance_type)
    except (ClientError, BotoCoreError) as e:
        return Finding(check, "fail", aws_error(e), "check the EC2 permissions (ec2:DescribeInstanceTypes)")
    if info is None:
        key = SystemNodesConfig.keyname("instance_type", prefixed=True)
        fix = f"set {key} in Pulumi.{cfg.stack}.yaml to a type offered there"
        return Finding(check, "fail", f"{s.instance_type} does not exist in {cfg.region}", fix)
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    row, _, _ = check_quota(clients.quotas, clients.ec2, s.instance_type, vcpus, s.count, cfg.region)
    if quota_for(s.instance_type) == quota_for(cfg.gpu_nodes.instance_type):
        # Same quota as the GPU nodes: the GPU row alone cannot see that both together exceed it.
        row = Finding(row.check, row.status, f"{row.detail} (plus the GPU nodes under the same quota)", row.fix)
    return row


# The EKS add-ons whose pinned version preflight checks: (add-on, ClusterConfig field).
ADDONS = (
    ("vpc-cni", "vpc_cni_version"),
    ("kube-proxy", "kube_proxy_version"),
    ("coredns", "coredns_version"),
    (NODE_MONITORING_AGENT, "node_monitoring_agent_version"),
)


def check_addon_version(eks: Eks | None, addon: str, field: str, cluster: ClusterConfig, region: str) -> Finding:
    """EKS offers the version of add-on ``addon`` pinned in ``cluster.<field>`` for the cluster's Kubernetes version:
    it creates the add-ons after the control plane, so a version it does not offer fails `up` with the cluster already
    billing (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAddonVersions.html)."""
    check, key, version = f"{addon} add-on", ClusterConfig.keyname(field), getattr(cluster, field)
    kubernetes_version = cluster.kubernetes_version
    listing = (
        f"aws eks describe-addon-versions --addon-name {addon} --kubernetes-version {kubernetes_version} "
        f"--region {region} --query 'addons[].addonVersions[].addonVersion'"
    )
    if eks is None:
        return Finding(check, "skip", f"{version} not checked: no EKS client")
    try:
        pages = eks.get_paginator("describe_addon_versions").paginate(
            addonName=addon, kubernetesVersion=kubernetes_version
        )
        offered = [v["addonVersion"] for page in pages for a in page["addons"] for v in a["addonVersions"]]
    except (ClientError, BotoCoreError) as e:
        return Finding(check, "skip", f"{version} not checked ({aws_error(e)}); EKS checks it at `up`", listing)
    if version not in offered:
        newest = ", ".join(offered[:3]) or "none"
        detail = f"{version} is not offered for Kubernetes {kubernetes_version} in {region} (newest offered: {newest})"
        return Finding(check, "fail", detail, f"set {PROJECT}:{key} to one of: {listing}")
    return Finding(check, "pass", f"{version} is offered for Kubernetes {kubernetes_version}")


# EKS's control-plane price per cluster hour (https://aws.amazon.com/eks/pricing/, read 2026-12-06): $0.10 in
# standard support, $0.60 in extended support; a version past extended support cannot be created.
EKS_USD_PER_HOUR = {"STANDARD_SUPPORT": 0.10, "EXTENDED_SUPPORT": 0.60}


def check_kubernetes_version(eks: Eks | None, version: str, region: str) -> Finding:
    """kubernetesVersion is one EKS supports (DescribeClusterVersions): standard support passes, extended support
    passes with its price, past support (or unknown to EKS) fails naming the versions in standard support."""
    check = "Kubernetes version"
    key = ClusterConfig.keyname("kubernetes_version", prefixed=True)
    listing = (
        f"aws eks describe-cluster-versions --region {region} --version-status STANDARD_SUPPORT "
        "--query 'clusterVersions[].clusterVersion'"
    )
    if eks is None:
        return Finding(check, "skip", f"{version} not checked: no EKS client")
    try:
        found = eks.describe_cluster_versions(clusterVersions=[version], includeAll=True).get("clusterVersions", [])
    except (ClientError, BotoCoreError) as e:
        return Finding(check, "skip", f"{version} not checked ({aws_error(e)}); EKS checks it at `up`", listing)
    info: dict = next((v for v in found if v.get("clusterVersion") == version), {})
    status = info.get("versionStatus", "UNSUPPORTED")
    if status not in EKS_USD_PER_HOUR:
        return Finding(check, "fail", f"{version} is past EKS support in {region}", f"set {key} to one of: {listing}")
    price = EKS_USD_PER_HOUR[status]
    if status == "EXTENDED_SUPPORT":
        until = _when(info.get("endOfExtendedSupportDate"), "%Y-%m-%d", "?")
        bills = f"${price:.2f}/h (${price * 24:.2f} a day) instead of ${EKS_USD_PER_HOUR['STANDARD_SUPPORT']:.2f}/h"
        detail = f"WARNING {version} is in EKS extended support until {until}: the control plane bills {bills}"
        return Finding(check, "pass", f"{detail}; set {key} to a version in standard support: {listing}")
    end = _when(info.get("endOfStandardSupportDate"), "%Y-%m-%d", "?")
    return Finding(check, "pass", f"{version} is in EKS standard support until {end} (${price:.2f}/h)")


def check_api_endpoint(cluster: ClusterConfig, stack: str, address: Callable[[], str] | None) -> Finding:
    """Whether this machine may reach the public Kubernetes API (``address``: the target's deployer_cidr, None for a
    stand-in). An empty list or the driver's own entry gets this machine's address at `run`/`up` (stack_steps.py); a
    user's list that covers none of this machine's fails with the command that adds it: every call would time out."""
    check, cidrs = "API endpoint access", cluster.public_access_cidrs
    if not cluster.endpoint_public_access:
        return Finding(check, "pass", "private endpoint only (reachable from inside the VPC)")
    listed = f"{API_CIDRS_KEY}: {', '.join(cidrs)}"
    try:
        cidr = address() if address is not None else None
    except DriverError as e:
        if cidrs:
            return Finding(check, "skip", f"{listed}; this machine's address not compared: {e}")
        return Finding(check, "fail", str(e), f"set '{API_CIDRS_KEY}: [x.x.x.x/32]' in Pulumi.{stack}.yaml")
    if cidr is None:
        return Finding(check, "pass" if cidrs else "skip", listed if cidrs else f"{API_CIDRS_KEY} is empty")
    if not cidrs:
        return Finding(check, "pass", f"{cidr}, this machine's address: `run`/`up` writes it to {API_CIDRS_KEY}")
    if cluster.admits(cidr):
        return Finding(check, "pass", f"{cidr}, this machine's address, is covered by {listed}")
    if cluster.driver_cidr in cidrs:
        why = f"{cluster.driver_cidr} is the driver's entry from another address"
        return Finding(check, "pass", f"{why}: `run`/`up` replace it with {cidr}, this machine's (in place)")
    fix = f"pulumi config set --stack {stack} --path '{API_CIDRS_KEY}[{len(cidrs)}]' {cidr}"
    detail = f"{cidr}, this machine's address, is not covered by {listed}: every call to the cluster would time out"
    return Finding(check, "fail", detail, fix)


def _reservation_kind(cr: dict) -> str:
    rtype = cr.get("ReservationType", "default")
    return "a Capacity Block for ML" if rtype == CAPACITY_BLOCK else f"an On-Demand Capacity Reservation ({rtype})"


def run_preflight(
    cfg: StackConfig,
    clients: AwsClients,
    which: Callable[[str], str | None] = shutil.which,
    machine: Iterable[Finding] = (),
) -> StepResult:
    """Every check, in order (``machine``: this machine's rows beside the AWS CLI's, e.g. the pulumi CLI's); the
    result fails if any row fails, and its data carries the AZ to use."""
    g = cfg.gpu_nodes
    rows: list[Finding] = [check_aws_cli(which), *machine]
    cred, account = check_credentials(clients.sts)
    rows.append(cred)
    if account is None:
        return verdict("preflight", rows, PreflightFacts())
    try:
        info = describe_type(clients.ec2, g.instance_type)
    except (ClientError, BotoCoreError) as e:
        fix = "check the region and the EC2 permissions (ec2:DescribeInstanceTypes)"
        rows.append(Finding("instance type", "fail", aws_error(e), fix))
        return verdict("preflight", rows, PreflightFacts(account=account))
    rows += check_instance_type(info, g.instance_type, cfg.region, g.efa_interfaces, g.gpus_per_node, cfg.stack)
    if info is None:
        return verdict("preflight", rows, PreflightFacts(account=account))
    az_row, az, valid = check_az(
        offered_azs(clients.ec2, g.instance_type), cfg.network.azs, g.availability_zone, g.instance_type, cfg.stack
    )
    rows.append(az_row)
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    quota_row, need, free = check_quota(clients.quotas, clients.ec2, g.instance_type, vcpus, g.node_count, cfg.region)
    rows.append(quota_row)
    rows.append(check_system_quota(cfg, clients))
    rows.append(check_kubernetes_version(clients.eks, cfg.cluster.kubernetes_version, cfg.region))
    rows += [check_addon_version(clients.eks, addon, field, cfg.cluster, cfg.region) for addon, field in ADDONS]
    rows.append(check_capacity_reservation(clients.ec2, g, az, cfg.region, cfg.stack))
    facts = PreflightFacts(
        account=account,
        gpu_az=az,
        valid_azs=valid,
        vcpus_needed=need,
        vcpus_free=free,
        efa_interfaces=int(info.get("NetworkInfo", {}).get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)),
    )
    fit = f"account {account}: {g.node_count} x {g.instance_type} fit in {az}"
    return verdict("preflight", rows, facts, ok_summary=fit)


# ---- on AWS --------------------------------------------------------------------------------------------
def check_job_data(job: TrainConfig) -> None:
    """The train block's s3:// data, the head of each object read from this machine before anything is
    created (workloads/data_check.py); a path of the pods' own is theirs to check."""
    try:
        if not (job.data and parse_location(stack_label("data"), job.data).remote):
            return
        # data_check imports torch and the tokenizer (about 1.3 s): paid only by a job whose data is in
        # S3, so the import stays below the return above (tests/automation/steps/test_preflight_imports.py).
        from workloads.data_check import check_data

        check_data(job.data, job.num_workers, flag=stack_label("data"))
    except TrainConfigError as e:
        raise DriverError(str(e), exit_code=2) from None


def run_aws(target: AwsTarget, prior: Prior) -> StepResult:
    """The job the stack describes (bad input before any AWS call; the job and where each value came from
    are shown), then every AWS row; a chosen AZ is noted."""
    resolved = target.resolved_job()  # a job that cannot run on this cluster fails before anything is created
    target.on_note(resolved.text("job"))  # shown now; `follow` notes it again with the storage path
    check_job_data(resolved.config)
    cfg = target.cfg
    if note := one_node_note(resolved.config, cfg.gpu_nodes.node_count, cfg.gpu_nodes.gpus_per_node):
        target.note(note)
    c = target.deps.client
    machine = [*(target.deps.pulumi_setup() if target.deps.pulumi_setup else ())]
    address = target.deployer_cidr if target.deps.public_ip is not None else None
    machine.append(check_api_endpoint(cfg.cluster, cfg.stack, address))
    if machine[-1].status == "fail":  # the cluster is out of this machine's reach: no AWS call is worth making
        return verdict("preflight", machine, PreflightFacts())
    clients = AwsClients(sts=c("sts"), ec2=c("ec2"), quotas=c("service-quotas"), eks=c("eks"))
    result = run_preflight(cfg, clients, machine=machine)
    facts = result.data
    if result.ok and facts is not None and facts.gpu_az and not cfg.gpu_nodes.availability_zone:
        chosen, s = facts.gpu_az, cfg.stack
        target.note(
            f"{GPU_AZ_KEY} is empty: preflight chose {chosen} (valid: {', '.join(facts.valid_azs)}); "
            f"`python -m automation run --stack {s}` sets it in the stack before preview/up, "
            f"or set '{GPU_AZ_KEY}: {chosen}' in Pulumi.{s}.yaml"
        )
    return result


# ---- on this machine -----------------------------------------------------------------------------------
def run_local(target: LocalTarget, prior: Prior) -> StepResult:
    """What the local run needs on this machine: the training module, Ray's job server, the CPUs or GPUs."""
    plan, rows = target.plan, []
    train = WORKLOADS_DIR / "train.py"
    fix = "the workloads package is incomplete: reinstall the project"
    rows.append(Finding.judged("training module", train.is_file(), str(train), fix))
    for mod, why in (("ray", "Ray"), ("aiohttp_cors", "Ray's job server (ray[default])"), ("torch", "PyTorch")):
        found = "found" if importlib.util.find_spec(mod) else "missing"
        rows.append(Finding.judged(why, found == "found", f"module {mod} {found}", "pip install -e '.[automation]'"))
    cpus = os.cpu_count() or 1
    detail = f"{cpus} cores, {plan.cpus_needed:g} needed ({plan.num_workers} workers x {plan.cpus_per_worker:g})"
    fix = f"use --num-workers {max(1, int(cpus // plan.cpus_per_worker))}"
    rows.append(Finding.judged("CPUs", cpus >= plan.cpus_needed, detail, fix))
    if plan.use_gpu:
        gpus, fix = _local_gpus(), "use fewer --num-workers or leave out --use-gpu"
        rows.append(
            Finding.judged("GPUs", gpus >= plan.gpus_needed, f"{gpus} local GPUs, {plan.gpus_needed:g} needed", fix)
        )
    fit = f"{plan.num_workers} {'GPU' if plan.use_gpu else 'CPU'} workers fit on this machine"
    return verdict("preflight", rows, ok_summary=fit)


def _local_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


run = by_place(
    "preflight: the target's read-only checks (on AWS the ones above; locally the machine's), before any change.",
    run_aws,
    run_local,
)
