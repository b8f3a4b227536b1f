"""preflight against moto (EC2, STS) and botocore's Stubber (Service Quotas, capacity
reservations and EKS add-on versions, which moto 5.2.5 does not model)."""

from __future__ import annotations

import dataclasses
from typing import Any

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import _worlds as worlds
import boto3
import pytest
from _shared_env import MOTO_REGION
from botocore.stub import Stubber

from automation.pipeline import PreflightFacts
from automation.steps.preflight import (
    AwsClients,
    check_addon_version,
    check_aws_cli,
    check_capacity_reservation,
    run_preflight,
)
from infra.config import ClusterConfig, GpuNodesConfig

REGION = MOTO_REGION


pytestmark = pytest.mark.usefixtures("moto_aws")


def gpu(reservation_id: str, **change: Any) -> GpuNodesConfig:
    """The GPU node group a reservation row is checked against: 2 x g6.12xlarge unless ``change`` says otherwise."""
    fields = {"instance_type": "g6.12xlarge", "node_count": 2, **change}
    return GpuNodesConfig(**fields, capacity_reservation_id=reservation_id)


def config(instance_type="g6.12xlarge", az="us-west-2a", azs=("us-west-2a", "us-west-2b"), gpus=4, reservation=None):
    cfg = helpers.stack_config("us-west-2")
    return dataclasses.replace(
        cfg,
        network=dataclasses.replace(cfg.network, azs=tuple(azs)),
        gpu_nodes=dataclasses.replace(
            cfg.gpu_nodes,
            instance_type=instance_type,
            availability_zone=az,
            gpus_per_node=gpus,
            capacity_reservation_id=reservation,
        ),
    )


def quotas_client(value: float, code: str = "L-DB2E81BA", standard: float = 64):
    """Service Quotas answering the GPU family's quota, then the Standard one (the system node's)."""
    client = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(client)
    for quota_code, quota_value in ((code, value), ("L-1216C47A", standard)):
        stub.add_response(
            "get_service_quota",
            {
                "Quota": {
                    "ServiceCode": "ec2",
                    "QuotaCode": quota_code,
                    "QuotaName": "Running On-Demand instances",
                    "Value": quota_value,
                    "Unit": "None",
                }
            },
            {"ServiceCode": "ec2", "QuotaCode": quota_code},
        )
    stub.activate()
    return client


def clients(quota: float = 1000, standard: float = 64) -> AwsClients:
    return AwsClients(
        sts=boto3.client("sts", region_name=REGION),
        ec2=boto3.client("ec2", region_name=REGION),
        quotas=quotas_client(quota, standard=standard),
    )


def cli_on_path(name: str) -> str | None:
    return f"/usr/local/bin/{name}"


def run(cfg, aws_clients):
    """run_preflight with the AWS CLI found, so the other rows decide the result."""
    return run_preflight(cfg, aws_clients, which=cli_on_path)


def rows(result):
    return {f.check: f for f in result.findings}


def test_stack_defaults_pass_with_room_in_the_quota():
    result = run(config(), clients(quota=192))
    failed = {k: f.detail for k, f in rows(result).items() if f.status == "fail"}
    assert result.status == "pass", f"expected pass, got failures {failed}"
    assert result.data.gpu_az == "us-west-2a", f"expected the configured AZ us-west-2a, got {result.data.gpu_az}"


def test_quota_short_fails_with_the_increase_request():
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g6.12xlarge")  # 48 vCPUs in use
    result = run(config(), AwsClients(sts=boto3.client("sts"), ec2=ec2, quotas=quotas_client(96)))
    row = rows(result)["vCPU quota L-DB2E81BA"]
    assert row.status == "fail", f"expected the quota row to fail (96 - 48 < 96), got {row}"
    expected_fix = (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
        "--desired-value 144 --region us-west-2"
    )
    assert row.fix == expected_fix, f"expected fix {expected_fix!r}, got {row.fix!r}"


def test_type_not_offered_in_the_configured_az_fails_with_valid_azs():
    # moto offers g5.12xlarge in us-west-2a/b/c, not in us-west-2d.
    result = run(config("g5.12xlarge", az="us-west-2d", azs=("us-west-2c", "us-west-2d")), clients())
    row = rows(result)["GPU availability zone"]
    assert row.status == "fail" and "valid AZs: us-west-2c" in row.detail, (
        f"expected a failure listing us-west-2c, got {row}"
    )


