"""The pack's other policies (infra/policy/policies.py) over hand-built resources in the shapes the AWS and
Kubernetes providers take them (the engine's camelCase inputs, as the mock render of test_policies.py gives them):
each rule's passing shape, each way it breaks with its whole message, where a stack policy ties the report to a
resource's URN, and the kinds and fields a rule leaves alone. Fast enough to run per mutant (no render)."""

from __future__ import annotations

import json

import pytest

from infra.policy import policies as pp
from tests.infra.policy.test_policies import resource, violations


def reports(policy, resources) -> list[tuple[str, str | None]]:
    """(message, urn) of each report of a stack policy (pulumi_policy's ReportViolation(message, urn=None))."""
    found: list[tuple[str, str | None]] = []
    policy.validate(pp.StackValidationArgs(list(resources)), lambda m, urn=None: found.append((m, urn)))
    return found


# --------------------------------------------------------------------------- EFA wiring

EFA_IF = pp.max_efa_interfaces()  # p4d.24xlarge: 4 EFA interfaces, p5.48xlarge: 32 (infra/data/instance_types.json)


def nic(card, device=0, kind="efa", groups=("sg-1",)) -> dict:
    return {"interfaceType": kind, "networkCardIndex": card, "deviceIndex": device, "securityGroups": list(groups)}


def template(name="gpu-lt", nics=(), **props):
    return resource(pp.LAUNCH_TEMPLATE, name, {"networkInterfaces": list(nics), **props})


def group(name="gpu-ng", types=("p4d.24xlarge",), **props):
    return resource(pp.NODE_GROUP, name, {"instanceTypes": list(types), **props})


def efa_wiring(*resources):
    return reports(pp.efa_interfaces, resources)


def test_one_efa_interface_per_card_with_the_primary_at_card_0_passes():
    nics = [nic("0"), nic(1, kind="efa-only"), nic(2, kind="efa-only"), nic(3, kind="efa-only"), nic(0, 1, "interface")]
    assert EFA_IF["p4d.24xlarge"] == 4
    assert efa_wiring(group(), template(nics=nics)) == []


def test_efa_interfaces_fewer_than_the_type_has_are_reported_against_the_template():
    lt = template(nics=[nic(0), nic(1)])
    got = efa_wiring(group(), template("plain-lt"), lt)
    expected = [("gpu-lt: 2 EFA interface(s) but the GPU instance type has 4: add one per network card", lt.urn)]
    assert got == expected, got


@pytest.mark.parametrize("first", [nic(1, 0), nic(0, 1)], ids=["card-1", "device-1"])
def test_no_efa_interface_at_card_0_device_0_is_reported(first):
    lt = template(nics=[first, nic(2), nic(3), nic(4)])
    got = efa_wiring(group(), lt)
    assert got == [("gpu-lt: no EFA interface at network card 0, device index 0 (the primary interface)", lt.urn)], got


def test_the_count_is_judged_only_against_one_efa_type_and_never_on_a_template_without_efa():
    lt = template(nics=[nic(0)])
    plain = template("sys-lt", nics=[nic(1, kind="interface")])
    two_types = efa_wiring(group(), group("g2", ("p5.48xlarge",)), lt, plain)
    no_efa_group = efa_wiring(group(types=("m7i.xlarge",)), resource(pp.NODE_GROUP, "bare", {}), lt, plain)
    assert (two_types, no_efa_group) == ([], []), (two_types, no_efa_group)


def test_a_node_group_of_an_efa_type_beside_another_type_sets_the_count():
    lt = template(nics=[nic(0)])
    got = efa_wiring(group(types=("m7i.xlarge", "p4d.24xlarge")), group("g2", ("p4d.24xlarge",)), lt)
    assert [m for m, _ in got] == [
        "gpu-lt: 1 EFA interface(s) but the GPU instance type has 4: add one per network card"
    ]


def placement(*resources):
    return violations(pp.placement_cluster, list(resources))


def test_a_cluster_placement_group_and_an_efa_template_naming_one_pass():
    pg = resource(pp.PLACEMENT_GROUP, "pg", {"strategy": "cluster"})
    assert placement(pg, template(nics=[nic(0)], placement={"groupName": "pg"})) == []


