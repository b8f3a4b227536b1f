"""The policies of the ray-efa-eks CrossGuard pack, one object per invariant.

Each policy reads the engine's camelCase properties of the resources the program declares, says
in its description why the invariant matters and where the fact comes from, and is mandatory
when breaking it breaks EFA or security, advisory when it only costs money. Only pulumi-policy,
the standard library and ``infra.names`` (which imports nothing) are imported: the pack runs in its
own virtualenv (requirements.txt). Facts about instance types come from the project's
``infra/data/instance_types.json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

# The pack may import infra.names: it runs only from this repository (`--policy-pack infra/policy`, and it
# reads infra/data/ already), and infra/names.py and infra/__init__.py import nothing, so the pack's own
# virtualenv (pulumi-policy only) is enough. __main__.py puts the repository root on the path for it.
from infra.names import (
    EFA_COUNTER_READER,
    EFA_COUNTER_READER_NAMESPACE,
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_ROLE,
    HOST_SYS,
    IDLE_GUARD_S3_FOLDER,
    NODE_MONITORING_AGENT,
    ROLE_LABEL,
)

INSTANCE_DATA = Path(__file__).resolve().parents[1] / "data" / "instance_types.json"

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
IAM_POLICY_DOCS = {"aws:iam/policy:Policy": "policy", "aws:iam/rolePolicy:RolePolicy": "policy"}

RAY_PORTS = (6379, 8265, 10001)  # GCS, dashboard (job submission), Ray client: remote code execution
WORLD = ("0.0.0.0/0", "::/0")
EFA_TYPES = ("efa", "efa-only")
HUGEPAGES_RESOURCE = "hugepages-2Mi"
PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


@cache
def max_efa_interfaces() -> dict[str, int]:
    """Instance type -> maximum EFA interfaces, for the EFA-capable types the project knows."""
    types = json.loads(INSTANCE_DATA.read_text())["instance_types"]
    return {name: int(t["max_efa_interfaces"]) for name, t in types.items() if t["efa_supported"]}


def _of(resources: Iterable[PolicyResource], *types: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type in types]


def _efa_interfaces(lt_props: Any) -> list[dict]:
    return [n for n in lt_props.get("networkInterfaces") or [] if n.get("interfaceType") in EFA_TYPES]


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- EFA wiring


def _efa_interfaces_valid(args: StackValidationArgs, report: ReportViolation) -> None:
    efa_groups = [
        t
        for ng in _of(args.resources, NODE_GROUP)
        for t in ng.props.get("instanceTypes") or []
        if t in max_efa_interfaces()
    ]
    wanted = {max_efa_interfaces()[t] for t in efa_groups}
    for lt in _of(args.resources, LAUNCH_TEMPLATE):
        nics = _efa_interfaces(lt.props)
        if not nics:
            continue
        if not any(_num(n.get("networkCardIndex")) == 0 and _num(n.get("deviceIndex")) == 0 for n in nics):
            report(f"{lt.name}: no EFA interface at network card 0, device index 0 (the primary interface)", lt.urn)
        if len(wanted) == 1 and len(nics) != next(iter(wanted)):
            report(
                f"{lt.name}: {len(nics)} EFA interface(s) but the GPU instance type has {next(iter(wanted))}: "
                "add one per network card",
                lt.urn,
            )


efa_interfaces = StackValidationPolicy(
    name="efa-interfaces-card0-and-max",
    description=(
        "An EFA launch template has its primary EFA interface at network card 0 / device index 0 and one EFA "
        "interface per network card of the instance type; fewer leaves bandwidth unused, a missing primary "
        "interface leaves the node without EFA. Source: "
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"
    ),
    validate=_efa_interfaces_valid,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _placement_cluster(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type == PLACEMENT_GROUP and args.props.get("strategy") != "cluster":
        report(f"placement group strategy is {args.props.get('strategy')!r}, not 'cluster'", None)
    if args.resource_type == LAUNCH_TEMPLATE and _efa_interfaces(args.props):
        if not (args.props.get("placement") or {}).get("groupName"):
            report("an EFA launch template without a placement group: EFA needs a cluster placement group", None)


placement_cluster = ResourceValidationPolicy(
    name="efa-cluster-placement-group",
    description=(
        "EFA nodes launch into a 'cluster' placement group (one AZ, lowest latency between the instances); the "
        "EFA launch template names it. Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html"
    ),
    validate=_placement_cluster,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _gpu_one_subnet(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != NODE_GROUP:
        return
    if not any(t in max_efa_interfaces() for t in args.props.get("instanceTypes") or []):
        return
    subnets = args.props.get("subnetIds") or []
    if len(subnets) != 1:
        report(f"EFA node group in {len(subnets)} subnets: a cluster placement group and EFA need exactly one", None)


gpu_one_subnet = ResourceValidationPolicy(
    name="efa-node-group-one-subnet",
    description=(
        "The EFA GPU node group has exactly one subnet: EFA traffic does not cross subnets/AZs and a cluster "
        "placement group lives in one AZ. Source: https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html"
    ),
    validate=_gpu_one_subnet,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _gpu_node_repair(args: StackValidationArgs, report: ReportViolation) -> None:
    # The GPU node group by its role label: on a Capacity Block it lists no instance types.
    gpu_groups = [
        ng for ng in _of(args.resources, NODE_GROUP) if (ng.props.get("labels") or {}).get(ROLE_LABEL) == GPU_ROLE
    ]
    for ng in gpu_groups:
        if (ng.props.get("nodeRepairConfig") or {}).get("enabled") is not True:
            report(f"{ng.name}: the GPU node group's node auto repair is off (nodeRepairConfig.enabled)", ng.urn)
    if gpu_groups and not [a for a in _of(args.resources, ADDON) if a.props.get("addonName") == NODE_MONITORING_AGENT]:
        report(
            f"no {NODE_MONITORING_AGENT} add-on: nothing sets the GPU condition (AcceleratedHardwareReady) that node "
            "auto repair acts on",
            None,
        )


gpu_node_repair = StackValidationPolicy(
    name="gpu-node-auto-repair",
    description=(
        "The GPU node group has node auto repair on and the stack installs the EKS node monitoring agent add-on, "
        "which reads GPU (Xid, DCGM), EFA and kernel faults and sets the node conditions repair acts on: without "
        "both, a node whose GPU or EFA link failed stays in the group, stalling the run while it bills. Source: "
        "https://docs.aws.amazon.com/eks/latest/userguide/node-health.html"
    ),
    validate=_gpu_node_repair,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _self_rules(resources: list[PolicyResource]) -> dict[str | None, set[str | None]]:
    """Security group id -> directions ('ingress', 'egress') that allow all traffic from/to itself (an id or
    a direction is None where a preview does not know it yet)."""
    found: dict[str | None, set[str | None]] = {}
    for r in _of(resources, SG_INGRESS, SG_EGRESS):
        p = r.props
        if p.get("ipProtocol") == "-1" and p.get("referencedSecurityGroupId") == p.get("securityGroupId"):
            found.setdefault(p.get("securityGroupId"), set()).add(
                "ingress" if r.resource_type == SG_INGRESS else "egress"
            )
    for r in _of(resources, SG_RULE):
        p = r.props
        if p.get("protocol") in ("-1", "all") and p.get("self"):
            found.setdefault(p.get("securityGroupId"), set()).add(p.get("type"))
    return found


def _efa_sg_valid(args: StackValidationArgs, report: ReportViolation) -> None:
    rules = _self_rules(args.resources)
    for lt in _of(args.resources, LAUNCH_TEMPLATE):
        for nic in _efa_interfaces(lt.props):
            groups = nic.get("securityGroups") or []
            if not any(rules.get(g) == {"ingress", "egress"} for g in groups):
                report(
                    f"{lt.name}: none of the EFA interface's security groups {groups} allows all traffic from and "
                    "to itself in both directions",
                    lt.urn,
                )


efa_security_group = StackValidationPolicy(
    name="efa-security-group-self-all-traffic",
    description=(
        "Every EFA interface has a security group that allows all traffic from itself (ingress) and to itself "
        "(egress); without the egress rule EFA's SRD traffic is dropped and NCCL hangs or falls back to sockets. "
        "Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security"
    ),
    validate=_efa_sg_valid,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --------------------------------------------------------------------------- nodes and network security


def _imds(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    md = args.props.get("metadataOptions") or {}
    if md.get("httpTokens") != "required":
        report(f"metadataOptions.httpTokens is {md.get('httpTokens')!r}: set 'required' (IMDSv2 only)", None)
    if _num(md.get("httpPutResponseHopLimit")) != 1:
        report(
            f"metadataOptions.httpPutResponseHopLimit is {md.get('httpPutResponseHopLimit')!r}: set 1 so pods "
            "cannot read the node role's credentials",
            None,
        )


imds_v2_hop_1 = ResourceValidationPolicy(
    name="imdsv2-hop-limit-1",
    description=(
        "Launch templates require IMDSv2 and a hop limit of 1, so containers cannot reach the node role's "
        "credentials; pods that need AWS use EKS Pod Identity. Source: "
        "https://docs.aws.amazon.com/eks/latest/best-practices/identity-and-access-management.html"
    ),
    validate=_imds,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _covers_ray_port(protocol: Any, from_port: Any, to_port: Any) -> list[int]:
    if str(protocol) in ("-1", "all"):
        return list(RAY_PORTS)
    if str(protocol) not in ("tcp", "6"):
        return []
    low, high = _num(from_port), _num(to_port)
    if low is None or high is None:
        return []
    return [p for p in RAY_PORTS if low <= p <= high]


def _world_ingress(resource_type: str, p: Any) -> list[tuple[list[str], list[int]]]:
    """(world CIDRs, Ray ports) of each ingress rule a resource declares."""
    if resource_type == SG_INGRESS:
        cidrs = [c for c in (p.get("cidrIpv4"), p.get("cidrIpv6")) if c in WORLD]
        return [(cidrs, _covers_ray_port(p.get("ipProtocol"), p.get("fromPort"), p.get("toPort")))]
    if resource_type == SG_RULE and p.get("type") == "ingress":
        cidrs = [c for c in [*(p.get("cidrBlocks") or []), *(p.get("ipv6CidrBlocks") or [])] if c in WORLD]
        return [(cidrs, _covers_ray_port(p.get("protocol"), p.get("fromPort"), p.get("toPort")))]
    if resource_type == SECURITY_GROUP:
        out = []
        for rule in p.get("ingress") or []:
            cidrs = [c for c in [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])] if c in WORLD]
            out.append((cidrs, _covers_ray_port(rule.get("protocol"), rule.get("fromPort"), rule.get("toPort"))))
        return out
    return []


def _no_public_ray(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for cidrs, ports in _world_ingress(args.resource_type, args.props):
        if cidrs and ports:
            report(f"ingress from {cidrs} to Ray port(s) {ports}: Ray's ports run any code sent to them", None)


no_public_ray_ports = ResourceValidationPolicy(
    name="no-public-ray-ports",
    description=(
        "No security group admits 0.0.0.0/0 or ::/0 to Ray's GCS (6379), dashboard/job API (8265) or client "
        "(10001) ports: Ray has no authentication and runs what it is sent. Source: "
        "https://docs.ray.io/en/latest/ray-security/index.html"
    ),
    validate=_no_public_ray,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --------------------------------------------------------------------------- Ray pods


def _worker_problems(group: Any) -> list[str]:
    name = group.get("groupName")
    problems = []
    num_gpus = (group.get("rayStartParams") or {}).get("num-gpus")
    for c in ((group.get("template") or {}).get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests != limits:
            problems.append(f"{name}/{c.get('name')}: requests {requests} != limits {limits}")
        if _num(limits.get(GPU_RESOURCE)) != _num(num_gpus):
            problems.append(f"{name}: {GPU_RESOURCE} {limits.get(GPU_RESOURCE)} != Ray num-gpus {num_gpus}")
        if not (_num(limits.get(EFA_RESOURCE)) or 0) >= 1:
            problems.append(f"{name}: no {EFA_RESOURCE} in the limits: NCCL would use sockets")
        env = {e.get("name"): e.get("value") for e in c.get("env") or []}
        if not limits.get(HUGEPAGES_RESOURCE) and env.get("FI_EFA_USE_HUGE_PAGE") != "0":
            problems.append(
                f"{name}: no {HUGEPAGES_RESOURCE} in the limits and no FI_EFA_USE_HUGE_PAGE=0: libfabric's EFA "
                "buffers would ask for huge pages the pod may not use"
            )
    return problems


def _ray_workers(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != RAY_CLUSTER:
        return
    for group in (args.props.get("spec") or {}).get("workerGroupSpecs") or []:
        for problem in _worker_problems(group):
            report(problem, None)


ray_worker_pods = ResourceValidationPolicy(
    name="ray-worker-pods-efa-resources",
    description=(
        "Ray GPU worker pods have requests == limits (Guaranteed QoS), nvidia.com/gpu equal to Ray's num-gpus, "
        "vpc.amazonaws.com/efa and hugepages-2Mi, as the EKS EFA guide's pods do (or, with the huge-page request "
        "turned off, FI_EFA_USE_HUGE_PAGE=0 so libfabric does not ask for them). Source: "
        "https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html"
    ),
    validate=_ray_workers,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _service_accounts(ray: PolicyResource) -> set[tuple[str | None, str | None]]:
    spec, ns = ray.props.get("spec") or {}, (ray.props.get("metadata") or {}).get("namespace")
    groups = [spec.get("headGroupSpec") or {}, *(spec.get("workerGroupSpecs") or [])]
    names = {((g.get("template") or {}).get("spec") or {}).get("serviceAccountName") for g in groups}
    return {(ns, n) for n in names if n}


def _irsa_bound(resources: list[PolicyResource]) -> set[tuple[str | None, str | None]]:
    """ServiceAccounts that carry the IRSA role annotation."""
    out = set()
    for account in _of(resources, SERVICE_ACCOUNT):
        meta = account.props.get("metadata") or {}
        if (meta.get("annotations") or {}).get(IRSA_ROLE_ANNOTATION):
            out.add((meta.get("namespace"), meta.get("name")))
    return out


def _pod_identity_valid(args: StackValidationArgs, report: ReportViolation) -> None:
    bound = {(a.props.get("namespace"), a.props.get("serviceAccount")) for a in _of(args.resources, POD_IDENTITY)}
    bound |= _irsa_bound(args.resources)
    for ray in _of(args.resources, RAY_CLUSTER):
        for ns, sa in sorted(_service_accounts(ray)):
            if (ns, sa) not in bound:
                report(
                    f"{ray.name}: service account {ns}/{sa} has no EKS Pod Identity association and no "
                    f"{IRSA_ROLE_ANNOTATION} annotation",
                    ray.urn,
                )


ray_pod_identity = StackValidationPolicy(
    name="ray-service-account-pod-identity",
    description=(
        "A service account the Ray pods run as is bound to an IAM role, by an EKS Pod Identity association or "
        "(the stack's irsa mode) by the eks.amazonaws.com/role-arn annotation: the only ways the pods get AWS "
        "credentials once IMDS is closed to them (hop limit 1). Sources: "
        "https://docs.aws.amazon.com/eks/latest/userguide/pod-identities.html, "
        "https://docs.aws.amazon.com/eks/latest/userguide/iam-roles-for-service-accounts.html"
    ),
    validate=_pod_identity_valid,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --------------------------------------------------------------------------- the host's namespaces and files

# Where each kind keeps its pod templates (the Kubernetes API's workload resources; KubeRay's RayCluster CRD).
POD_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kubernetes:core/v1:Pod": (("spec",),),
    **{
        f"kubernetes:{kind}": (("spec", "template", "spec"),)
        for kind in ("apps/v1:DaemonSet", "apps/v1:Deployment", "apps/v1:StatefulSet", "apps/v1:ReplicaSet")
    },
    "kubernetes:batch/v1:Job": (("spec", "template", "spec"),),
    "kubernetes:batch/v1:CronJob": (("spec", "jobTemplate", "spec", "template", "spec"),),
    RAY_CLUSTER: (("spec", "headGroupSpec", "template", "spec"), ("spec", "workerGroupSpecs", "*", "template", "spec")),
}


def _pod_specs(props: Any, path: tuple[str, ...]) -> list[dict]:
    """The pod specs found along ``path`` ("*": each item of a list)."""
    nodes = [props]
    for key in path:
        if key == "*":
            nodes = [x for n in nodes if isinstance(n, list) for x in n]
        else:
            nodes = [n.get(key) for n in nodes if isinstance(n, dict)]
    return [n for n in nodes if isinstance(n, dict)]


def _is_counter_reader(resource_type: str, props: Any) -> bool:
    meta = props.get("metadata") or {}
    return resource_type == "kubernetes:apps/v1:DaemonSet" and (meta.get("name"), meta.get("namespace")) == (
        EFA_COUNTER_READER,
        EFA_COUNTER_READER_NAMESPACE,
    )


def _host_path_problems(spec: dict, reader: bool) -> list[str]:
    """The hostPath volumes of ``spec`` beyond the one the counter reader may have: the host's /sys, type
    Directory, mounted read-only by every container that mounts it."""
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    problems = []
    for v in spec.get("volumes") or []:
        host = v.get("hostPath")
        if not host:
            continue
        mounts = [m for c in containers for m in c.get("volumeMounts") or [] if m.get("name") == v.get("name")]
        if not reader:
            problems.append(f"hostPath {host.get('path')!r} outside the {EFA_COUNTER_READER} DaemonSet")
        elif (host.get("path"), host.get("type")) != (HOST_SYS, "Directory"):
            problems.append(f"hostPath {host.get('path')!r} (type {host.get('type')!r}): only {HOST_SYS} is allowed")
        elif not mounts or not all(m.get("readOnly") is True for m in mounts):
            problems.append(f"hostPath {HOST_SYS} mounted writable (every mount must be readOnly)")
    return problems


def _host_access(args: ResourceValidationArgs, report: ReportViolation) -> None:
    reader = _is_counter_reader(args.resource_type, args.props)
    for path in POD_PATHS.get(args.resource_type, ()):
        for spec in _pod_specs(args.props, path):
            problems = [f"{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
            containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
            problems += [
                f"container {c.get('name')} is privileged"
                for c in containers
                if (c.get("securityContext") or {}).get("privileged")
            ]
            for problem in problems + _host_path_problems(spec, reader):
                report(problem, None)


host_access_only_the_counter_reader = ResourceValidationPolicy(
    name="no-host-access-but-the-counter-reader",
    description=(
        "No pod the program declares shares the node's network, PID or IPC namespace or runs privileged, and "
        f"none mounts a host path except the {EFA_COUNTER_READER} DaemonSet in {EFA_COUNTER_READER_NAMESPACE}, "
        f"which mounts the host's {HOST_SYS} (type Directory) read-only to read the EFA port counters the kernel "
        "shows only in the initial network namespace. A hostNetwork pod reaches IMDS past the hop limit of 1 and "
        "so the node role's credentials; a host path or privilege is a way out of the container. The pinned Helm "
        "charts' pods are not in the render. Sources: "
        "https://docs.aws.amazon.com/eks/latest/userguide/best-practices-security.html, "
        "https://kubernetes.io/docs/concepts/security/pod-security-standards/"
    ),
    validate=_host_access,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --------------------------------------------------------------------------- S3 and IAM


def _bucket_keys(bucket: PolicyResource) -> set[str]:
    return {k for k in (bucket.props.get("id"), bucket.props.get("bucket")) if k}


def _buckets_valid(args: StackValidationArgs, report: ReportViolation) -> None:
    blocked = {
        p.props.get("bucket")
        for p in _of(args.resources, PUBLIC_ACCESS_BLOCK)
        if all(p.props.get(flag) is True for flag in PUBLIC_ACCESS_FLAGS)
    }
    encrypted = {
        e.props.get("bucket")
        for e in _of(args.resources, *BUCKET_ENCRYPTION)
        if any(
            ((r.get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm"))
            for r in e.props.get("rules") or []
        )
    }
    for bucket in _of(args.resources, *BUCKETS):
        keys = _bucket_keys(bucket)
        if not keys & blocked:
            report(f"{bucket.name}: no public access block with all four flags true", bucket.urn)
        if not keys & encrypted:
            report(f"{bucket.name}: no server-side encryption configuration", bucket.urn)


s3_private_encrypted = StackValidationPolicy(
    name="s3-bucket-private-and-encrypted",
    description=(
        "Every S3 bucket has a public access block with all four flags true and a default server-side "
        "encryption rule: checkpoints and datasets stay private and encrypted at rest. Source: "
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html"
    ),
    validate=_buckets_valid,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _s3_star_statements(document: Any) -> list[dict]:
    doc = json.loads(document) if isinstance(document, str) else document or {}
    return [
        st
        for st in _as_list(doc.get("Statement") or [])
        if st.get("Effect", "Allow") == "Allow"
        and "*" in _as_list(st.get("Resource"))
        and {"s3:*", "*"} & set(_as_list(st.get("Action")))
    ]


def _iam_documents(args: ResourceValidationArgs) -> list[Any]:
    """The policy documents a resource declares: a policy's own, or a role's inline ones."""
    docs = []
    if args.resource_type in IAM_POLICY_DOCS:
        docs.append(args.props.get(IAM_POLICY_DOCS[args.resource_type]))
    if args.resource_type == "aws:iam/role:Role":
        docs += [p.get("policy") for p in args.props.get("inlinePolicies") or []]
    return docs


def _each_document(
    problems_of: Callable[[Any], list[str]],
) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    """A resource validation that reports the ``problems_of`` each policy document the resource declares."""

    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for doc in _iam_documents(args):
            for problem in problems_of(doc):
                report(problem, None)

    return validate


def _iam_no_s3_star(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for doc in _iam_documents(args):
        for st in _s3_star_statements(doc):
            report(f"statement {st.get('Sid', '')!r} allows {st.get('Action')} on Resource '*': name the bucket", None)


iam_no_s3_star = ResourceValidationPolicy(
    name="iam-no-s3-star-on-star",
    description=(
        "No IAM statement allows s3:* (or *) on Resource '*': the training role gets its own bucket only "
        "(least privilege). Source: https://docs.aws.amazon.com/IAM/latest/UserGuide/best-practices.html"
    ),
    validate=_iam_no_s3_star,
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _s3_scope_problems(document: Any) -> list[str]:
    """Statements that reach past a key prefix: object actions on ``bucket/*``, or ListBucket without an
    ``s3:prefix`` condition naming one."""
    doc = json.loads(document) if isinstance(document, str) else document or {}
    problems = []
    for st in _as_list(doc.get("Statement") or []):
        actions = set(_as_list(st.get("Action")))
        if st.get("Effect", "Allow") != "Allow" or not any(a.startswith("s3:") for a in actions):
            continue
        sid = st.get("Sid", "")
        objects = [r for r in _as_list(st.get("Resource")) if str(r).startswith("arn:aws:s3:::") and "/" in str(r)]
        problems += [f"statement {sid!r} reaches every key of {r[: -len('/*')]}" for r in objects if r.count("/") < 2]
        if "s3:ListBucket" in actions:
            conditions = st.get("Condition") or {}
            prefixes = [v for c in conditions.values() for v in _as_list((c or {}).get("s3:prefix") or [])]
            if not prefixes or any(v in ("", "*") for v in prefixes):
                problems.append(f"statement {sid!r} lists the bucket without an s3:prefix condition naming a prefix")
    return problems


iam_s3_prefix = ResourceValidationPolicy(
    name="iam-s3-scoped-to-a-prefix",
    description=(
        "An IAM statement with S3 object actions names a key prefix (bucket/<prefix>/*, not bucket/*), and "
        "s3:ListBucket carries an s3:prefix condition naming that prefix: the pods reach their stack's keys only. "
        "Source: https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html"
    ),
    validate=_each_document(_s3_scope_problems),
    enforcement_level=EnforcementLevel.MANDATORY,
)


# The only EKS actions any role of the stack may hold: the idle guard's (infra/idle_guard.py), on a node group ARN
# (arn:<partition>:eks:<region>:<account>:nodegroup/<cluster>/<nodegroup>/<uuid>:
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonelastickubernetesservice.html).
# A document that holds one is the guard's; beside it the only statement allowed is s3:PutObject on the guard's
# folder of one stack prefix, arn:<partition>:s3:::<bucket>/<prefix>/idle-guard/* (the object resource type:
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html).
GUARD_EKS_ACTIONS = frozenset({"eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"})
GUARD_S3_ACTIONS = frozenset({"s3:PutObject"})
_NODEGROUP_ARN = re.compile(r"^arn:aws[a-z-]*:eks:[a-z0-9-]+:\d{12}:nodegroup/[^/*]+/[^/*]+/[^/*]+$")
_GUARD_RECORDS_ARN = re.compile(
    rf"^arn:aws[a-z-]*:s3:::[^/*?]+/[^/*?]+(/[^/*?]+)*/{re.escape(IDLE_GUARD_S3_FOLDER)}/\*$"
)


