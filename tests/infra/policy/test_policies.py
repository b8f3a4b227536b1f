"""The CrossGuard pack (infra/policy) over the mock render of every stack file, and one breaking
resource per policy. The pack is the one home of the EFA, IMDS, public-port, S3 and IAM invariants:
the unit and program tests do not assert them again. The policies' validate functions are called
directly: constructing the PolicyPack would start the policy server and block (shared/ENVIRONMENT.md)."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import REPO
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)

from infra.config import stack_config_values
from infra.mock_render import run_program
from infra.policy import policies as pp

# Every stack file of the project: a new Pulumi.<stack>.yaml is checked by the pack without a change here.
STACKS = tuple(sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in REPO.glob("Pulumi.*.yaml")))
S3_EFA_MANDATORY = {p.name for p in pp.POLICIES} - {"s3-gateway-endpoint"}


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def resource(typ: str, name: str, props: dict) -> PolicyResource:
    return PolicyResource(typ, props, f"urn:pulumi:test::ray-efa-eks::{typ}::{name}", name, _opts(), None, None, [], {})


def from_render(stack: str) -> list[PolicyResource]:
    """The render's resources as the engine hands them to a policy: inputs plus the mock's id."""
    r = run_program(stack, REPO, config=stack_config_values(stack, REPO))
    rows = json.loads(json.dumps([(x.type, x.name, x.inputs) for x in r.records], default=str))
    return [resource(typ, name, {**inputs, "id": f"{name}-id"}) for typ, name, inputs in rows]


def violations(policy, resources: list[PolicyResource]) -> list[str]:
    """Messages ``policy`` reports over ``resources``."""
    found: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        found.append(message)

    if isinstance(policy, ResourceValidationPolicy):
        for r in resources:
            policy.validate(ResourceValidationArgs(r.resource_type, r.props, r.urn, r.name, _opts(), None), report)
    else:
        policy.validate(StackValidationArgs(resources), report)
    return found


@pytest.fixture(scope="module", params=STACKS)
def rendered(request) -> list[PolicyResource]:
    return from_render(request.param)


@pytest.fixture(scope="module")
def east() -> list[PolicyResource]:
    return from_render("us-east-2")


def edited(resources: list[PolicyResource], typ: str, name_part: str, edit) -> list[PolicyResource]:
    """A copy of ``resources`` where ``edit(props)`` changed the one resource of ``typ`` named *name_part*."""
    out, hits = [], 0
    for r in resources:
        if r.resource_type == typ and name_part in r.name:
            props = copy.deepcopy(dict(r.props))
            edit(props)
            r, hits = resource(r.resource_type, r.name, props), hits + 1
        out.append(r)
    assert hits == 1, f"expected one {typ} named *{name_part}*, edited {hits}"
    return out


def only(policy_name: str):
    return next(p for p in pp.POLICIES if p.name == policy_name)


# --------------------------------------------------------------------------- the pack


@pytest.mark.parametrize("policy", pp.POLICIES, ids=lambda p: p.name)
def test_stack_render_passes_every_policy(rendered, policy):
    found = violations(policy, rendered)
    assert found == [], f"{policy.name} reports on the render: {found}"


def test_each_policy_says_why_and_cites_a_source():
    bad = [p.name for p in pp.POLICIES if "https://" not in p.description or len(p.description) < 80]
    assert bad == [], f"policies without a reason and a source URL: {bad}"


def test_efa_and_security_policies_are_mandatory_cost_ones_advisory():
    levels = {p.name: p.enforcement_level for p in pp.POLICIES}
    wrong = {
        n: lvl
        for n, lvl in levels.items()
        if lvl != (EnforcementLevel.MANDATORY if n in S3_EFA_MANDATORY else EnforcementLevel.ADVISORY)
    }
    assert wrong == {}, f"unexpected enforcement levels: {wrong}"


# --------------------------------------------------------------------------- counter-examples, one per policy

LT, NG = pp.LAUNCH_TEMPLATE, pp.NODE_GROUP


def test_efa_interface_off_card_0_is_reported(east):
    def move(props):
        props["networkInterfaces"][0]["networkCardIndex"] = 1

    found = violations(only("efa-interfaces-card0-and-max"), edited(east, LT, "gpu-lt", move))
    assert any("network card 0" in m for m in found), f"got {found}"


def test_fewer_efa_interfaces_than_the_type_has_is_reported(east):
    def p5(props):
        props["instanceTypes"] = ["p5.48xlarge"]

    found = violations(only("efa-interfaces-card0-and-max"), edited(east, NG, "gpu-ng", p5))
    assert any("1 EFA interface(s) but the GPU instance type has 32" in m for m in found), f"got {found}"


def test_spread_placement_group_is_reported(east):
    def spread(props):
        props["strategy"] = "spread"

    found = violations(only("efa-cluster-placement-group"), edited(east, pp.PLACEMENT_GROUP, "gpu-pg", spread))
    assert any("not 'cluster'" in m for m in found), f"got {found}"


def test_gpu_node_group_in_two_subnets_is_reported(east):
    def two(props):
        props["subnetIds"] = props["subnetIds"] * 2

    found = violations(only("efa-node-group-one-subnet"), edited(east, NG, "gpu-ng", two))
    assert found == ["EFA node group in 2 subnets: a cluster placement group and EFA need exactly one"], found


def test_gpu_node_group_without_node_repair_is_reported(east):
    def off(props):
        props.pop("nodeRepairConfig")

    found = violations(only("gpu-node-auto-repair"), edited(east, NG, "gpu-ng", off))
    assert len(found) == 1 and "node auto repair is off (nodeRepairConfig.enabled)" in found[0], f"got {found}"


def test_stack_without_the_node_monitoring_agent_add_on_is_reported(east):
    without = [r for r in east if r.props.get("addonName") != "eks-node-monitoring-agent"]
    found = violations(only("gpu-node-auto-repair"), without)
    assert len(found) == 1 and found[0].startswith("no eks-node-monitoring-agent add-on"), f"got {found}"


def test_efa_group_without_egress_self_rule_is_reported(east):
    without = [r for r in east if r.resource_type != pp.SG_EGRESS]
    found = violations(only("efa-security-group-self-all-traffic"), without)
    assert any("both directions" in m for m in found), f"got {found}"


@pytest.mark.parametrize("field, value", [("httpTokens", "optional"), ("httpPutResponseHopLimit", 2.0)])
def test_imds_v1_or_hop_limit_2_is_reported(east, field, value):
    def loosen(props):
        props["metadataOptions"][field] = value

    found = violations(only("imdsv2-hop-limit-1"), edited(east, LT, "system-lt", loosen))
    assert len(found) == 1 and field in found[0], f"got {found}"


@pytest.mark.parametrize("port", [6379, 8265, 10001])
def test_world_open_ray_port_is_reported(port):
    rule = resource(
        pp.SG_INGRESS,
        "open",
        {"securityGroupId": "sg-1", "cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "fromPort": port, "toPort": port},
    )
    found = violations(only("no-public-ray-ports"), [rule])
    assert found == [f"ingress from ['0.0.0.0/0'] to Ray port(s) [{port}]: Ray's ports run any code sent to them"]


def test_ipv6_world_inline_ingress_to_all_ports_is_reported():
    sg = resource(pp.SECURITY_GROUP, "inline", {"ingress": [{"protocol": "-1", "ipv6CidrBlocks": ["::/0"]}]})
    found = violations(only("no-public-ray-ports"), [sg])
    assert len(found) == 1 and "[6379, 8265, 10001]" in found[0], f"got {found}"


def test_world_open_https_is_not_a_ray_port():
    rule = resource(
        pp.SG_INGRESS, "https", {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "fromPort": 443, "toPort": 443}
    )
    assert violations(only("no-public-ray-ports"), [rule]) == []


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (lambda res: res["limits"].update(cpu="39"), "requests"),
        (lambda res: [d.update({"nvidia.com/gpu": 2.0}) for d in res.values()], "Ray num-gpus"),
        (lambda res: [d.pop("vpc.amazonaws.com/efa") for d in res.values()], "vpc.amazonaws.com/efa"),
        (lambda res: [d.pop("hugepages-2Mi") for d in res.values()], "hugepages-2Mi"),
    ],
    ids=["requests-differ", "gpus-differ", "no-efa", "no-hugepages"],
)
def test_broken_worker_pod_is_reported(east, break_it, expected):
    def edit(props):
        break_it(props["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"])

    found = violations(only("ray-worker-pods-efa-resources"), edited(east, pp.RAY_CLUSTER, "raycluster", edit))
    assert len(found) == 1 and expected in found[0], f"expected one report about {expected}, got {found}"


def test_worker_without_hugepages_but_told_libfabric_passes(east):
    def edit(props):
        c = props["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
        [d.pop("hugepages-2Mi") for d in c["resources"].values()]
        c["env"].append({"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"})

    found = violations(only("ray-worker-pods-efa-resources"), edited(east, pp.RAY_CLUSTER, "raycluster", edit))
    assert found == [], f"expected no report with FI_EFA_USE_HUGE_PAGE=0, got {found}"


HOST_ACCESS = "no-host-access-but-the-counter-reader"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"


def _reader_pod(props) -> dict:
    return props["spec"]["template"]["spec"]


def test_the_render_holds_the_counter_reader_with_the_host_sys_read_only(east):
    (reader,) = [r for r in east if r.resource_type == DAEMONSET and "efa-counter-reader" in r.name]
    pod = _reader_pod(reader.props)
    got = (pod["volumes"], pod["containers"][0]["volumeMounts"])
    expected = (
        [{"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}}],
        [{"name": "host-sys", "mountPath": "/host/sys", "readOnly": True}],
    )
    assert got == expected, f"expected the host's /sys read-only at /host/sys, got {got}"


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (lambda pod: pod["containers"][0]["volumeMounts"][0].pop("readOnly"), "mounted writable"),
        (lambda pod: pod["volumes"][0]["hostPath"].update(path="/"), "hostPath '/'"),
        (lambda pod: pod["volumes"][0]["hostPath"].update(path="/sys/class/infiniband"), "only /sys is allowed"),
        (lambda pod: pod["volumes"][0]["hostPath"].update(type="DirectoryOrCreate"), "only /sys is allowed"),
        (lambda pod: pod.update(hostNetwork=True), "hostNetwork: true"),
        (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "is privileged"),
    ],
    ids=["writable", "root", "class-only", "or-create", "host-network", "privileged"],
)
def test_a_counter_reader_reaching_further_is_reported(east, break_it, expected):
    found = violations(
        only(HOST_ACCESS), edited(east, DAEMONSET, "efa-counter-reader", lambda p: break_it(_reader_pod(p)))
    )
    assert len(found) == 1 and expected in found[0], f"expected one report about {expected!r}, got {found}"


def test_the_same_mount_in_another_namespace_is_reported(east):
    found = violations(
        only(HOST_ACCESS),
        edited(east, DAEMONSET, "efa-counter-reader", lambda p: p["metadata"].update(namespace="ray")),
    )
    assert found == ["hostPath '/sys' outside the efa-counter-reader DaemonSet"], found


def test_the_same_mount_in_a_ray_worker_is_reported(east):
    def edit(props):
        pod = props["spec"]["workerGroupSpecs"][0]["template"]["spec"]
        pod["volumes"].append({"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}})
        pod["containers"][0]["volumeMounts"].append({"name": "host-sys", "mountPath": "/host/sys", "readOnly": True})

    found = violations(only(HOST_ACCESS), edited(east, pp.RAY_CLUSTER, "raycluster", edit))
    assert found == ["hostPath '/sys' outside the efa-counter-reader DaemonSet"], found


@pytest.mark.parametrize("key", ["hostNetwork", "hostPID", "hostIPC"])
def test_a_host_namespace_in_the_idle_guard_is_reported(east, key):
    def edit(props):
        props["spec"]["jobTemplate"]["spec"]["template"]["spec"][key] = True

    found = violations(only(HOST_ACCESS), edited(east, "kubernetes:batch/v1:CronJob", "idle-guard", edit))
    assert found == [f"{key}: true"], found


def _with_service_account(props):
    props["spec"]["workerGroupSpecs"][0]["template"]["spec"]["serviceAccountName"] = "ray-train"


def test_ray_service_account_without_pod_identity_is_reported(east):
    unbound = [r for r in east if r.resource_type != pp.POD_IDENTITY]  # the stack's own association removed
    found = violations(
        only("ray-service-account-pod-identity"), edited(unbound, pp.RAY_CLUSTER, "raycluster", _with_service_account)
    )
    assert found == [
        "ray-efa-eks-ray-raycluster: service account ray/ray-train has no EKS Pod Identity association and no "
        "eks.amazonaws.com/role-arn annotation"
    ], found


def test_ray_service_account_with_pod_identity_passes(east):
    pia = resource(pp.POD_IDENTITY, "pia", {"namespace": "ray", "serviceAccount": "ray-train", "roleArn": "arn"})
    resources = [*edited(east, pp.RAY_CLUSTER, "raycluster", _with_service_account), pia]
    assert violations(only("ray-service-account-pod-identity"), resources) == []


@pytest.fixture(scope="module")
def irsa() -> list[PolicyResource]:
    values = {**stack_config_values("us-east-2", REPO), "ray-efa-eks:podIdentityMode": "irsa"}
    r = run_program("us-east-2", REPO, config=values)
    rows = json.loads(json.dumps([(x.type, x.name, x.inputs) for x in r.records], default=str))
    return [resource(typ, name, {**inputs, "id": f"{name}-id"}) for typ, name, inputs in rows]


@pytest.mark.parametrize("policy", pp.POLICIES, ids=lambda p: p.name)
def test_irsa_render_passes_every_policy(irsa, policy):
    assert violations(policy, irsa) == [], f"{policy.name} reported on the irsa render"


def test_irsa_service_account_without_the_annotation_is_reported(irsa):
    found = violations(
        only("ray-service-account-pod-identity"),
        edited(irsa, pp.SERVICE_ACCOUNT, "service-account", lambda props: props["metadata"].pop("annotations")),
    )
    assert len(found) == 1 and "no EKS Pod Identity association" in found[0], found


@pytest.mark.parametrize(
    "condition, expected",
    [
        ({}, ":sub naming one ServiceAccount"),
        ({"StringEquals": {"oidc/x:sub": "system:serviceaccount:ray:*"}}, ":sub naming one ServiceAccount"),
        ({"StringEquals": {"oidc/x:sub": "system:serviceaccount:ray:ray-train"}}, ":aud of sts.amazonaws.com"),
    ],
    ids=["no-condition", "wildcard-sub", "no-aud"],
)
def test_web_identity_trust_without_sub_and_aud_is_reported(condition, expected):
    statement = {"Sid": "t", "Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity", "Condition": condition}
    role = resource("aws:iam/role:Role", "r", {"assumeRolePolicy": json.dumps({"Statement": [statement]})})
    found = violations(only("irsa-trust-scoped-to-a-service-account"), [role])
    assert any(expected in f for f in found), f"expected a report about {expected!r}, got {found}"


def _bucket_stack(block: dict | None = None, sse: str | None = "aws:kms") -> list[PolicyResource]:
    flags = dict.fromkeys(pp.PUBLIC_ACCESS_FLAGS, True) | (block or {})
    out = [
        resource(pp.BUCKETS[0], "ckpt", {"id": "ckpt-bucket", "bucket": "ckpt-bucket"}),
        resource(pp.PUBLIC_ACCESS_BLOCK, "ckpt-pab", {"bucket": "ckpt-bucket", **flags}),
    ]
    if sse:
        rule = {"applyServerSideEncryptionByDefault": {"sseAlgorithm": sse}}
        out.append(resource(pp.BUCKET_ENCRYPTION[0], "ckpt-sse", {"bucket": "ckpt-bucket", "rules": [rule]}))
    return out


def test_private_encrypted_bucket_passes():
    assert violations(only("s3-bucket-private-and-encrypted"), _bucket_stack()) == []


def test_bucket_with_public_policy_allowed_is_reported():
    found = violations(only("s3-bucket-private-and-encrypted"), _bucket_stack(block={"blockPublicPolicy": False}))
    assert found == ["ckpt: no public access block with all four flags true"], found


def test_unencrypted_bucket_is_reported():
    found = violations(only("s3-bucket-private-and-encrypted"), _bucket_stack(sse=None))
    assert found == ["ckpt: no server-side encryption configuration"], found


@pytest.mark.parametrize("action", ["s3:*", ["s3:GetObject", "*"]])
def test_s3_star_on_every_resource_is_reported(action):
    doc = json.dumps({"Statement": [{"Sid": "all", "Effect": "Allow", "Action": action, "Resource": "*"}]})
    found = violations(only("iam-no-s3-star-on-star"), [resource("aws:iam/policy:Policy", "p", {"policy": doc})])
    assert len(found) == 1 and "Resource '*'" in found[0], f"got {found}"


def test_s3_star_on_one_bucket_passes():
    doc = {"Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::ckpt/*"]}]}
    role = resource("aws:iam/role:Role", "r", {"inlinePolicies": [{"name": "s3", "policy": json.dumps(doc)}]})
    assert violations(only("iam-no-s3-star-on-star"), [role]) == []


def _role_policy(statement: dict) -> list[PolicyResource]:
    doc = json.dumps({"Statement": [{"Sid": "s", "Effect": "Allow", **statement}]})
    return [resource("aws:iam/rolePolicy:RolePolicy", "p", {"policy": doc})]


def test_object_actions_on_every_key_of_the_bucket_are_reported():
    found = violations(
        only("iam-s3-scoped-to-a-prefix"), _role_policy({"Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})
    )
    assert found == ["statement 's' reaches every key of arn:aws:s3:::b"], found


@pytest.mark.parametrize("condition", [None, {"StringLike": {"s3:prefix": "*"}}], ids=["none", "star"])
def test_listing_without_a_prefix_condition_is_reported(condition):
    statement = {"Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::b"} | (
        {"Condition": condition} if condition else {}
    )
    found = violations(only("iam-s3-scoped-to-a-prefix"), _role_policy(statement))
    assert found == ["statement 's' lists the bucket without an s3:prefix condition naming a prefix"], found


def test_nat_without_s3_endpoint_is_advised(east):
    without = [r for r in east if r.resource_type != pp.VPC_ENDPOINT]
    found = violations(only("s3-gateway-endpoint"), without)
    assert len(found) == 1 and "no S3 gateway endpoint" in found[0], f"got {found}"


# --------------------------------------------------------------------------- the idle guard's role
def _guard_statements(resources: list[PolicyResource]) -> list[dict]:
    policy = next(r for r in resources if r.resource_type == "aws:iam/rolePolicy:RolePolicy" and "idle-guard" in r.name)
    return json.loads(policy.props["policy"])["Statement"]


# A node group ARN of the shape the policy accepts (arn:aws:eks:<region>:<account>:nodegroup/<cluster>/<group>/<uuid>).
_NODEGROUP_ARN = "arn:aws:eks:us-east-2:123456789012:nodegroup/ray-efa-eks/gpu/1a2b3c4d"
_OTHER_NODEGROUP_ARN = "arn:aws:eks:us-east-2:123456789012:nodegroup/other-cluster/gpu/5e6f7a8b"


def _guard_statement(resources: list[PolicyResource]) -> dict:
    return _guard_statements(resources)[0]


def test_the_render_has_the_guard_role_with_its_two_actions_on_the_node_group(east):
    st = _guard_statement(east)
    got = (sorted(st["Action"]), len(st["Resource"]), ":nodegroup/" in st["Resource"][0])
    assert got == (["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"], 1, True), st


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"Action": ["eks:*"]}, "allows ['eks:*']"),
        (
            {"Action": ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DeleteNodegroup"]},
            "eks:DeleteNodegroup",
        ),
        ({"Action": ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "s3:GetObject"]}, "allows ['s3:GetObject']"),
        ({"Resource": ["*"]}, "reaches ['*']"),
        ({"Resource": ["arn:aws:eks:us-east-2:123456789012:cluster/ray-efa-eks"]}, "name the one node group's ARN"),
        ({"Resource": ["arn:aws:eks:us-east-2:123456789012:nodegroup/ray-efa-eks/*"]}, "name the one node group's ARN"),
        # Several resources: each must be judged, not only the first (a node group's ARN beside `*` or another's).
        ({"Resource": [_NODEGROUP_ARN, "*"]}, "name the one node group's ARN"),
        ({"Resource": [_NODEGROUP_ARN, _OTHER_NODEGROUP_ARN]}, "name the one node group's ARN"),
    ],
    ids=[
        "eks-star",
        "delete-too",
        "s3-in-the-eks-statement",
        "resource-star",
        "cluster-arn",
        "nodegroup-wildcard",
        "nodegroup-and-star",
        "two-nodegroups",
    ],
)
def test_a_guard_role_reaching_further_is_reported(east, change, expected):
    def widen(props):
        doc = json.loads(props["policy"])
        doc["Statement"][0].update(change)
        props["policy"] = json.dumps(doc)

    found = violations(
        only("idle-guard-least-privilege"), edited(east, "aws:iam/rolePolicy:RolePolicy", "idle-guard", widen)
    )
    assert any(expected in f for f in found), f"expected a report with {expected!r}, got {found}"


def test_the_render_lets_the_guard_put_objects_under_its_records_folder_only(east):
    got = [(st["Action"], st["Resource"]) for st in _guard_statements(east)[1:]]
    bucket = got[0][1][0].removeprefix("arn:aws:s3:::").split("/")[0] if got else ""
    assert got == [(["s3:PutObject"], [f"arn:aws:s3:::{bucket}/us-east-2/idle-guard/*"])], got
    assert bucket.startswith("ray-efa-eks-us-east-2"), bucket  # the run bucket (bucketPrefix), not a wildcard


RECORDS = "arn:aws:s3:::runs-bucket/us-east-2/idle-guard/*"


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"Resource": ["arn:aws:s3:::runs-bucket/us-east-2/*"]}, "reaches ['arn:aws:s3:::runs-bucket/us-east-2/*']"),
        ({"Resource": ["arn:aws:s3:::runs-bucket/*"]}, "only <bucket>/<prefix>/idle-guard/*"),
        ({"Resource": ["arn:aws:s3:::runs-bucket/*/idle-guard/*"]}, "only <bucket>/<prefix>/idle-guard/*"),
        ({"Resource": ["*"]}, "reaches ['*']"),
        ({"Resource": [RECORDS, "arn:aws:s3:::runs-bucket/us-west-2/idle-guard/*"]}, "only <bucket>/<prefix>"),
        ({"Action": ["s3:*"]}, "allows ['s3:*']"),
        ({"Action": ["s3:PutObject", "s3:GetObject"]}, "allows ['s3:GetObject', 's3:PutObject']"),
        ({"Action": ["s3:DeleteObject"]}, "allows ['s3:DeleteObject']"),
        ({"Action": ["iam:PassRole"], "Resource": ["*"]}, "allows ['iam:PassRole']"),
    ],
    ids=[
        "stack-prefix",
        "whole-bucket",
        "any-prefix",
        "resource-star",
        "second-prefix",
        "s3-star",
        "get-too",
        "delete-instead",
        "another-service",
    ],
)
def test_a_guard_role_writing_further_is_reported(east, change, expected):
    def widen(props):
        doc = json.loads(props["policy"])
        doc["Statement"][1].update({"Resource": [RECORDS], **change})
        props["policy"] = json.dumps(doc)

    found = violations(
        only("idle-guard-least-privilege"), edited(east, "aws:iam/rolePolicy:RolePolicy", "idle-guard", widen)
    )
    assert any(expected in f for f in found), f"expected a report with {expected!r}, got {found}"


def test_a_third_statement_beside_the_guards_two_is_reported(east):
    def add(props):
        doc = json.loads(props["policy"])
        doc["Statement"].append({"Sid": "Extra", "Effect": "Allow", "NotAction": ["s3:DeleteBucket"], "Resource": "*"})
        props["policy"] = json.dumps(doc)

    found = violations(
        only("idle-guard-least-privilege"), edited(east, "aws:iam/rolePolicy:RolePolicy", "idle-guard", add)
    )
    assert any("statement 'Extra' of the idle guard's role allows" in f for f in found), found


def test_the_ray_pods_object_actions_are_not_the_guards_business(east):
    """The Ray pods' document holds no EKS action, so its Get/Put/Delete under the stack prefix passes this policy."""
    storage = [r for r in east if r.resource_type == "aws:iam/rolePolicy:RolePolicy" and "pod-identity" in r.name]
    assert storage and violations(only("idle-guard-least-privilege"), storage) == []