def test_a_placement_group_of_another_strategy_is_reported():
    got = placement(resource(pp.PLACEMENT_GROUP, "pg", {"strategy": "spread"}), resource(pp.PLACEMENT_GROUP, "x", {}))
    assert got == [
        "placement group strategy is 'spread', not 'cluster'",
        "placement group strategy is None, not 'cluster'",
    ]


def test_an_efa_template_without_a_placement_group_is_reported_and_a_plain_one_is_not():
    got = placement(
        template(nics=[nic(0)]),
        template(nics=[nic(0)], placement={"availabilityZone": "a"}),
        template(nics=[nic(0, kind="interface")]),
        resource(pp.SUBNET, "s", {"strategy": "spread", "networkInterfaces": [nic(0)]}),
    )
    assert got == ["an EFA launch template without a placement group: EFA needs a cluster placement group"] * 2, got


def one_subnet(*resources):
    return violations(pp.gpu_one_subnet, list(resources))


def test_an_efa_node_group_needs_exactly_one_subnet():
    got = one_subnet(
        group(subnetIds=["a"]),
        group(subnetIds=["a", "b"]),
        group(),
        group(types=("m7i.xlarge",), subnetIds=["a", "b"]),
        resource(pp.NODE_GROUP, "bare", {"subnetIds": ["a", "b"]}),
        resource(pp.SUBNET, "s", {"instanceTypes": ["p4d.24xlarge"], "subnetIds": ["a", "b"]}),
    )
    assert got == [
        "EFA node group in 2 subnets: a cluster placement group and EFA need exactly one",
        "EFA node group in 0 subnets: a cluster placement group and EFA need exactly one",
    ], got


def self_rule(typ, sg="sg-1", **props):
    if typ in (pp.SG_INGRESS, pp.SG_EGRESS):
        base = {"ipProtocol": "-1", "securityGroupId": sg, "referencedSecurityGroupId": sg}
    else:
        base = {"protocol": "-1", "self": True, "securityGroupId": sg}
    return resource(typ, f"{typ}-{sg}-{props}", {**base, **props})


def efa_sg(*resources):
    return reports(pp.efa_security_group, resources)


SG_MESSAGE = (
    "gpu-lt: none of the EFA interface's security groups {} allows all traffic from and to itself in both directions"
)


@pytest.mark.parametrize(
    "rules",
    [
        [self_rule(pp.SG_INGRESS), self_rule(pp.SG_EGRESS)],
        [self_rule(pp.SG_RULE, type="ingress"), self_rule(pp.SG_RULE, type="egress", protocol="all")],
        [self_rule(pp.SG_INGRESS), self_rule(pp.SG_RULE, type="egress")],
    ],
    ids=["vpc-rules", "ec2-rules", "mixed"],
)
def test_an_efa_group_allowing_itself_both_ways_passes_on_any_of_the_interfaces_groups(rules):
    lt = template(nics=[nic(0, groups=("sg-0", "sg-1")), nic(1, kind="interface", groups=())])
    assert efa_sg(*rules, lt) == []


@pytest.mark.parametrize(
    "rules",
    [
        [self_rule(pp.SG_INGRESS)],
        [self_rule(pp.SG_EGRESS)],
        [self_rule(pp.SG_INGRESS), self_rule(pp.SG_EGRESS, ipProtocol="tcp")],
        [self_rule(pp.SG_INGRESS), self_rule(pp.SG_EGRESS, referencedSecurityGroupId="sg-2")],
        [self_rule(pp.SG_RULE, type="ingress"), self_rule(pp.SG_RULE, type="egress", self=False)],
        [self_rule(pp.SG_RULE, type="ingress"), self_rule(pp.SG_RULE, type="egress", protocol="tcp")],
        [self_rule(pp.SG_INGRESS), self_rule(pp.SG_EGRESS, sg="sg-2")],
        [self_rule(pp.SG_INGRESS), self_rule(pp.SECURITY_GROUP, type="egress")],
    ],
    ids=["ingress-only", "egress-only", "egress-tcp", "egress-other", "ec2-not-self", "ec2-tcp", "other-sg", "sg"],
)
def test_an_efa_interface_without_a_group_allowing_itself_both_ways_is_reported_against_the_template(rules):
    lt = template(nics=[nic(0)])
    got = efa_sg(*rules, lt)
    assert got == [(SG_MESSAGE.format(["sg-1"]), lt.urn)], got