def _eks_statement_problems(sid: str, actions: set[str], resources: list[str]) -> list[str]:
    """An EKS statement: the guard's two actions (nothing of another service beside them) on one node group."""
    problems = []
    if actions - GUARD_EKS_ACTIONS:
        extra = sorted(actions - GUARD_EKS_ACTIONS)
        problems.append(f"statement {sid!r} allows {extra}: only {sorted(GUARD_EKS_ACTIONS)}")
    if len(resources) != 1 or not _NODEGROUP_ARN.match(resources[0]):
        problems.append(f"statement {sid!r} reaches {resources}: name the one node group's ARN")
    return problems


def _guard_other_statement_problems(st: dict) -> list[str]:
    """A statement beside the guard's EKS ones: only s3:PutObject on the guard's records folder passes."""
    sid = st.get("Sid", "")
    actions = {str(a) for a in _as_list(st.get("Action") or [])}
    resources = [str(r) for r in _as_list(st.get("Resource") or [])]
    if not actions or actions - GUARD_S3_ACTIONS:
        return [
            f"statement {sid!r} of the idle guard's role allows {sorted(actions) or st.get('NotAction')}: "
            f"beside the EKS actions only {sorted(GUARD_S3_ACTIONS)}"
        ]
    if len(resources) != 1 or not _GUARD_RECORDS_ARN.match(resources[0]):
        return [f"statement {sid!r} reaches {resources}: only <bucket>/<prefix>/{IDLE_GUARD_S3_FOLDER}/*"]
    return []