def test_az_outside_the_stack_subnets_fails():
    result = run(config(az="us-west-2c", azs=("us-west-2a", "us-west-2b")), clients())
    row = rows(result)["GPU availability zone"]
    assert row.status == "fail" and "valid AZs: us-west-2a, us-west-2b" in row.detail, f"got {row}"


def test_type_offered_in_no_stack_az_fails():
    # moto offers p5e.48xlarge only in us-west-2c.
    result = run(config("p5e.48xlarge", az="us-west-2a", gpus=8), clients())
    row = rows(result)["GPU availability zone"]
    assert row.status == "fail" and "private subnets are in ['us-west-2a', 'us-west-2b']" in row.detail, f"got {row}"


def test_open_az_is_chosen_among_valid_ones():
    result = run(config(az=""), clients())
    assert result.data.gpu_az == "us-west-2a", f"expected us-west-2a chosen, got {result.data.gpu_az}"


def test_instance_type_without_efa_fails():
    result = run(config("g5.xlarge", gpus=1), clients())
    row = rows(result)["EFA support"]
    assert row.status == "fail" and "does not support EFA" in row.detail, f"got {row}"


def test_unknown_instance_type_fails():
    result = run(config("g99.huge"), clients())
    row = rows(result)["instance type"]
    assert row.status == "fail" and "g99.huge does not exist in us-west-2" in row.detail, f"got {row}"


def reservation_client(reservation: dict):
    client = boto3.client("ec2", region_name=REGION)
    stub = Stubber(client)
    stub.add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [reservation]},
        {"CapacityReservationIds": [reservation["CapacityReservationId"]]},
    )
    stub.activate()
    return client


RESERVATION = {
    "CapacityReservationId": "cr-0123456789abcdef0",
    "InstanceType": "g6.12xlarge",
    "InstancePlatform": "Linux/UNIX",
    "AvailabilityZone": "us-west-2a",
    "TotalInstanceCount": 2,
    "AvailableInstanceCount": 2,
    "State": "active",
}


def test_active_matching_reservation_passes():
    row = check_capacity_reservation(
        reservation_client(RESERVATION), gpu(RESERVATION["CapacityReservationId"]), "us-west-2a", REGION
    )
    assert row.status == "pass", f"got {row}"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"State": "expired"}, "state is expired"),
        ({"InstanceType": "g6.48xlarge"}, "reserves g6.48xlarge"),
        ({"AvailabilityZone": "us-west-2b"}, "not the GPU AZ us-west-2a"),
        ({"AvailableInstanceCount": 1}, "1 of 2 instances available, 2 needed"),
    ],
)
def test_unusable_reservation_fails(change, words):
    cr = {**RESERVATION, **change}
    row = check_capacity_reservation(reservation_client(cr), gpu(cr["CapacityReservationId"]), "us-west-2a", REGION)
    assert row.status == "fail" and words in row.detail, f"expected {words!r} in a failing row, got {row}"


# --------------------------------------------------------------------------- issue 18: AWS truth


def test_missing_aws_cli_fails_with_the_install_fix():
    row = check_aws_cli(which=lambda name: None)
    assert (row.status, "aws eks get-token" in row.detail, "aws --version" in row.fix) == ("fail", True, True), row


def test_aws_cli_on_path_passes_and_names_its_path():
    row = check_aws_cli(which=cli_on_path)
    assert (row.status, row.detail.startswith("/usr/local/bin/aws")) == ("pass", True), row


def test_preflight_reports_the_aws_cli_row():
    result = run_preflight(config(), clients(), which=lambda name: None)
    row = rows(result).get("AWS CLI")
    assert row is not None and row.status == "fail" and result.status == "fail", f"AWS CLI row {row}"


def test_system_node_quota_short_fails_with_the_standard_quota_increase():
    result = run(config(), clients(standard=2))
    row = rows(result)["vCPU quota L-1216C47A"]
    assert row.status == "fail" and "--quota-code L-1216C47A" in row.fix, (
        f"expected the Standard quota to fail, got {row}"
    )