def test_each_efa_interface_of_each_template_is_judged():
    lt = template(nics=[nic(0, groups=("sg-1",)), nic(1, groups=())])
    got = efa_sg(self_rule(pp.SG_INGRESS), self_rule(pp.SG_EGRESS), lt)
    assert got == [(SG_MESSAGE.format([]), lt.urn)], got


# --------------------------------------------------------------------------- nodes and network security


def imds(*resources):
    return violations(pp.imds_v2_hop_1, list(resources))


HOP = "metadataOptions.httpPutResponseHopLimit is {}: set 1 so pods cannot read the node role's credentials"


def test_imdsv2_with_a_hop_limit_of_1_passes_and_other_kinds_are_not_judged():
    good = template(metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": "1"})
    assert imds(good, resource(pp.NODE_GROUP, "ng", {"metadataOptions": {"httpTokens": "optional"}})) == []


def test_imds_v1_and_a_hop_limit_other_than_1_are_each_reported():
    got = imds(template(metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 2}), template())
    assert got == [
        "metadataOptions.httpTokens is 'optional': set 'required' (IMDSv2 only)",
        HOP.format(2),
        "metadataOptions.httpTokens is None: set 'required' (IMDSv2 only)",
        HOP.format(None),
    ], got


def ray_ports(*resources):
    return violations(pp.no_public_ray_ports, list(resources))


def ray_msg(cidrs, ports) -> str:
    return f"ingress from {cidrs} to Ray port(s) {ports}: Ray's ports run any code sent to them"


@pytest.mark.parametrize(
    ("typ", "props", "expected"),
    [
        (
            pp.SG_INGRESS,
            {"cidrIpv6": "::/0", "ipProtocol": "6", "fromPort": 6000, "toPort": 9000},
            [["::/0"], [6379, 8265]],
        ),
        (pp.SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "all"}, [["0.0.0.0/0"], list(pp.RAY_PORTS)]),
        (
            pp.SG_INGRESS,
            {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "fromPort": 8265, "toPort": 10001},
            [["0.0.0.0/0"], [8265, 10001]],
        ),
        (
            pp.SG_INGRESS,
            {"cidrIpv4": "10.0.0.0/8", "cidrIpv6": "::/0", "ipProtocol": "-1"},
            [["::/0"], list(pp.RAY_PORTS)],
        ),
        (pp.SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "udp", "fromPort": 0, "toPort": 65535}, None),
        (pp.SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "fromPort": 6380, "toPort": 8264}, None),
        (pp.SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "toPort": 7000}, None),
        (pp.SG_INGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "tcp", "fromPort": 6000}, None),
        (pp.SG_INGRESS, {"cidrIpv4": "10.0.0.0/8", "ipProtocol": "-1"}, None),
        (
            pp.SG_RULE,
            {
                "type": "ingress",
                "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"],
                "ipv6CidrBlocks": ["::/0"],
                "protocol": "tcp",
                "fromPort": 6379,
                "toPort": 6379,
            },
            [["0.0.0.0/0", "::/0"], [6379]],
        ),
        (pp.SG_RULE, {"type": "ingress", "ipv6CidrBlocks": ["::/0"], "protocol": "-1"}, [["::/0"], list(pp.RAY_PORTS)]),
        (pp.SG_RULE, {"type": "egress", "cidrBlocks": ["0.0.0.0/0"], "protocol": "-1"}, None),
        (pp.SG_EGRESS, {"cidrIpv4": "0.0.0.0/0", "ipProtocol": "-1"}, None),
        (pp.SECURITY_GROUP, {"egress": [{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}]}, None),
    ],
)
def test_world_ingress_to_a_ray_port_is_reported_with_its_cidrs_and_ports_in_every_rule_shape(typ, props, expected):
    got = ray_ports(resource(typ, "rule", props))
    assert got == ([ray_msg(*expected)] if expected else []), got