def _eks_scope_problems(document: Any) -> list[str]:
    """Statements allowing an EKS action other than the guard's two, or on anything but one node group's ARN;
    in a document that allows an EKS action (the guard's), any other Allow statement but the records' PutObject."""
    doc = json.loads(document) if isinstance(document, str) else document or {}
    allows = [st for st in _as_list(doc.get("Statement") or []) if st.get("Effect", "Allow") == "Allow"]
    problems, others = [], []
    for st in allows:
        actions = {str(a) for a in _as_list(st.get("Action") or [])}
        if any(a.startswith("eks:") or a == "*" for a in actions):
            resources = [str(r) for r in _as_list(st.get("Resource"))]
            problems += _eks_statement_problems(st.get("Sid", ""), actions, resources)
        else:
            others.append(st)
    if len(others) == len(allows):  # no EKS action: not the guard's document
        return problems
    return problems + [p for st in others for p in _guard_other_statement_problems(st)]


idle_guard_least_privilege = ResourceValidationPolicy(
    name="idle-guard-least-privilege",
    description=(
        "An IAM statement that allows an EKS action allows only eks:DescribeNodegroup and eks:UpdateNodegroupConfig, "
        "on exactly one node group's ARN, and the document holding it allows besides only s3:PutObject on "
        f"<bucket>/<prefix>/{IDLE_GUARD_S3_FOLDER}/*: the idle guard can resize the GPU nodes and write its records, "
        "nothing else (least privilege). Source: https://docs.aws.amazon.com/service-authorization/latest/reference/"
        "list_amazonelastickubernetesservice.html"
    ),
    validate=_each_document(_eks_scope_problems),
    enforcement_level=EnforcementLevel.MANDATORY,
)