@pytest.mark.parametrize(
    "rtype, block, words",
    [
        ("default", False, "an On-Demand Capacity Reservation (default), active"),
        ("capacity-block", True, "a Capacity Block for ML, active"),
    ],
)
def test_reservation_of_the_declared_kind_passes_and_says_which(rtype, block, words):
    cr = {**RESERVATION, "ReservationType": rtype}
    row = check_capacity_reservation(
        reservation_client(cr), gpu(cr["CapacityReservationId"], capacity_block=block), "us-west-2a", REGION
    )
    assert row.status == "pass" and words in row.detail, f"expected {words!r} in a passing row, got {row}"


def test_capacity_block_without_gpu_capacity_block_fails_with_the_key():
    cr = {**RESERVATION, "ReservationType": "capacity-block"}
    row = check_capacity_reservation(
        reservation_client(cr), gpu(cr["CapacityReservationId"], capacity_block=False), "us-west-2a", REGION
    )
    assert row.status == "fail" and "set ray-efa-eks:gpuCapacityBlock to true" in row.detail, f"got {row}"


def test_on_demand_reservation_declared_as_capacity_block_fails():
    cr = {**RESERVATION, "ReservationType": "default"}
    row = check_capacity_reservation(
        reservation_client(cr), gpu(cr["CapacityReservationId"], capacity_block=True), "us-west-2a", REGION
    )
    assert row.status == "fail" and "set ray-efa-eks:gpuCapacityBlock to false" in row.detail, f"got {row}"


PG_ARN = "arn:aws:ec2:us-west-2:123456789012:placement-group/reserved-pg"


def test_reservation_for_another_placement_group_fails_with_its_name():
    cr = {**RESERVATION, "PlacementGroupArn": PG_ARN}
    row = check_capacity_reservation(
        reservation_client(cr), gpu(cr["CapacityReservationId"], capacity_block=False), "us-west-2a", REGION
    )
    assert row.status == "fail" and "set ray-efa-eks:gpuPlacementGroupName to reserved-pg" in row.detail, row


def test_reservation_for_the_configured_placement_group_passes():
    cr = {**RESERVATION, "PlacementGroupArn": PG_ARN}
    row = check_capacity_reservation(
        reservation_client(cr),
        gpu(cr["CapacityReservationId"], capacity_block=False, placement_group_name="reserved-pg"),
        "us-west-2a",
        REGION,
    )
    assert row.status == "pass", f"got {row}"


def addon_versions_client(*versions: str, error: str | None = None, proxy: tuple[str, ...] = ()):
    """EKS answering DescribeAddonVersions for vpc-cni with ``versions`` (newest first), or ``error``; then,
    when ``proxy`` is given, for kube-proxy with those versions (preflight asks in that order)."""
    client = boto3.client("eks", region_name=REGION)
    stub = Stubber(client)
    for addon, offered in (("vpc-cni", versions), ("kube-proxy", proxy)):
        if addon == "kube-proxy" and not proxy:
            break
        expected = {"addonName": addon, "kubernetesVersion": "1.36"}
        if error:
            stub.add_client_error("describe_addon_versions", error, "denied", expected_params=expected)
        else:
            answer = {"addons": [{"addonName": addon, "addonVersions": [{"addonVersion": v} for v in offered]}]}
            stub.add_response("describe_addon_versions", answer, expected)
    stub.activate()
    return client


def test_pinned_vpc_cni_version_offered_for_the_kubernetes_version_passes():
    eks = addon_versions_client("v1.22.4-eksbuild.3", "v1.21.1-eksbuild.7")
    row = check_addon_version(
        eks,
        "vpc-cni",
        "vpc_cni_version",
        ClusterConfig(vpc_cni_version="v1.21.1-eksbuild.7", kubernetes_version="1.36"),
        REGION,
    )
    assert row.status == "pass", f"got {row}"


def test_pinned_vpc_cni_version_not_offered_fails_before_up_with_the_listing_command():
    eks = addon_versions_client("v1.22.4-eksbuild.3", "v1.21.1-eksbuild.7")
    row = check_addon_version(
        eks,
        "vpc-cni",
        "vpc_cni_version",
        ClusterConfig(vpc_cni_version="v1.18.0-eksbuild.1", kubernetes_version="1.36"),
        REGION,
    )
    expected = ("fail", "newest offered: v1.22.4-eksbuild.3", "set ray-efa-eks:vpcCniVersion")
    got = (row.status, row.detail, row.fix)
    assert got[0] == expected[0] and expected[1] in got[1] and got[2].startswith(expected[2]), f"got {got}"