def test_each_inline_ingress_rule_of_a_security_group_is_judged():
    rules = [
        {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]},
        {"protocol": "tcp", "fromPort": 8265, "toPort": 8265, "cidrBlocks": ["0.0.0.0/0"]},
        {"protocol": "-1", "cidrBlocks": ["10.0.0.0/8"], "ipv6CidrBlocks": ["::/0"]},
    ]
    got = ray_ports(resource(pp.SECURITY_GROUP, "sg", {"ingress": rules}))
    assert got == [ray_msg(["0.0.0.0/0"], [8265]), ray_msg(["::/0"], list(pp.RAY_PORTS))], got


# --------------------------------------------------------------------------- Ray pods

GOOD_LIMITS = {"cpu": "8", pp.GPU_RESOURCE: 1, pp.EFA_RESOURCE: "1", pp.HUGEPAGES_RESOURCE: "1Gi"}


def worker(name="gpu", limits=None, requests=None, num_gpus="1", env=()) -> dict:
    limits = dict(GOOD_LIMITS if limits is None else limits)
    c = {"name": "ray", "resources": {"limits": limits, "requests": dict(limits if requests is None else requests)}}
    c["env"] = list(env)
    return {"groupName": name, "rayStartParams": {"num-gpus": num_gpus}, "template": {"spec": {"containers": [c]}}}


def ray_workers(*groups, head=None):
    spec = {"headGroupSpec": head or {}, "workerGroupSpecs": list(groups)}
    return violations(pp.ray_worker_pods, [resource(pp.RAY_CLUSTER, "rc", {"spec": spec})])


def test_a_guaranteed_worker_with_its_gpus_efa_and_huge_pages_passes_and_the_head_is_not_judged():
    assert ray_workers(worker(), {"groupName": "empty"}, head=worker("head", limits={})) == []