def _web_identity_problems(document: Any) -> list[str]:
    """Statements letting an OIDC token assume the role without pinning one ServiceAccount and the STS audience."""
    doc = json.loads(document) if isinstance(document, str) else document or {}
    problems = []
    for st in _as_list(doc.get("Statement") or []):
        if "sts:AssumeRoleWithWebIdentity" not in _as_list(st.get("Action")) or st.get("Effect", "Allow") != "Allow":
            continue
        equals = (st.get("Condition") or {}).get("StringEquals") or {}
        subs = [v for k, v in equals.items() if k.endswith(":sub")]
        auds = [v for k, v in equals.items() if k.endswith(":aud")]
        if len(subs) != 1 or not str(subs[0]).startswith("system:serviceaccount:") or "*" in str(subs[0]):
            problems.append(f"statement {st.get('Sid', '')!r}: no StringEquals :sub naming one ServiceAccount")
        if auds != ["sts.amazonaws.com"]:
            problems.append(f"statement {st.get('Sid', '')!r}: no StringEquals :aud of sts.amazonaws.com")
    return problems


def _irsa_trust(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != "aws:iam/role:Role":
        return
    for problem in _web_identity_problems(args.props.get("assumeRolePolicy")):
        report(problem, None)


irsa_trust_scoped = ResourceValidationPolicy(
    name="irsa-trust-scoped-to-a-service-account",
    description=(
        "A role that an OIDC token may assume (sts:AssumeRoleWithWebIdentity, IRSA) pins one ServiceAccount with "
        "a StringEquals :sub condition and the audience sts.amazonaws.com with :aud; without them any pod of the "
        "cluster could take the role. Source: "
        "https://docs.aws.amazon.com/eks/latest/userguide/associate-service-account-role.html"
    ),
    validate=_irsa_trust,
    enforcement_level=EnforcementLevel.MANDATORY,
)


# --------------------------------------------------------------------------- cost (advisory)


def _s3_endpoint(args: StackValidationArgs, report: ReportViolation) -> None:
    if not _of(args.resources, NAT_GATEWAY):
        return
    gateways = [
        e
        for e in _of(args.resources, VPC_ENDPOINT)
        if e.props.get("vpcEndpointType") == "Gateway" and str(e.props.get("serviceName", "")).endswith(".s3")
    ]
    if not gateways:
        report("a NAT gateway but no S3 gateway endpoint: S3 traffic pays the NAT's per-GB charge", None)


s3_gateway_endpoint = StackValidationPolicy(
    name="s3-gateway-endpoint",
    description=(
        "A VPC with a NAT gateway has an S3 gateway endpoint, which is free, so S3 traffic does not pay NAT "
        "processing per GB. Source: https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html"
    ),
    validate=_s3_endpoint,
    enforcement_level=EnforcementLevel.ADVISORY,
)


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    efa_interfaces,
    placement_cluster,
    gpu_one_subnet,
    gpu_node_repair,
    efa_security_group,
    imds_v2_hop_1,
    no_public_ray_ports,
    ray_worker_pods,
    ray_pod_identity,
    host_access_only_the_counter_reader,
    s3_private_encrypted,
    iam_no_s3_star,
    iam_s3_prefix,
    idle_guard_least_privilege,
    irsa_trust_scoped,
    s3_gateway_endpoint,
]