def test_pinned_coredns_version_not_offered_fails_naming_its_key():
    eks = boto3.client("eks", region_name=REGION)
    stub = Stubber(eks)
    answer = {"addons": [{"addonName": "coredns", "addonVersions": [{"addonVersion": "v1.14.3-eksbuild.14"}]}]}
    stub.add_response("describe_addon_versions", answer, {"addonName": "coredns", "kubernetesVersion": "1.36"})
    stub.activate()
    row = check_addon_version(
        eks,
        "coredns",
        "coredns_version",
        ClusterConfig(coredns_version="v1.9.3-eksbuild.5", kubernetes_version="1.36"),
        REGION,
    )
    assert (row.status, row.fix.startswith("set ray-efa-eks:corednsVersion")) == ("fail", True), f"got {row}"


def test_vpc_cni_version_unlistable_is_skipped_not_failed():
    row = check_addon_version(
        addon_versions_client(error="AccessDeniedException"),
        "vpc-cni",
        "vpc_cni_version",
        ClusterConfig(vpc_cni_version="v1.22.4-eksbuild.3", kubernetes_version="1.36"),
        REGION,
    )
    assert (row.status, "AccessDeniedException" in row.detail) == ("skip", True), f"got {row}"


def test_preflight_fails_on_a_vpc_cni_version_the_cluster_cannot_get():
    aws = dataclasses.replace(clients(quota=192), eks=addon_versions_client("v1.22.4-eksbuild.3"))
    cfg = config()
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, vpc_cni_version="v1.9.0-eksbuild.1"))
    result = run(cfg, aws)
    assert (result.status, rows(result)["vpc-cni add-on"].status) == ("fail", "fail"), f"got {result.summary}"


def test_preflight_fails_on_a_kube_proxy_version_the_cluster_cannot_get_with_the_key():
    eks = addon_versions_client("v1.22.4-eksbuild.3", proxy=("v1.36.0-eksbuild.21",))
    aws = dataclasses.replace(clients(quota=192), eks=eks)
    cfg = config()
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, kube_proxy_version="v1.35.0-eksbuild.2"))
    row = rows(run(cfg, aws))["kube-proxy add-on"]
    got = (row.status, row.detail.startswith("v1.35.0-eksbuild.2 is not offered for Kubernetes 1.36"), row.fix)
    assert got[:2] == ("fail", True) and "set ray-efa-eks:kubeProxyVersion" in got[2], f"got {row}"


def test_preflight_passes_the_pinned_kube_proxy_version_when_eks_offers_it():
    eks = addon_versions_client("v1.22.4-eksbuild.3", proxy=("v1.36.0-eksbuild.25", "v1.36.0-eksbuild.21"))
    row = rows(run(config(), dataclasses.replace(clients(quota=192), eks=eks)))["kube-proxy add-on"]
    assert (row.status, row.detail) == ("pass", "v1.36.0-eksbuild.21 is offered for Kubernetes 1.36"), f"got {row}"


def every_addon_client(agent: tuple[str, ...]):
    """EKS answering DescribeAddonVersions for each add-on preflight asks about, in its order, for Kubernetes 1.36:
    the stack's pinned versions of vpc-cni, kube-proxy and coredns, then ``agent`` for the node monitoring agent."""
    pinned = config().cluster
    offered = {
        "vpc-cni": (pinned.vpc_cni_version,),
        "kube-proxy": (pinned.kube_proxy_version,),
        "coredns": (pinned.coredns_version,),
        "eks-node-monitoring-agent": agent,
    }
    client = boto3.client("eks", region_name=REGION)
    stub = Stubber(client)
    for addon, versions in offered.items():
        answer = {"addons": [{"addonName": addon, "addonVersions": [{"addonVersion": v} for v in versions]}]}
        stub.add_response("describe_addon_versions", answer, {"addonName": addon, "kubernetesVersion": "1.36"})
    stub.activate()
    return client