def test_a_worker_without_huge_pages_passes_only_when_libfabric_is_told_not_to_use_them():
    limits = {k: v for k, v in GOOD_LIMITS.items() if k != pp.HUGEPAGES_RESOURCE}
    told = worker(limits=limits, env=[{"name": "OTHER", "value": "0"}, {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"}])
    untold = worker("w2", limits=limits, env=[{"name": "FI_EFA_USE_HUGE_PAGE", "value": "1"}])
    got = ray_workers(told, untold)
    assert got == [
        "w2: no hugepages-2Mi in the limits and no FI_EFA_USE_HUGE_PAGE=0: libfabric's EFA buffers would ask for huge "
        "pages the pod may not use"
    ], got


def test_each_broken_worker_resource_is_reported_with_what_it_has():
    bad = worker(limits={pp.GPU_RESOURCE: 2, pp.EFA_RESOURCE: 0}, requests={}, num_gpus=1)
    got = ray_workers(worker(), bad)
    assert got == [
        "gpu/ray: requests {} != limits {'nvidia.com/gpu': 2, 'vpc.amazonaws.com/efa': 0}",
        "gpu: nvidia.com/gpu 2 != Ray num-gpus 1",
        "gpu: no vpc.amazonaws.com/efa in the limits: NCCL would use sockets",
        "gpu: no hugepages-2Mi in the limits and no FI_EFA_USE_HUGE_PAGE=0: libfabric's EFA buffers would ask for huge "
        "pages the pod may not use",
    ], got


def test_a_worker_with_no_resources_or_start_params_is_reported_and_other_kinds_are_not_judged():
    bare = {"groupName": "w", "template": {"spec": {"containers": [{"name": "c"}]}}}
    got = ray_workers(bare)
    other = violations(pp.ray_worker_pods, [resource(pp.NODE_GROUP, "ng", {"spec": {"workerGroupSpecs": [bare]}})])
    assert (got, other) == (
        [
            "w: no vpc.amazonaws.com/efa in the limits: NCCL would use sockets",
            "w: no hugepages-2Mi in the limits and no FI_EFA_USE_HUGE_PAGE=0: libfabric's EFA buffers would ask for "
            "huge pages the pod may not use",
        ],
        [],
    ), (got, other)


def test_every_container_of_every_worker_group_is_judged():
    two = worker("a")
    two["template"]["spec"]["containers"].append({"name": "side", "resources": {"limits": {}, "requests": {"cpu": 1}}})
    got = ray_workers(worker("ok"), two)
    assert got[:2] == ["a/side: requests {'cpu': 1} != limits {}", "a: nvidia.com/gpu None != Ray num-gpus 1"], got


def ray_cluster(namespace="ray", head_sa="head", worker_sa="train"):
    def pod(sa):
        return {"template": {"spec": {"serviceAccountName": sa} if sa else {}}}

    spec = {"headGroupSpec": pod(head_sa), "workerGroupSpecs": [pod(worker_sa), {}]}
    return resource(pp.RAY_CLUSTER, "rc", {"metadata": {"namespace": namespace}, "spec": spec})


def association(namespace, account):
    return resource(pp.POD_IDENTITY, f"pia-{account}", {"namespace": namespace, "serviceAccount": account})


def annotated(namespace, name, annotation=pp.IRSA_ROLE_ANNOTATION):
    meta = {"namespace": namespace, "name": name, "annotations": {annotation: "arn:aws:iam::1:role/r"}}
    return resource(pp.SERVICE_ACCOUNT, f"sa-{name}", {"metadata": meta})


def identity(*resources):
    return reports(pp.ray_pod_identity, resources)


def unbound(ns, sa) -> str:
    return (
        f"rc: service account {ns}/{sa} has no EKS Pod Identity association and no eks.amazonaws.com/role-arn "
        "annotation"
    )


def test_ray_service_accounts_bound_by_association_or_annotation_pass():
    assert identity(ray_cluster(), association("ray", "head"), annotated("ray", "train")) == []
    assert identity(ray_cluster(head_sa=None, worker_sa=None)) == []


def test_every_unbound_ray_service_account_is_reported_against_the_cluster_in_order():
    rc = ray_cluster()
    got = identity(
        rc,
        association("other", "head"),
        annotated("other", "train"),
        annotated("ray", "train", annotation="example.com/role"),
        resource(pp.SERVICE_ACCOUNT, "plain", {"metadata": {"namespace": "ray", "name": "head"}}),
    )
    assert got == [(unbound("ray", "head"), rc.urn), (unbound("ray", "train"), rc.urn)], got


# --------------------------------------------------------------------------- S3 and IAM


def bucket_stack(bucket_props, block_bucket="b", sse_type=pp.BUCKET_ENCRYPTION[1], sse="AES256", flags=None):
    flags = dict.fromkeys(pp.PUBLIC_ACCESS_FLAGS, True) | (flags or {})
    b = resource(pp.BUCKETS[1], "bkt", bucket_props)
    pab = resource(pp.PUBLIC_ACCESS_BLOCK, "pab", {"bucket": block_bucket, **flags})
    rules = [{}, {"applyServerSideEncryptionByDefault": {"sseAlgorithm": sse}}]
    return b, [b, pab, resource(sse_type, "sse", {"bucket": "b", "rules": rules})]


@pytest.mark.parametrize(
    "props", [{"id": "b"}, {"bucket": "b"}, {"id": "b", "bucket": "x"}, {"id": "x", "bucket": "b"}]
)
def test_a_bucket_is_matched_to_its_block_and_encryption_by_id_or_name(props):
    _, stack = bucket_stack(props)
    assert reports(pp.s3_private_encrypted, stack) == []


def test_a_bucket_without_a_full_block_or_an_algorithm_is_reported_against_the_bucket():
    b, stack = bucket_stack({"id": "b"}, flags={"restrictPublicBuckets": "true"}, sse="")
    got = reports(pp.s3_private_encrypted, stack)
    expected = [
        ("bkt: no public access block with all four flags true", b.urn),
        ("bkt: no server-side encryption configuration", b.urn),
    ]
    assert got == expected, got


def test_a_block_and_encryption_of_another_bucket_do_not_count():
    b, stack = bucket_stack({"id": "b"}, block_bucket="other", sse_type=pp.BUCKET_ENCRYPTION[0])
    got = reports(pp.s3_private_encrypted, stack)
    assert got == [("bkt: no public access block with all four flags true", b.urn)], got


def doc(*statements) -> str:
    return json.dumps({"Statement": list(statements) if len(statements) != 1 else statements[0]})


def policy_resources(document, typ="aws:iam/policy:Policy") -> list:
    """The same document as a policy, a role policy, a role's inline policy, and on a kind that holds none."""
    return [
        resource(typ, "p", {"policy": document}),
        resource("aws:iam/rolePolicy:RolePolicy", "rp", {"policy": document}),
        resource("aws:iam/role:Role", "r", {"inlinePolicies": [{"name": "a", "policy": document}]}),
        resource("aws:iam/user:User", "u", {"policy": document, "inlinePolicies": [{"policy": document}]}),
    ]


def test_s3_star_on_star_is_reported_for_each_kind_that_holds_a_document():
    st = {"Action": ["s3:GetObject", "s3:*"], "Resource": ["arn:aws:s3:::b", "*"]}
    got = violations(pp.iam_no_s3_star, policy_resources(doc(st)))
    msg = "statement '' allows ['s3:GetObject', 's3:*'] on Resource '*': name the bucket"
    assert got == [msg] * 3, got


def test_a_kind_other_than_a_policy_role_policy_or_role_declares_no_document():
    user = policy_resources(doc({"Action": "s3:*", "Resource": "*"}))[-1]
    assert violations(pp.iam_no_s3_star, [user]) == []


def test_a_document_rule_reports_each_problem_of_each_document_the_resource_declares():
    """The rule is built when called (``_each_document``), so the test builds its own, over two inline policies."""
    found: list[tuple[str, str | None]] = []
    validate = pp._each_document(lambda d: [f"{d}: one", f"{d}: two"])
    role = resource("aws:iam/role:Role", "r", {"inlinePolicies": [{"policy": "A"}, {"policy": "B"}]})
    validate(
        pp.ResourceValidationArgs(role.resource_type, role.props, role.urn, role.name, None, None),
        lambda m, u=None: found.append((m, u)),
    )
    assert found == [("A: one", None), ("A: two", None), ("B: one", None), ("B: two", None)], found


def test_s3_star_denied_or_on_a_bucket_or_another_action_on_star_passes():
    deny = {"Sid": "d", "Effect": "Deny", "Action": "s3:*", "Resource": "*"}
    named = {"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::b/*"}
    other = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}
    star = {"Sid": "all", "Effect": "Allow", "Action": "*", "Resource": "*"}
    got = violations(
        pp.iam_no_s3_star,
        [resource("aws:iam/policy:Policy", "p", {"policy": {"Statement": [deny, named, other, star]}})],
    )
    assert got == ["statement 'all' allows * on Resource '*': name the bucket"], got


def scope(document):
    return violations(pp.iam_s3_prefix, [resource("aws:iam/rolePolicy:RolePolicy", "p", {"policy": document})])


def test_s3_statements_scoped_to_a_prefix_pass():
    objects = {"Action": ["s3:GetObject", "s3:PutObject"], "Resource": ["arn:aws:s3:::b/run/*", "arn:aws:s3:::b"]}
    listing = {
        "Action": "s3:ListBucket",
        "Resource": "arn:aws:s3:::b",
        "Condition": {"StringLike": {"s3:prefix": ["run/*"]}},
    }
    others = [
        {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"},
        {"Action": "ec2:Describe*", "Resource": "arn:aws:s3:::b/*"},
        {"Action": "s3:GetObject", "Resource": "arn:aws:other:::b/*"},
    ]
    assert scope(doc(objects, listing, *others)) == []


def test_each_s3_statement_reaching_past_a_prefix_is_reported_by_sid():
    got = scope(
        {
            "Statement": [
                {"Effect": "Deny", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"},
                {"Sid": "o", "Action": "s3:GetObject", "Resource": ["arn:aws:s3:::b/*", "arn:aws:s3:::c/*"]},
                {"Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::b"},
                {"Sid": "e", "Action": "s3:ListBucket", "Condition": {"StringLike": {"s3:prefix": ["run/*", ""]}}},
                {"Sid": "n", "Action": "s3:ListBucket", "Condition": {"StringLike": None, "X": {"s3:prefix": "*"}}},
            ]
        }
    )
    assert got == [
        "statement 'o' reaches every key of arn:aws:s3:::b",
        "statement 'o' reaches every key of arn:aws:s3:::c",
        "statement '' lists the bucket without an s3:prefix condition naming a prefix",
        "statement 'e' lists the bucket without an s3:prefix condition naming a prefix",
        "statement 'n' lists the bucket without an s3:prefix condition naming a prefix",
    ], got


NODEGROUP = "arn:aws:eks:us-east-2:123456789012:nodegroup/c/gpu/1a2b"
RECORDS = f"arn:aws:s3:::bkt/us-east-2/{pp.IDLE_GUARD_S3_FOLDER}/*"
EKS = sorted(pp.GUARD_EKS_ACTIONS)


def guard(*statements):
    return violations(
        pp.idle_guard_least_privilege, [resource("aws:iam/rolePolicy:RolePolicy", "g", {"policy": doc(*statements)})]
    )


def test_the_guards_two_eks_actions_on_one_node_group_and_put_on_its_records_pass():
    put = {"Action": "s3:PutObject", "Resource": RECORDS}
    deny = {"Effect": "Deny", "Action": "iam:*", "Resource": "*"}
    assert guard({"Action": EKS, "Resource": NODEGROUP}, put, deny) == []
    assert guard({"Action": "eks:DescribeNodegroup", "Resource": [NODEGROUP]}) == []


def test_an_eks_statement_reaching_further_is_reported_with_what_it_allows_and_reaches():
    got = guard(
        {"Sid": "a", "Action": [*EKS, "eks:DeleteNodegroup", "s3:GetObject"], "Resource": [NODEGROUP, NODEGROUP]},
        {"Action": "*", "Resource": NODEGROUP},
    )
    assert got == [
        "statement 'a' allows ['eks:DeleteNodegroup', 's3:GetObject']: only ['eks:DescribeNodegroup', "
        "'eks:UpdateNodegroupConfig']",
        f"statement 'a' reaches {[NODEGROUP, NODEGROUP]}: name the one node group's ARN",
        "statement '' allows ['*']: only ['eks:DescribeNodegroup', 'eks:UpdateNodegroupConfig']",
    ], got


def test_a_statement_beside_the_guards_is_reported_unless_it_puts_to_the_records_folder_alone():
    got = guard(
        {"Action": EKS, "Resource": NODEGROUP},
        {"Sid": "n", "NotAction": "s3:DeleteBucket", "Resource": "*"},
        {"Sid": "g", "Action": ["s3:PutObject", "s3:GetObject"], "Resource": RECORDS},
        {"Sid": "r", "Action": "s3:PutObject", "Resource": [RECORDS, RECORDS]},
        {"Sid": "e", "Action": ["s3:PutObject"]},
        {"Action": "s3:GetObject", "Resource": RECORDS},
    )
    assert got == [
        "statement 'n' of the idle guard's role allows s3:DeleteBucket: beside the EKS actions only ['s3:PutObject']",
        "statement 'g' of the idle guard's role allows ['s3:GetObject', 's3:PutObject']: beside the EKS actions only "
        "['s3:PutObject']",
        f"statement 'r' reaches {[RECORDS, RECORDS]}: only <bucket>/<prefix>/{pp.IDLE_GUARD_S3_FOLDER}/*",
        f"statement 'e' reaches []: only <bucket>/<prefix>/{pp.IDLE_GUARD_S3_FOLDER}/*",
        "statement '' of the idle guard's role allows ['s3:GetObject']: beside the EKS actions only ['s3:PutObject']",
    ], got


def test_a_document_without_an_eks_action_is_not_the_guards():
    assert (
        guard({"Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}, {"Action": "iam:PassRole", "Resource": "*"})
        == []
    )


def trust(*statements, typ="aws:iam/role:Role"):
    return violations(pp.irsa_trust_scoped, [resource(typ, "r", {"assumeRolePolicy": doc(*statements)})])


OIDC = "oidc.eks.us-east-2.amazonaws.com/id/ABC"
SUB = "statement {}: no StringEquals :sub naming one ServiceAccount"
AUD = "statement {}: no StringEquals :aud of sts.amazonaws.com"


def web_identity(sid="t", effect="Allow", action="sts:AssumeRoleWithWebIdentity", **equals):
    st = {"Sid": sid, "Effect": effect, "Action": action}
    return st | ({"Condition": {"StringEquals": equals}} if equals else {})


def test_a_trust_pinning_one_service_account_and_the_sts_audience_passes():
    pinned = {f"{OIDC}:sub": "system:serviceaccount:ray:train", f"{OIDC}:aud": "sts.amazonaws.com"}
    assert trust(web_identity(action=["sts:TagSession", "sts:AssumeRoleWithWebIdentity"], **pinned)) == []


@pytest.mark.parametrize(
    ("equals", "expected"),
    [
        ({}, [SUB, AUD]),
        ({f"{OIDC}:sub": "system:serviceaccount:ray:*", f"{OIDC}:aud": "sts.amazonaws.com"}, [SUB]),
        ({f"{OIDC}:sub": "ray:train", f"{OIDC}:aud": "sts.amazonaws.com"}, [SUB]),
        ({f"{OIDC}:sub": "system:serviceaccount:ray:train", f"{OIDC}:aud": "other"}, [AUD]),
        ({f"{OIDC}:sub": "system:serviceaccount:ray:train", f"{OIDC}:aud": ["sts.amazonaws.com"]}, [AUD]),
        ({f"{OIDC}:sub": "system:serviceaccount:ray:train", f"{OIDC}:sub:x": "y"}, [AUD]),
        (
            {
                f"{OIDC}:sub": "system:serviceaccount:ray:a",
                "x:sub": "system:serviceaccount:ray:b",
                "y:aud": "sts.amazonaws.com",
            },
            [SUB],
        ),
        ({f"{OIDC}:aud": "sts.amazonaws.com", "x:aud": "sts.amazonaws.com"}, [SUB, AUD]),
    ],
    ids=["none", "wildcard", "not-a-service-account", "other-aud", "aud-list", "sub-only", "two-subs", "two-auds"],
)
def test_a_web_identity_trust_missing_its_sub_or_aud_is_reported_by_sid(equals, expected):
    got = trust(web_identity(**equals))
    assert got == [e.format("'t'") for e in expected], got


def test_only_allowed_web_identity_statements_of_a_role_are_judged():
    like = {
        "Effect": "Allow",
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringLike": {f"{OIDC}:sub": "x"}},
    }
    got = trust(web_identity(effect="Deny"), web_identity(action="sts:AssumeRole"), like)
    assert got == [SUB.format("''"), AUD.format("''")], got
    assert trust(web_identity(), typ="aws:iam/policy:Policy") == []


# --------------------------------------------------------------------------- cost (advisory)


def endpoint(typ="Gateway", service="com.amazonaws.us-east-2.s3"):
    return resource(pp.VPC_ENDPOINT, f"{typ}-{service}", {"vpcEndpointType": typ, "serviceName": service})


NAT = resource(pp.NAT_GATEWAY, "nat", {})
NO_ENDPOINT = ("a NAT gateway but no S3 gateway endpoint: S3 traffic pays the NAT's per-GB charge", None)


def test_a_nat_gateway_is_advised_an_s3_gateway_endpoint_and_without_one_nothing_is():
    assert reports(pp.s3_gateway_endpoint, [NAT, endpoint("Interface"), endpoint()]) == []
    assert reports(pp.s3_gateway_endpoint, [endpoint("Interface")]) == []
    others = [NAT, endpoint("Interface"), endpoint(service="com.amazonaws.us-east-2.dynamodb"), endpoint(service=None)]
    assert reports(pp.s3_gateway_endpoint, others) == [NO_ENDPOINT]


def test_a_trust_or_a_guard_document_handed_as_an_object_is_judged_as_its_json_would_be():
    trust_doc = {"Statement": [web_identity()]}
    guard_doc = {"Statement": [{"Sid": "a", "Action": ["eks:*"], "Resource": NODEGROUP}]}
    role = resource("aws:iam/role:Role", "r", {"assumeRolePolicy": trust_doc})
    guard_policy = resource("aws:iam/rolePolicy:RolePolicy", "g", {"policy": guard_doc})
    got = (violations(pp.irsa_trust_scoped, [role]), violations(pp.idle_guard_least_privilege, [guard_policy]))
    expected = (
        [SUB.format("'t'"), AUD.format("'t'")],
        ["statement 'a' allows ['eks:*']: only ['eks:DescribeNodegroup', 'eks:UpdateNodegroupConfig']"],
    )
    assert got == expected, got


def test_a_web_identity_statement_without_an_effect_is_an_allow_and_judged():
    st = {"Sid": "t", "Action": "sts:AssumeRoleWithWebIdentity"}
    assert trust(st) == [SUB.format("'t'"), AUD.format("'t'")], trust(st)
