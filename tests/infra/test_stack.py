"""The Pulumi program under Pulumi's mock engine (preview=False): every EFA-relevant setting
as the engine would receive it, for both example stacks and for config variants."""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import json
import warnings

import pulumi
import pytest
from conftest import REPO, quiet_stack

from automation.steps.verify_checks import untolerated_taints
from infra import mock_render
from infra.config import (
    MOCK_DEPLOYER_CIDR,
    PROJECT,
    ConfigWarning,
    StackConfigError,
    from_pulumi_config,
    stack_config_values,
)
from infra.efa_nodegroup import gpu_hugepages_2mi
from infra.manifests import cached_image, gpu_node_user_data, image_cache_prefix, raycluster_spec, registry_host
from infra.mock_render import Render, RenderMocks, run_program
from infra.stack import OUTPUT_NAMES

STACKS = ("us-east-2", "us-west-2")

SG_RULE_TYPES = (
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:ec2/securityGroupRule:SecurityGroupRule",
)


def render(stack: str, **overrides) -> Render:
    """Run the program for ``stack`` with config ``overrides`` (our keys, unprefixed)."""
    values = stack_config_values(stack, REPO)
    values.update({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    return run_program(stack, REPO, config=values)


@pytest.fixture(scope="module", params=STACKS)
def rendered(request) -> tuple[str, Render]:
    return request.param, render(request.param)


@pytest.fixture(scope="module")
def east() -> Render:
    return render("us-east-2")


def one(r: Render, typ: str, name_part: str = ""):
    found = [x for x in r.records if x.type == typ and name_part in x.name]
    assert len(found) == 1, f"expected one {typ} named *{name_part}*, got {[x.name for x in found]}"
    return found[0]


def every(r: Render, typ: str):
    return [x for x in r.records if x.type == typ]


def rid(record) -> str:
    """The id the mock gives a resource (RenderMocks: '<name>-id')."""
    return f"{record.name}-id"


def ints(value):
    """Mock inputs carry numbers as floats; compare them with the ints the builders produce."""
    if isinstance(value, dict):
        return {k: ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ints(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# --------------------------------------------------------------------------- whole stacks


def test_both_example_stacks_render_with_every_output(rendered):
    stack, r = rendered
    assert tuple(r.outputs) == OUTPUT_NAMES, f"outputs {tuple(r.outputs)}"
    cfg = quiet_stack(stack)
    assert (r.outputs["region"], r.outputs["gpu_az"]) == (stack, cfg.gpu_nodes.availability_zone)
    assert (r.outputs["raycluster_name"], r.outputs["raycluster_namespace"], r.outputs["head_service_name"]) == (
        "ray-efa",
        "ray",
        "ray-efa-head-svc",
    )


def test_kubeconfig_output_is_secret(rendered):
    _, r = rendered
    assert r.secret_outputs == ("kubeconfig",), f"secret outputs: {r.secret_outputs}"


def test_program_config_equals_offline_config():
    """load_stack and the in-program pulumi.Config path go through the same validation."""

    def in_program():
        pulumi.runtime.set_all_config(stack_config_values("us-east-2", REPO), [])
        pulumi.runtime.set_mocks(RenderMocks(), project=PROJECT, stack="us-east-2", preview=False)
        return from_pulumi_config(REPO)

    offline = quiet_stack("us-east-2")  # the driver writes an address into the stack; the mocks hold the stand-in
    filled = dataclasses.replace(offline.cluster, public_access_cidrs=(MOCK_DEPLOYER_CIDR,))
    assert contextvars.Context().run(in_program) == dataclasses.replace(offline, cluster=filled)


def test_bad_config_fails_the_program_with_the_config_error():
    with pytest.raises(StackConfigError, match="set rayWorkerGpus to 4"):
        render("us-west-2", rayWorkerGpus="8")


# --------------------------------------------------------------------------- network


def test_private_subnets_span_at_least_two_azs(rendered):
    stack, r = rendered
    private = [x for x in every(r, "aws:ec2/subnet:Subnet") if "-private-" in x.name]
    azs = sorted(x.inputs["availabilityZone"] for x in private)
    assert len(azs) >= 2 and azs == sorted(quiet_stack(stack).network.azs), f"private subnet AZs {azs}"
    assert all(x.inputs["tags"].get("kubernetes.io/role/internal-elb") == "1" for x in private)


def test_public_subnets_only_hold_the_nat_gateway(east):
    public_ids = {rid(x) for x in every(east, "aws:ec2/subnet:Subnet") if "-public-" in x.name}
    assert all(x.inputs["mapPublicIpOnLaunch"] is False for x in every(east, "aws:ec2/subnet:Subnet"))
    assert one(east, "aws:ec2/natGateway:NatGateway").inputs["subnetId"] in public_ids
    nodegroup_subnets = {s for ng in every(east, "aws:eks/nodeGroup:NodeGroup") for s in ng.inputs["subnetIds"]}
    assert not nodegroup_subnets & public_ids, "a node group uses a public subnet"


def test_private_route_goes_through_the_nat(east):
    route = one(east, "aws:ec2/route:Route", "private-default")
    assert (route.inputs["destinationCidrBlock"], route.inputs.get("natGatewayId")) == (
        "0.0.0.0/0",
        rid(one(east, "aws:ec2/natGateway:NatGateway")),
    )


# --------------------------------------------------------------------------- cluster


def test_eks_cluster_security_settings(east):
    c = one(east, "eks:index:Cluster").inputs
    private_ids = [rid(x) for x in every(east, "aws:ec2/subnet:Subnet") if "-private-" in x.name]
    got = {
        "private": sorted(c["privateSubnetIds"]),
        "public_subnets": c.get("publicSubnetIds"),
        "kms": c["encryptionConfigKeyArn"],
        "oidc": c["createOidcProvider"],
        "private_endpoint": c["endpointPrivateAccess"],
        "logs": c["enabledClusterLogTypes"],
        "node_public_ip": c["nodeAssociatePublicIpAddress"],
    }
    assert got == {
        "private": sorted(private_ids),
        "public_subnets": None,
        "kms": f"arn:aws:render::123456789012:{one(east, 'aws:kms/key:Key').name}",
        "oidc": True,
        "private_endpoint": True,
        "logs": ["api", "audit", "authenticator"],
        "node_public_ip": False,
    }


def test_vpc_cni_add_on_is_pinned_to_the_stack_key(east):
    chosen = render("us-west-2", vpcCniVersion="v1.21.1-eksbuild.7")
    got = tuple(one(r, "eks:index:Cluster").inputs.get("vpcCniOptions", {}).get("addonVersion") for r in (east, chosen))
    assert got == ("v1.22.4-eksbuild.3", "v1.21.1-eksbuild.7"), f"vpc-cni addonVersion (default, key set): {got}"


def test_kube_proxy_add_on_is_pinned_to_the_stack_key(east):
    chosen = render("us-west-2", kubeProxyVersion="v1.36.0-eksbuild.25")
    got = tuple(
        one(r, "eks:index:Cluster").inputs.get("kubeProxyAddonOptions", {}).get("version") for r in (east, chosen)
    )
    assert got == ("v1.36.0-eksbuild.21", "v1.36.0-eksbuild.25"), f"kube-proxy add-on versions {got}"


def test_coredns_is_an_eks_add_on_pinned_to_the_stack_key(east):
    chosen = render("us-west-2", corednsVersion="v1.13.2-eksbuild.21")
    got = tuple(
        (a.inputs["addonName"], a.inputs["addonVersion"])
        for a in (one(r, "aws:eks/addon:Addon", "coredns") for r in (east, chosen))
    )
    assert got == (("coredns", "v1.14.3-eksbuild.14"), ("coredns", "v1.13.2-eksbuild.21")), f"coredns add-on {got}"


def test_coredns_add_on_waits_for_the_system_node_group(east):
    addon = one(east, "aws:eks/addon:Addon", "coredns")
    system = one(east, "aws:eks/nodeGroup:NodeGroup", "system").name
    assert system in addon.depends_on, f"expected the add-on to wait for {system}, it waits for {addon.depends_on}"


def test_gpu_node_group_has_node_auto_repair_on(east):
    got = one(east, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs.get("nodeRepairConfig")
    assert got == {"enabled": True}, f"expected nodeRepairConfig {{'enabled': True}}, got {got}"


def test_node_monitoring_agent_is_an_eks_add_on_pinned_to_the_stack_key(east):
    chosen = render("us-west-2", nodeMonitoringAgentVersion="v1.6.7-eksbuild.1")
    got = tuple(
        (a.inputs["addonName"], a.inputs["addonVersion"])
        for a in (one(r, "aws:eks/addon:Addon", "node-monitoring-agent") for r in (east, chosen))
    )
    expected = (("eks-node-monitoring-agent", "v1.7.0-eksbuild.1"), ("eks-node-monitoring-agent", "v1.6.7-eksbuild.1"))
    assert got == expected, f"node monitoring agent add-on {got}"


def test_node_monitoring_agents_gpu_health_engine_tolerates_the_gpu_nodes_taint(east):
    """The add-on's dcgm-server tolerates no taint by default (the agent's chart, values.yaml at v1.7.0)."""
    values = json.loads(one(east, "aws:eks/addon:Addon", "node-monitoring-agent").inputs["configurationValues"])
    taints = one(east, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs["taints"]
    # The node group's taints in EKS's spelling (NO_SCHEDULE) as the node shows them (NoSchedule).
    node = {"spec": {"taints": [{**t, "effect": t["effect"].title().replace("_", "")} for t in taints]}}
    left = untolerated_taints(values["dcgmAgent"], node)
    assert left == [], f"expected dcgm-server to tolerate every GPU node taint, it does not tolerate {left}"


def test_public_endpoint_defaults_to_the_deployers_address(east):
    got = one(east, "eks:index:Cluster").inputs["publicAccessCidrs"]
    assert got == [MOCK_DEPLOYER_CIDR], f"expected the driver's address stand-in, got {got}"


def test_private_only_endpoint_has_no_public_access():
    c = one(render("us-west-2", apiPublicAccess="false"), "eks:index:Cluster").inputs
    assert (c["endpointPublicAccess"], c.get("publicAccessCidrs")) == (False, None)


def test_public_endpoint_is_limited_to_the_allow_list():
    c = one(render("us-west-2", apiPublicAccessCidrs='["203.0.113.7/32"]'), "eks:index:Cluster").inputs
    assert (c["endpointPublicAccess"], c["publicAccessCidrs"]) == (True, ["203.0.113.7/32"])


def test_system_node_group_is_one_labelled_m7i(east):
    ng = one(east, "aws:eks/nodeGroup:NodeGroup", "system").inputs
    got = (ng["instanceTypes"], ints(ng["scalingConfig"]), ng["labels"])
    assert got == (["m7i.xlarge"], {"desiredSize": 1, "minSize": 1, "maxSize": 1}, {"role": "system"})


def test_kubernetes_provider_gets_the_kubeconfig(east):
    provider = one(east, "pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.inputs, "provider registered without a kubeconfig (would target ~/.kube/config)"
    k8s_records = [x for x in east.records if x.type.startswith("kubernetes:")]
    strays = [x.name for x in k8s_records if x.provider != provider.name]
    assert k8s_records and not strays, f"Kubernetes resources not on the cluster's provider: {strays}"


# --------------------------------------------------------------------------- EFA node group


def test_launch_template_uses_the_placement_group(east):
    pg = one(east, "aws:ec2/placementGroup:PlacementGroup")
    lt = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs
    assert lt["placement"] == {"groupName": pg.name}


def test_multi_card_instance_gets_an_interface_per_card():
    r = render(
        "us-west-2",
        gpuInstanceType="p5.48xlarge",
        gpuEfaInterfaces="32",
        rayWorkerGpus="8",
        rayWorkerEfa="32",
    )
    nics = ints(one(r, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["networkInterfaces"])
    got = [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics]
    assert got == [(0, 0, "efa")] + [(card, 1, "efa-only") for card in range(1, 32)]


def test_efa_interfaces_carry_efa_and_cluster_security_groups_and_no_subnet(east):
    efa_sg = one(east, "aws:ec2/securityGroup:SecurityGroup", "efa")
    nics = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["networkInterfaces"]
    for nic in nics:
        assert sorted(nic["securityGroups"]) == sorted([rid(efa_sg), "sg-render-cluster"]), (
            f"groups {nic['securityGroups']}"
        )
        assert not nic.get("subnetId"), "the launch template must not pin a subnet"


def test_launch_template_encrypts_the_root_volume(east):
    lt = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs
    assert [b["ebs"]["encrypted"] for b in lt["blockDeviceMappings"]] == ["true"]


def test_no_security_group_rule_is_open_to_the_internet(rendered):
    _, r = rendered
    open_rules = [
        x.name
        for x in r.records
        if x.type in SG_RULE_TYPES
        and (
            x.inputs.get("cidrIpv4") == "0.0.0.0/0"
            or x.inputs.get("cidrIpv6") == "::/0"
            or "0.0.0.0/0" in x.inputs.get("cidrBlocks", [])
        )
    ]
    inline = [
        x.name
        for x in every(r, "aws:ec2/securityGroup:SecurityGroup")
        for rule in x.inputs.get("ingress", []) + x.inputs.get("egress", [])
        if "0.0.0.0/0" in rule.get("cidrBlocks", [])
    ]
    assert not open_rules and not inline, f"rules open to 0.0.0.0/0: {open_rules + inline}"


def test_gpu_node_group_is_pinned_to_the_private_subnet_of_the_gpu_az(rendered):
    stack, r = rendered
    gpu_az = quiet_stack(stack).gpu_nodes.availability_zone
    subnet = one(r, "aws:ec2/subnet:Subnet", f"private-{gpu_az}")
    ng = one(r, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs
    assert ng["subnetIds"] == [rid(subnet)], f"expected [{rid(subnet)}], got {ng['subnetIds']}"


def test_gpu_node_group_size_labels_taints_and_ami(east):
    ng = one(east, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs
    lt = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    got = {
        "size": ints(ng["scalingConfig"]),
        "labels": ng["labels"],
        "taints": ng["taints"],
        "ami": ng["amiType"],
        "types": ng["instanceTypes"],
        "lt": ng["launchTemplate"]["id"],
    }
    assert got == {
        "size": {"desiredSize": 2, "minSize": 0, "maxSize": 2},
        "labels": {"role": "gpu-worker", "nvidia.com/gpu.present": "true"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
        "ami": "AL2023_x86_64_NVIDIA",
        "types": ["g6.12xlarge"],
        "lt": rid(lt),
    }


def test_up_leaves_the_gpu_desired_size_to_the_driver(east):
    ng = one(east, "aws:eks/nodeGroup:NodeGroup", "gpu-ng")
    assert ng.ignore_changes == ("scalingConfig.desiredSize",), f"expected desiredSize ignored, got {ng.ignore_changes}"


def test_capacity_reservation_goes_into_the_launch_template(east):
    assert "capacityReservationSpecification" not in one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs
    r = render("us-east-2", gpuCapacityReservationId="cr-0123456789abcdef0")
    spec = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["capacityReservationSpecification"]
    assert spec == {"capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}}


def test_single_gpu_node_renders_with_one_worker():
    r = render("us-west-2", gpuNodeCount="1")
    ng = ints(one(r, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs["scalingConfig"])
    workers = ints(one(r, "kubernetes:ray.io/v1:RayCluster").inputs["spec"]["workerGroupSpecs"][0])
    assert (ng["desiredSize"], workers["replicas"]) == (1, 1)


# --------------------------------------------------------------------------- Helm and Ray


def test_helm_charts_are_pinned(east):
    got = {
        x.inputs["chart"]: (x.inputs["version"], x.inputs["repositoryOpts"]["repo"])
        for x in every(east, "kubernetes:helm.sh/v3:Release")
    }
    assert got == {
        "nvidia-device-plugin": ("0.20.0", "https://nvidia.github.io/k8s-device-plugin"),
        "aws-efa-k8s-device-plugin": ("v0.5.30", "https://aws.github.io/eks-charts"),
        "kuberay-operator": ("1.5.2", "https://ray-project.github.io/kuberay-helm/"),
    }


def test_helm_releases_land_on_the_right_nodes(east):
    got = {x.inputs["chart"]: x.inputs["values"]["nodeSelector"] for x in every(east, "kubernetes:helm.sh/v3:Release")}
    assert got == {
        "nvidia-device-plugin": {"role": "gpu-worker"},
        "aws-efa-k8s-device-plugin": {"role": "gpu-worker"},
        "kuberay-operator": {"role": "system"},
    }


def test_raycluster_resource_carries_the_built_spec(east):
    rc = one(east, "kubernetes:ray.io/v1:RayCluster").inputs
    cfg = quiet_stack("us-east-2")
    assert (rc["apiVersion"], rc["kind"], rc["metadata"]["name"]) == ("ray.io/v1", "RayCluster", cfg.ray.cluster_name)
    # imageCache (default true): the spec's image is the Ray image through the stack's cache rule (mock account).
    host = registry_host("123456789012", cfg.region)
    image = cached_image(cfg.ray.image, host, image_cache_prefix(cfg.cluster.name, cfg.stack))
    want = raycluster_spec(dataclasses.replace(cfg.ray, image=image))
    assert ints(rc["spec"]) == want, "the engine did not receive the spec manifests.py built"


def test_counter_reader_runs_the_workers_image_so_it_adds_no_pull(east):
    reader = one(east, "kubernetes:apps/v1:DaemonSet", "efa-counter-reader").inputs
    rc = one(east, "kubernetes:ray.io/v1:RayCluster").inputs
    got = reader["spec"]["template"]["spec"]["containers"][0]["image"]
    want = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"]
    assert got == want, f"reader image {got}, worker image {want}"


@pytest.mark.parametrize("stack", STACKS)
def test_ray_containers_get_the_region_of_their_stack(stack):
    spec = one(render(stack), "kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    pods = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    regions = [
        {e["name"]: e["value"] for e in c["env"]}.get("AWS_REGION")
        for g in pods
        for c in g["template"]["spec"]["containers"]
    ]
    assert regions == [stack] * len(regions), f"expected AWS_REGION {stack} on every container, got {regions}"


def test_worker_hugepages_key_off_reaches_the_raycluster():
    spec = one(render("us-east-2", rayWorkerHugepages="false"), "kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    limits = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "hugepages-2Mi" not in limits, f"expected no hugepages-2Mi limit, got {limits}"


def test_raycluster_env_and_cluster_ip(east):
    spec = one(east, "kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    env = {e["name"]: e["value"] for e in spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]}
    assert {k: env.get(k) for k in ("FI_PROVIDER", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG")} == {
        "FI_PROVIDER": "efa",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
    }
    assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"


def test_no_kubernetes_object_exposes_a_port_outside_the_cluster(east):
    exposed = [
        x.name
        for x in east.records
        if x.type.startswith("kubernetes:")
        and any(t in repr(x.inputs) for t in ("LoadBalancer", "NodePort", "hostPort"))
    ]
    assert not exposed, f"objects exposing ports: {exposed}"


def test_empty_gpu_az_fails_the_program_naming_preflight_and_the_key():
    with pytest.raises(StackConfigError) as err:
        render("us-west-2", gpuAvailabilityZone="")
    text = str(err.value)
    for expected in ("python -m automation preflight --stack us-west-2", "ray-efa-eks:gpuAvailabilityZone"):
        assert expected in text, f"expected {expected!r} in {text!r}"


# --------------------------------------------------------------------------- issue 18: AWS truth


def test_nat_gateway_sits_in_the_first_network_az_not_the_gpu_az(east):
    subnet_az = {rid(x): x.inputs["availabilityZone"] for x in every(east, "aws:ec2/subnet:Subnet")}
    nat_az = subnet_az.get(one(east, "aws:ec2/natGateway:NatGateway").inputs["subnetId"])
    assert nat_az == quiet_stack("us-east-2").network.azs[0] == "us-east-2a", f"NAT in {nat_az}"


def test_s3_gateway_endpoint_is_on_the_private_route_table(east):
    ep = one(east, "aws:ec2/vpcEndpoint:VpcEndpoint", "s3").inputs
    got = (ep["serviceName"], ep["vpcEndpointType"], ep["routeTableIds"])
    assert got == (
        "com.amazonaws.us-east-2.s3",
        "Gateway",
        [rid(one(east, "aws:ec2/routeTable:RouteTable", "private"))],
    )


P5_BLOCK = {
    "gpuInstanceType": "p5.48xlarge",
    "gpuEfaInterfaces": "32",
    "rayWorkerEfa": "32",
    "rayWorkerGpus": "8",
    "gpuCapacityReservationId": "cr-0123456789abcdef0",
    "gpuCapacityBlock": "true",
}


@pytest.fixture(scope="module")
def capacity_block() -> Render:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return render("us-east-2", **P5_BLOCK)


def test_capacity_block_reaches_launch_template_and_node_group(capacity_block):
    market = one(capacity_block, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs.get("instanceMarketOptions")
    capacity_type = one(capacity_block, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs["capacityType"]
    assert (market, capacity_type) == ({"marketType": "capacity-block"}, "CAPACITY_BLOCK"), (market, capacity_type)


def test_capacity_block_type_is_in_the_launch_template_and_not_on_the_node_group(capacity_block):
    lt_type = one(capacity_block, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs.get("instanceType")
    ng_types = one(capacity_block, "aws:eks/nodeGroup:NodeGroup", "gpu-ng").inputs.get("instanceTypes")
    assert (lt_type, ng_types) == ("p5.48xlarge", None), f"launch template type {lt_type}, node group types {ng_types}"


def test_capacity_block_on_g6_stops_the_program_with_the_fix():
    with pytest.raises(StackConfigError, match="set gpuCapacityBlock to false"):
        render("us-east-2", gpuCapacityReservationId="cr-0123456789abcdef0", gpuCapacityBlock="true")


def test_gpu_launch_template_carries_the_huge_page_user_data(east):
    encoded = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs.get("userData", "")
    want = gpu_node_user_data(gpu_hugepages_2mi("g6.12xlarge"))
    assert base64.b64decode(encoded).decode() == want, "the GPU launch template lacks the user data"


def test_system_launch_template_reserves_no_huge_pages(east):
    user_data = one(east, "aws:ec2/launchTemplate:LaunchTemplate", "system-lt").inputs.get("userData")
    assert user_data is None, f"expected no user data on the system nodes, got {user_data!r}"


def test_existing_placement_group_is_used_and_none_is_created():
    r = render("us-east-2", gpuPlacementGroupName="reserved-pg")
    placement = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["placement"]
    created = [x.name for x in every(r, "aws:ec2/placementGroup:PlacementGroup")]
    assert (placement, created) == ({"groupName": "reserved-pg"}, []), f"placement {placement}, created {created}"


def test_system_root_volume_follows_its_key():
    r = render("us-east-2", systemRootVolumeGib="150")
    sizes = [
        b["ebs"]["volumeSize"]
        for b in one(r, "aws:ec2/launchTemplate:LaunchTemplate", "system-lt").inputs["blockDeviceMappings"]
    ]
    assert sizes == [150], f"system root volume sizes {sizes}"


def test_admin_role_gets_an_access_entry_and_the_cluster_admin_policy():
    arn = "arn:aws:iam::123456789012:role/ci"
    r = render("us-east-2", clusterAdminRoleArns=f'["{arn}"]')
    entry = one(r, "aws:eks/accessEntry:AccessEntry").inputs
    assoc = one(r, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation").inputs
    got = (entry["principalArn"], assoc["policyArn"], assoc["accessScope"])
    assert got == (
        arn,
        "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
        {"type": "cluster"},
    ), f"admin access {got}"


def test_no_admin_roles_means_no_access_entries(east):
    assert every(east, "aws:eks/accessEntry:AccessEntry") == [], "access entries without clusterAdminRoleArns"


def test_resources_naming_the_cluster_take_the_eks_cluster_output_name(monkeypatch):
    """The name comes from pulumi-eks's ``eksCluster`` output, not from the config: the mock's
    inner cluster reports a name the config never set, and every consumer must carry it."""
    inner = mock_render._inner_eks_cluster
    monkeypatch.setattr(mock_render, "_inner_eks_cluster", lambda component, _name: inner(component, "from-eks"))
    r = render("us-east-2", clusterAdminRoleArns='["arn:aws:iam::123456789012:role/ci"]')
    consumers = (
        "aws:eks/nodeGroup:NodeGroup",
        "aws:eks/addon:Addon",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "aws:eks/accessEntry:AccessEntry",
        "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
    )
    got = {(x.type, x.name, x.inputs.get("clusterName")) for x in r.records if x.type in consumers}
    assert {t for t, _, _ in got} == set(consumers), f"expected each of {consumers}, got {sorted(got)}"
    wrong = sorted((n, c) for _, n, c in got if c != "from-eks")
    assert wrong == [], f"expected clusterName 'from-eks' (the eksCluster output) everywhere, got {wrong}"