def test_preflight_fails_on_a_node_monitoring_agent_version_eks_does_not_offer_naming_what_it_offers_and_the_key():
    eks = every_addon_client(agent=("v1.7.1-eksbuild.2", "v1.6.7-eksbuild.1"))
    result = run(config(), dataclasses.replace(clients(quota=192), eks=eks))
    row = rows(result)["eks-node-monitoring-agent add-on"]
    got = (result.status, row.status, "newest offered: v1.7.1-eksbuild.2, v1.6.7-eksbuild.1" in row.detail, row.fix)
    assert got[:3] == ("fail", "fail", True) and got[3].startswith("set ray-efa-eks:nodeMonitoringAgentVersion to "), (
        f"expected a failing row naming the offered versions and the key, got {result.status}, {row}"
    )


def test_preflight_passes_the_pinned_node_monitoring_agent_version_when_eks_offers_it():
    eks = every_addon_client(agent=("v1.7.1-eksbuild.2", config().cluster.node_monitoring_agent_version))
    row = rows(run(config(), dataclasses.replace(clients(quota=192), eks=eks)))["eks-node-monitoring-agent add-on"]
    assert row.status == "pass", f"expected the pinned agent version to pass, got {row}"


# ---- where preflight stops early: nothing after a row that the later rows depend on ----------------
class _NoCredentials:
    def get_caller_identity(self):
        from botocore.exceptions import NoCredentialsError

        raise NoCredentialsError()


class _Ec2Denied:
    """EC2 that refuses DescribeInstanceTypes, as a role without ec2:Describe* does."""

    def describe_instance_types(self, **_):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "denied"}}, "DescribeInstanceTypes")


def _checks(result) -> list[tuple[str, str]]:
    return [(f.check, f.status) for f in result.findings]


def test_no_credentials_stop_preflight_after_the_credentials_row():
    result = run(config(), dataclasses.replace(clients(), sts=_NoCredentials()))
    expected = [("AWS CLI", "pass"), ("credentials", "fail")]
    assert (result.step, result.status, _checks(result)) == ("preflight", "fail", expected), f"got {result}"
    assert result.data == PreflightFacts(), f"expected no facts without an account, got {result.data}"


def test_ec2_refusing_to_describe_the_type_stops_with_the_permission_fix():
    result = run(config(), dataclasses.replace(clients(), ec2=_Ec2Denied()))
    last = result.findings[-1]
    expected = (
        "instance type",
        "fail",
        "UnauthorizedOperation: denied",
        "check the region and the EC2 permissions (ec2:DescribeInstanceTypes)",
    )
    assert (result.step, len(result.findings)) == ("preflight", 3), f"expected a stop after 3 rows, got {result}"
    assert (last.check, last.status, last.detail, last.fix) == expected, f"got {last}"
    assert result.data == PreflightFacts(account="123456789012"), f"expected the account alone, got {result.data}"


def test_unknown_type_stops_after_the_instance_type_row_naming_the_stack_file():
    result = run(config(instance_type="g6.13xlarge"), clients())
    assert _checks(result)[2:] == [("instance type", "fail")], f"expected nothing after the type, got {_checks(result)}"
    assert "in Pulumi.us-west-2.yaml" in result.findings[-1].fix, f"got {result.findings[-1].fix!r}"
    assert (result.step, result.data) == ("preflight", PreflightFacts(account="123456789012")), f"got {result}"


# ---- what run_preflight hands each row: the stack's own values -------------------------------------
class _Ec2WithReservation:
    """The moto EC2 client, answering DescribeCapacityReservations with one reservation (moto has none)."""

    def __init__(self, ec2, reservation: dict):
        self._ec2, self._reservation = ec2, reservation

    def describe_capacity_reservations(
        self, *, Filters: list[dict[str, object]] | None = None, CapacityReservationIds: list[str] | None = None
    ) -> dict:  # noqa: N803 (boto3's argument names)
        asked = (Filters, CapacityReservationIds)
        assert asked == (None, [self._reservation["CapacityReservationId"]]), asked
        return {"CapacityReservations": [self._reservation]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)


def _reserved_run(az: str, placement_group: str | None = "reserved-pg"):
    cfg = config(reservation=RESERVATION["CapacityReservationId"])
    cfg = dataclasses.replace(cfg, gpu_nodes=dataclasses.replace(cfg.gpu_nodes, placement_group_name=placement_group))
    n = cfg.gpu_nodes.node_count
    cr = {**RESERVATION, "AvailabilityZone": az, "AvailableInstanceCount": n, "PlacementGroupArn": PG_ARN}
    aws = clients(quota=192)
    return run(cfg, dataclasses.replace(aws, ec2=_Ec2WithReservation(aws.ec2, cr))), n


def test_preflight_checks_the_configured_reservation_against_the_stacks_type_az_count_and_group():
    result, n = _reserved_run("us-west-2a")
    row = rows(result)["capacity reservation"]
    expected = (
        f"cr-0123456789abcdef0: an On-Demand Capacity Reservation (default), active, g6.12xlarge in us-west-2a, "
        f"{n} available"
    )
    assert (row.status, row.detail) == ("pass", expected), f"got {row}"


def test_preflight_refuses_a_reservation_outside_the_gpu_az_with_the_regions_show_command():
    result, _ = _reserved_run("us-west-2b")
    row = rows(result)["capacity reservation"]
    assert row.status == "fail" and "it is in us-west-2b, not the GPU AZ us-west-2a" in row.detail, f"got {row}"
    assert "--region us-west-2;" in row.fix, f"expected the show command for us-west-2, got {row.fix!r}"


def test_preflight_az_row_names_the_type_and_the_stack_file():
    result = run(config(az="us-west-2d"), clients(quota=192))
    row = rows(result)["GPU availability zone"]
    assert row.detail.startswith("us-west-2d does not offer g6.12xlarge"), f"got {row.detail!r}"
    assert "in Pulumi.us-west-2.yaml" in row.fix, f"got {row.fix!r}"


def test_preflight_cni_row_names_the_pinned_version_and_the_region():
    aws = dataclasses.replace(clients(quota=192), eks=addon_versions_client("v1.22.4-eksbuild.3"))
    cfg = config()
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, vpc_cni_version="v1.9.0-eksbuild.1"))
    row = rows(run(cfg, aws))["vpc-cni add-on"]
    expected = "v1.9.0-eksbuild.1 is not offered for Kubernetes 1.36 in us-west-2"
    assert row.detail.startswith(expected), f"expected {expected!r}..., got {row.detail!r}"


def test_preflight_hands_the_account_to_later_steps():
    result = run(config(), clients(quota=192))
    assert result.data.account == "123456789012", f"got {result.data}"


def test_system_nodes_under_their_own_quota_get_their_own_row():
    result = run(config(), clients(quota=192))
    row = rows(result)["vCPU quota L-1216C47A"]
    assert "plus the GPU nodes" not in row.detail, f"m7i nodes do not share the G quota, got {row.detail!r}"


def _same_quota_client(value: float):
    """Service Quotas answering the G and VT quota twice: for the GPU nodes, then for G-family system nodes."""
    client = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(client)
    quota = {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA", "QuotaName": "G and VT", "Value": value, "Unit": "None"}
    for _ in range(2):
        stub.add_response("get_service_quota", {"Quota": quota}, {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"})
    stub.activate()
    return client


def test_system_nodes_under_the_gpu_quota_say_the_gpu_nodes_count_too():
    cfg = config()
    cfg = dataclasses.replace(cfg, system_nodes=dataclasses.replace(cfg.system_nodes, instance_type="g4dn.xlarge"))
    result = run(cfg, dataclasses.replace(clients(), quotas=_same_quota_client(1)))
    system = [f for f in result.findings if f.check == "vCPU quota L-DB2E81BA"][-1]
    assert system.status == "fail", f"1 vCPU cannot hold a g4dn.xlarge: got {system}"
    assert system.detail.endswith("(plus the GPU nodes under the same quota)"), f"got {system.detail!r}"
    assert system.fix.endswith("--region us-west-2"), f"expected the increase for us-west-2, got {system.fix!r}"


def test_passing_preflight_hands_on_every_fact_and_sums_up_the_fit():
    cfg = config()
    n = cfg.gpu_nodes.node_count
    result = run(cfg, clients(quota=192))
    facts = PreflightFacts(
        account="123456789012",
        gpu_az="us-west-2a",
        valid_azs=("us-west-2a", "us-west-2b"),
        vcpus_needed=48 * n,  # g6.12xlarge: 48 vCPUs (EC2's DescribeInstanceTypes, as moto answers it)
        vcpus_free=192.0,
        efa_interfaces=1,
    )
    assert (result.step, result.status, result.data) == ("preflight", "pass", facts), f"got {result}"
    expected = f"account 123456789012: {n} x g6.12xlarge fit in us-west-2a"
    assert result.summary == expected, f"expected {expected!r}, got {result.summary!r}"


class _Ec2Doctored:
    """The moto EC2 client with `change` applied to DescribeInstanceTypes' answer (what EC2 leaves out)."""

    def __init__(self, ec2, change):
        self._ec2, self._change = ec2, change

    def describe_instance_types(self, **kwargs):
        answer = self._ec2.describe_instance_types(**kwargs)
        return {**answer, "InstanceTypes": [self._change(dict(t)) for t in answer["InstanceTypes"]]}

    def __getattr__(self, name):
        return getattr(self._ec2, name)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: {k: v for k, v in t.items() if k != "NetworkInfo"},
        lambda t: {**t, "NetworkInfo": {"EfaSupported": True}},
    ],
    ids=["no-network-info", "efa-without-interface-info"],
)
def test_type_without_efa_details_fails_its_efa_row_and_hands_on_no_interface(change):
    aws = clients(quota=192)
    result = run(config(), dataclasses.replace(aws, ec2=_Ec2Doctored(aws.ec2, change)))
    assert (rows(result)["EFA support"].status, result.status) == ("fail", "fail"), f"got {result.summary}"
    assert result.data.efa_interfaces == 0, f"expected 0 EFA interfaces handed on, got {result.data}"


# --------------------------------------------------------------------------- issue 26: a Capacity Block's state


def block_row(**change):
    cr = {**worlds.CAPACITY_BLOCK_SCHEDULED, **change}
    return check_capacity_reservation(
        reservation_client(cr),
        gpu(cr["CapacityReservationId"], instance_type="p5.48xlarge", capacity_block=True),
        "us-west-2a",
        REGION,
        "s1",
    )


def test_capacity_block_not_yet_started_fails_naming_its_start_and_when_to_run_again():
    row = block_row()
    wanted = ("state is scheduled", "starts at 2026-12-08 11:30 UTC", "no GPU node can launch", "Capacity Block")
    missing = [w for w in wanted if w not in row.detail]
    assert row.status == "fail" and not missing, f"missing {missing} in {row}"
    assert "after 2026-12-08 11:30 UTC" in row.fix and "run --stack s1" in row.fix, f"got fix {row.fix!r}"


def test_capacity_block_not_yet_started_is_not_failed_for_its_zero_available_instances():
    row = block_row()
    assert "available" not in row.detail, f"a scheduled block shows 0 available by design, got {row.detail!r}"


def test_capacity_block_that_will_hold_too_few_instances_fails_with_its_planned_count():
    tags = [{"Key": "aws:ec2capacityreservation:incrementalRequestedQuantity", "Value": "1"}]
    row = block_row(Tags=tags)
    assert row.status == "fail" and "it will hold 1 instances, 2 needed" in row.detail, f"got {row}"


@pytest.mark.parametrize(
    "state, words",
    [
        ("expired", "it ended at 2026-12-15 11:30 UTC"),
        ("cancelled", "state is cancelled"),
        ("payment-failed", "state is payment-failed"),
    ],
)
def test_ended_capacity_block_fails_saying_its_capacity_is_released_and_how_to_replace_it(state, words):
    row = block_row(State=state)
    assert row.status == "fail" and words in row.detail and "capacity is released" in row.detail, f"got {row}"
    assert "describe-capacity-block-offerings" in row.fix and "gpuCapacityReservationId" in row.fix, f"got {row.fix}"


def test_payment_pending_capacity_block_fails_as_not_active_yet():
    row = block_row(State="payment-pending")
    assert row.status == "fail" and "payment is not processed yet" in row.detail, f"got {row}"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"AvailabilityZone": "us-west-2b"}, "it is in us-west-2b, not the GPU AZ us-west-2a"),
        ({"InstanceType": "p4d.24xlarge"}, "it reserves p4d.24xlarge, not p5.48xlarge"),
    ],
)
def test_active_capacity_block_of_another_az_or_type_fails(change, words):
    row = block_row(State="active", AvailableInstanceCount=2, TotalInstanceCount=2, **change)
    assert row.status == "fail" and words in row.detail, f"expected {words!r}, got {row}"


def test_active_capacity_block_passes_and_says_when_it_ends():
    row = block_row(State="active", AvailableInstanceCount=2, TotalInstanceCount=2)
    assert row.status == "pass" and "ends 2026-12-15 11:30 UTC" in row.detail, f"got {row}"
