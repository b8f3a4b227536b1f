"""preflight's rows one by one: the check each names, its verdict, what it saw, and the fix it gives.

Each row function takes its AWS answer (or a stand-in client) as an argument, so no account is needed;
the answers' shapes are those of STS GetCallerIdentity and EC2 DescribeInstanceTypes.
"""

from __future__ import annotations

import dataclasses
import io
import urllib.error
from datetime import UTC, datetime

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber
from conftest import quiet_stack

from automation.ec2 import describe_type, family, quota_for
from automation.errors import DriverError
from automation.pipeline import PreflightFacts
from automation.steps.preflight import (
    AwsClients,
    check_addon_version,
    check_api_endpoint,
    check_aws_cli,
    check_az,
    check_capacity_reservation,
    check_credentials,
    check_instance_type,
    check_kubernetes_version,
    check_system_quota,
)
from automation.targets.aws import API_CIDRS_KEY, CHECKIP_URL, checkip_address
from infra.config import ClusterConfig, GpuNodesConfig

ARN = "arn:aws:iam::123456789012:user/trainer"


class _Sts:
    def __init__(self, error: Exception | None = None):
        self.error = error

    def get_caller_identity(self) -> dict:
        if self.error:
            raise self.error
        return {"Account": "123456789012", "Arn": ARN, "UserId": "AIDA"}


def _client_error(code: str, message: str, op: str = "GetCallerIdentity") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, op)


# ---- credentials -----------------------------------------------------------------------------------
def test_credentials_pass_names_the_account_and_the_principal():
    row, account = check_credentials(_Sts())
    assert (row.check, row.status, account) == ("credentials", "pass", "123456789012"), f"got {row}, {account}"
    assert row.detail == f"account 123456789012 as {ARN}", f"got {row.detail!r}"


def test_no_credentials_fail_with_the_configure_fix_and_no_account():
    row, account = check_credentials(_Sts(NoCredentialsError()))
    assert (row.check, row.status, account) == ("credentials", "fail", None), f"got {row}, {account}"
    assert row.detail == "no AWS credentials found", f"got {row.detail!r}"
    assert row.fix.startswith("aws configure  (or export AWS_PROFILE=<profile>)"), f"got {row.fix!r}"


def test_rejected_credentials_fail_naming_the_error_code_and_the_refresh():
    row, account = check_credentials(_Sts(_client_error("ExpiredToken", "The security token included is expired")))
    assert (row.check, row.status, account) == ("credentials", "fail", None), f"got {row}, {account}"
    assert row.detail == "ExpiredToken: The security token included is expired", f"got {row.detail!r}"
    assert row.fix == "aws sts get-caller-identity; refresh the credentials (aws sso login)", f"got {row.fix!r}"


def test_unreachable_sts_fails_naming_the_exception():
    row, _ = check_credentials(_Sts(EndpointConnectionError(endpoint_url="https://sts.us-west-2.amazonaws.com")))
    assert row.status == "fail", f"got {row}"
    assert row.detail.startswith("EndpointConnectionError: Could not connect"), f"got {row.detail!r}"


# ---- AWS CLI ---------------------------------------------------------------------------------------
# What `aws --version` prints (AWS CLI user guide, "aws --version" examples of v2 and v1).
V2 = "aws-cli/2.22.0 Python/3.12.6 Linux/6.1.0 exe/x86_64.ubuntu.24"
V1 = "aws-cli/1.36.0 Python/3.11.7 Linux/6.1.0 botocore/1.35.0"


def test_aws_cli_row_is_named_and_passes_with_its_path_and_version():
    row = check_aws_cli(which=lambda name: "/usr/local/bin/aws" if name == "aws" else None, version=lambda p: V2)
    assert (row.check, row.status, row.fix) == ("AWS CLI", "pass", ""), f"got {row}"
    want = "/usr/local/bin/aws, aws-cli/2.22.0 (the kubeconfig runs `aws eks get-token`)"
    assert row.detail == want, f"got {row.detail!r}"


def test_aws_cli_v1_fails_with_the_v2_install_link():
    row = check_aws_cli(which=lambda name: "/usr/bin/aws", version=lambda p: V1)
    assert row.status == "fail" and "v1" in row.detail and "install AWS CLI v2" in row.fix, f"got {row}"


def test_missing_aws_cli_says_when_up_would_fail():
    row = check_aws_cli(which=lambda name: None)
    assert (row.check, row.status) == ("AWS CLI", "fail"), f"got {row}"
    assert row.detail.startswith("`aws` is not on PATH"), f"got {row.detail!r}"
    assert row.detail.endswith("so `up` would fail after the cluster and GPU nodes exist"), f"got {row.detail!r}"


# ---- instance type ---------------------------------------------------------------------------------
def _type(efa: bool = True, max_efa: int = 1, gpus: int = 4) -> dict:
    net = {"EfaSupported": efa, **({"EfaInfo": {"MaximumEfaInterfaces": max_efa}} if efa else {})}
    return {"VCpuInfo": {"DefaultVCpus": 48}, "NetworkInfo": net, "GpuInfo": {"Gpus": [{"Count": gpus}]}}


LIST_EFA_TYPES = (
    "aws ec2 describe-instance-types --region us-west-2 --filters Name=network-info.efa-supported,Values=true "
    "--query 'InstanceTypes[].InstanceType'"
)


def test_unknown_type_fails_with_the_key_and_the_command_that_lists_efa_types():
    rows = check_instance_type(None, "g6.13xlarge", "us-west-2", 1, 4, "us-west-2")
    assert [(r.check, r.status) for r in rows] == [("instance type", "fail")], f"got {rows}"
    assert rows[0].detail == "g6.13xlarge does not exist in us-west-2", f"got {rows[0].detail!r}"
    expected = f"set ray-efa-eks:gpuInstanceType in Pulumi.us-west-2.yaml to one of: {LIST_EFA_TYPES}"
    assert rows[0].fix == expected, f"expected {expected!r}, got {rows[0].fix!r}"


def test_type_without_efa_fails_with_the_list_command():
    rows = check_instance_type(_type(efa=False), "g6.4xlarge", "us-west-2", 1, 4, "us-west-2")
    assert [(r.check, r.status) for r in rows] == [("instance type", "pass"), ("EFA support", "fail")], f"got {rows}"
    assert rows[1].fix == f"choose an EFA type: {LIST_EFA_TYPES}", f"got {rows[1].fix!r}"


def test_good_type_passes_every_row_with_no_fix():
    rows = check_instance_type(_type(), "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    got = [(r.check, r.status, r.fix) for r in rows]
    expected = [("instance type", "pass", ""), ("EFA support", "pass", ""), ("GPUs per node", "pass", "")]
    assert got == expected, f"expected {expected}, got {got}"
    assert rows[0].detail == "g6.12xlarge: 48 vCPUs, 4 GPUs", f"got {rows[0].detail!r}"


@pytest.mark.parametrize(("max_efa", "status"), [(1, "fail"), (2, "pass"), (3, "pass")])
def test_efa_interfaces_fit_when_the_type_has_at_least_as_many(max_efa, status):
    rows = check_instance_type(_type(max_efa=max_efa), "p4d.24xlarge", "us-west-2", 2, 4, "us-west-2")
    efa = rows[1]
    assert efa.status == status, f"{max_efa} interfaces for 2 asked: expected {status}, got {efa}"
    fix = "" if status == "pass" else f"set 'ray-efa-eks:gpuEfaInterfaces: {max_efa}' in Pulumi.us-west-2.yaml"
    assert efa.fix == fix, f"expected fix {fix!r}, got {efa.fix!r}"


@pytest.mark.parametrize("gpus", [2, 8])
def test_gpu_count_other_than_the_catalog_fails_naming_both(gpus):
    rows = check_instance_type(_type(gpus=gpus), "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert rows[2].status == "fail", f"{gpus} GPUs against 4: got {rows[2]}"
    assert rows[2].fix.startswith(f"infra/data/instance_types.json says 4 GPUs for g6.12xlarge, EC2 says {gpus}")


def test_gpus_are_summed_over_every_gpu_entry():
    info = {**_type(), "GpuInfo": {"Gpus": [{"Count": 2}, {"Count": 2}]}}
    rows = check_instance_type(info, "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert rows[2].status == "pass", f"2 + 2 GPUs against 4: got {rows[2]}"


class _Ec2:
    """EC2 answering the describe call a row makes with ``answer`` (a list, under that call's key), or
    raising it."""

    def __init__(self, answer):
        self.answer = answer

    def _answer(self, key: str) -> dict:
        if isinstance(self.answer, Exception):
            raise self.answer
        return {key: self.answer}

    def describe_instance_types(self, InstanceTypes):  # noqa: N803 (boto3's argument name)
        return self._answer("InstanceTypes")

    def describe_capacity_reservations(self, CapacityReservationIds):  # noqa: N803 (boto3's argument name)
        return self._answer("CapacityReservations")


def test_describe_type_returns_ec2s_entry():
    assert describe_type(_Ec2([{"InstanceType": "g6.12xlarge"}]), "g6.12xlarge") == {"InstanceType": "g6.12xlarge"}


@pytest.mark.parametrize(
    "answer", [[], _client_error("InvalidInstanceType", "not valid", "DescribeInstanceTypes")], ids=["empty", "invalid"]
)
def test_describe_type_of_an_unknown_type_is_none(answer):
    assert describe_type(_Ec2(answer), "g6.13xlarge") is None


def test_describe_type_raises_other_errors():
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        describe_type(_Ec2(_client_error("UnauthorizedOperation", "no", "DescribeInstanceTypes")), "g6.12xlarge")


# ---- families and facts ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("instance_type", "fam"),
    [("g6.12xlarge", "g"), ("vt1.3xlarge", "vt"), ("p5.48xlarge", "p"), ("trn1.32xlarge", "trn"), ("m7i.large", "m")],
)
def test_family_is_the_letters_before_the_generation(instance_type, fam):
    assert family(instance_type) == fam


def test_family_of_a_name_without_a_dot_or_digit_is_the_whole_name():
    assert family("g") == "g"


def test_quota_of_a_family_without_its_own_is_the_standard_one():
    assert quota_for("m7i.large")[0] == "L-1216C47A" and quota_for("g6.12xlarge")[0] == "L-DB2E81BA"


def test_facts_to_dict_keeps_every_fact_and_lists_the_azs():
    facts = PreflightFacts("123456789012", "us-west-2a", ("us-west-2a", "us-west-2b"), 96, 128.0, 1)
    expected = {
        "account": "123456789012",
        "gpu_az": "us-west-2a",
        "valid_azs": ["us-west-2a", "us-west-2b"],
        "vcpus_needed": 96,
        "vcpus_free": 128.0,
        "efa_interfaces": 1,
    }
    assert facts.to_dict() == expected, f"got {facts.to_dict()}"


def test_efa_and_gpu_rows_say_what_the_type_has_and_what_the_stack_asks():
    rows = check_instance_type(_type(max_efa=2, gpus=4), "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    got = [rows[1].detail, rows[2].detail]
    expected = [
        "g6.12xlarge supports EFA with up to 2 interfaces; the stack asks for 1",
        "g6.12xlarge has 4 GPUs; the stack counts on 4",
    ]
    assert got == expected, f"expected {expected}, got {got}"


# EC2 leaves out what a type does not have: no GpuInfo on a CPU type (c5n.18xlarge supports EFA), no
# EfaInfo when EFA is unsupported. Each absence is a failed row, never a crash.
def test_type_without_gpus_fails_the_gpu_row():
    info = {k: v for k, v in _type().items() if k != "GpuInfo"}
    rows = check_instance_type(info, "c5n.18xlarge", "us-west-2", 1, 4, "us-west-2")
    assert (rows[2].status, rows[2].detail) == ("fail", "c5n.18xlarge has 0 GPUs; the stack counts on 4"), rows[2]


def test_gpu_entry_without_a_count_counts_none():
    info = {**_type(), "GpuInfo": {"Gpus": [{"Count": 4}, {"Name": "L4"}]}}
    rows = check_instance_type(info, "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert rows[2].status == "pass", f"an entry without Count adds no GPU: got {rows[2]}"


def test_gpu_info_without_a_gpu_list_counts_none():
    info = {**_type(), "GpuInfo": {}}
    rows = check_instance_type(info, "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert rows[2].detail == "g6.12xlarge has 0 GPUs; the stack counts on 4", rows[2]


def test_efa_support_without_interface_info_counts_no_interface():
    info = {**_type(), "NetworkInfo": {"EfaSupported": True}}
    rows = check_instance_type(info, "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert (rows[1].status, rows[1].fix) == ("fail", "set 'ray-efa-eks:gpuEfaInterfaces: 0' in Pulumi.us-west-2.yaml")


def test_type_without_network_info_has_no_efa():
    info = {k: v for k, v in _type().items() if k != "NetworkInfo"}
    rows = check_instance_type(info, "g6.12xlarge", "us-west-2", 1, 4, "us-west-2")
    assert (rows[1].check, rows[1].status) == ("EFA support", "fail"), f"got {rows[1]}"


# ---- capacity reservation --------------------------------------------------------------------------
SHOW_CR = "aws ec2 describe-capacity-reservations --capacity-reservation-ids cr-0123 --region us-west-2"


def _reservation_row(answer, reservation_id="cr-0123", az="us-west-2a"):
    gpu = GpuNodesConfig(instance_type="g6.12xlarge", node_count=2, capacity_reservation_id=reservation_id)
    return check_capacity_reservation(_Ec2(answer), gpu, az, "us-west-2")


def test_no_reservation_skips_on_demand():
    row = _reservation_row([], reservation_id=None)
    assert (row.check, row.status, row.detail) == (
        "capacity reservation",
        "skip",
        "none configured: On-Demand capacity",
    )


def test_unreadable_reservation_fails_with_the_error_and_the_show_command():
    error = _client_error("InvalidCapacityReservationId.Malformed", "bad id", "DescribeCapacityReservations")
    row = _reservation_row(error)
    expected = ("capacity reservation", "fail", "cr-0123: InvalidCapacityReservationId.Malformed: bad id", SHOW_CR)
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_reservation_not_in_the_region_fails_with_the_show_command():
    row = _reservation_row([])
    expected = ("capacity reservation", "fail", "cr-0123 not found in us-west-2", SHOW_CR)
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_reservation_in_another_az_fails_naming_both_azs():
    cr = {
        "State": "active",
        "InstanceType": "g6.12xlarge",
        "AvailabilityZone": "us-west-2b",
        "AvailableInstanceCount": 2,
        "TotalInstanceCount": 2,
        "ReservationType": "default",
    }
    row = _reservation_row([cr])
    assert row.status == "fail" and "it is in us-west-2b, not the GPU AZ us-west-2a" in row.detail, f"got {row}"


def _cr(**over) -> dict:
    cr = {
        "State": "active",
        "InstanceType": "g6.12xlarge",
        "AvailabilityZone": "us-west-2a",
        "AvailableInstanceCount": 2,
        "TotalInstanceCount": 2,
        "ReservationType": "default",
    }
    return {k: v for k, v in {**cr, **over}.items() if v is not None}


def test_usable_reservation_passes_saying_what_it_holds():
    row = _reservation_row([_cr()])
    expected = (
        "capacity reservation",
        "pass",
        "cr-0123: an On-Demand Capacity Reservation (default), active, g6.12xlarge in us-west-2a, 2 available",
    )
    assert (row.check, row.status, row.detail) == expected, f"got {row}"


def test_unusable_reservation_fails_with_every_problem_and_the_fix():
    row = _reservation_row([_cr(State="expired", AvailableInstanceCount=None)])
    expected = (
        "capacity reservation",
        "fail",
        "cr-0123: state is expired: it has ended; its capacity is released, so no GPU node can launch into it; "
        "0 of 2 instances available, 2 needed",
        "create a new reservation (aws ec2 create-capacity-reservation --instance-type g6.12xlarge --instance-platform "
        "Linux/UNIX --availability-zone us-west-2a --instance-count N) and set ray-efa-eks:gpuCapacityReservationId in "
        f"Pulumi.<stack>.yaml to its id, or set it to '' for On-Demand capacity; {SHOW_CR}; fix or remove "
        "gpuCapacityReservationId",
    )
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_capacity_block_declared_as_on_demand_names_the_key_to_set():
    row = _reservation_row([_cr(ReservationType="capacity-block")])
    assert "but gpuCapacityBlock is false: set ray-efa-eks:gpuCapacityBlock to true" in row.detail, f"got {row}"


def test_reservation_for_a_placement_group_without_one_configured_names_the_key():
    arn = "arn:aws:ec2:us-west-2:123456789012:placement-group/train-pg"
    row = _reservation_row([_cr(PlacementGroupArn=arn)])
    expected = (
        "it is reserved for placement group train-pg, not the one the stack creates: "
        "set ray-efa-eks:gpuPlacementGroupName to train-pg"
    )
    assert expected in row.detail, f"expected {expected!r} in {row.detail!r}"


# ---- the system node group's quota -----------------------------------------------------------------
def _system_cfg():
    from types import SimpleNamespace

    return SimpleNamespace(
        system_nodes=SimpleNamespace(instance_type="m7i.xlarge", count=2),
        gpu_nodes=SimpleNamespace(instance_type="g6.12xlarge"),
        region="us-west-2",
        stack="us-west-2",
    )


def test_system_type_ec2_will_not_describe_fails_naming_the_permission():
    clients = AwsClients(
        sts=None, ec2=_Ec2(_client_error("UnauthorizedOperation", "denied", "DescribeInstanceTypes")), quotas=None
    )
    row = check_system_quota(_system_cfg(), clients)
    expected = (
        "system vCPU quota",
        "fail",
        "UnauthorizedOperation: denied",
        "check the EC2 permissions (ec2:DescribeInstanceTypes)",
    )
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_system_type_unknown_in_the_region_fails_naming_the_key():
    row = check_system_quota(_system_cfg(), AwsClients(sts=None, ec2=_Ec2([]), quotas=None))
    expected = (
        "system vCPU quota",
        "fail",
        "m7i.xlarge does not exist in us-west-2",
        "set ray-efa-eks:systemInstanceType in Pulumi.us-west-2.yaml to a type offered there",
    )
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_reservation_without_a_type_is_an_on_demand_one():
    row = _reservation_row([_cr(ReservationType=None)])
    assert "an On-Demand Capacity Reservation (default)" in row.detail, f"got {row.detail!r}"


# ---- the vpc-cni add-on version ---------------------------------------------------------------------
class _Eks:
    """DescribeAddonVersions through its paginator: the versions offered, or an error."""

    def __init__(self, answer):
        self.answer = answer

    def get_paginator(self, name):
        assert name == "describe_addon_versions", name
        return self

    def paginate(self, **_):
        if isinstance(self.answer, Exception):
            raise self.answer
        return [{"addons": [{"addonVersions": [{"addonVersion": v} for v in self.answer]}]}]


LIST_CNI = (
    "aws eks describe-addon-versions --addon-name vpc-cni --kubernetes-version 1.35 --region us-west-2 "
    "--query 'addons[].addonVersions[].addonVersion'"
)


def cni_row(eks, version: str = "v1.22.4-eksbuild.3"):
    """preflight's vpc-cni row for ``version`` on Kubernetes 1.35 in us-west-2, EKS answering as ``eks``."""
    cfg = ClusterConfig(vpc_cni_version=version, kubernetes_version="1.35")
    return check_addon_version(eks, "vpc-cni", "vpc_cni_version", cfg, "us-west-2")


def test_cni_version_without_an_eks_client_is_skipped_saying_so():
    row = cni_row(None)
    expected = ("vpc-cni add-on", "skip", "v1.22.4-eksbuild.3 not checked: no EKS client")
    assert (row.check, row.status, row.detail) == expected, f"got {row}"


def test_cni_version_eks_will_not_list_is_skipped_with_the_listing_command():
    error = _client_error("AccessDeniedException", "no", "DescribeAddonVersions")
    row = cni_row(_Eks(error))
    expected = (
        "vpc-cni add-on",
        "skip",
        "v1.22.4-eksbuild.3 not checked (AccessDeniedException: no); EKS checks it at `up`",
        LIST_CNI,
    )
    assert (row.check, row.status, row.detail, row.fix) == expected, f"got {row}"


def test_cni_version_offered_passes():
    eks = _Eks(["v1.22.5-eksbuild.1", "v1.22.4-eksbuild.3"])
    row = cni_row(eks)
    expected = ("vpc-cni add-on", "pass", "v1.22.4-eksbuild.3 is offered for Kubernetes 1.35")
    assert (row.check, row.status, row.detail) == expected, f"got {row}"


@pytest.mark.parametrize(
    ("offered", "newest"),
    [([], "none"), (["v4", "v3", "v2", "v1"], "v4, v3, v2")],
    ids=["none-offered", "four-offered"],
)
def test_cni_version_not_offered_fails_naming_the_three_newest(offered, newest):
    row = cni_row(_Eks(offered), "v0")
    detail = f"v0 is not offered for Kubernetes 1.35 in us-west-2 (newest offered: {newest})"
    assert (row.status, row.detail, row.fix) == ("fail", detail, f"set ray-efa-eks:vpcCniVersion to one of: {LIST_CNI}")


def test_pending_on_demand_reservation_fails_as_not_yet_active_with_no_capacity_block_advice():
    row = _reservation_row([_cr(State="pending", AvailableInstanceCount=0)])
    got = (
        row.status,
        "not active yet: EC2 is still provisioning it" in row.detail,
        "Capacity Block" in row.detail + row.fix,
    )
    assert got == ("fail", True, False), f"got {row}"


# ---- preflight's GPU availability-zone row: which AZ it picks or refuses, and the fix it names.
#
# `check_az` is pure (the offerings and the stack's AZs are passed in), so no AWS client is needed.

STACK_AZS = ("us-west-2a", "us-west-2b")


def test_open_az_passes_naming_the_chosen_and_the_valid_azs():
    row, az, valid = check_az({"us-west-2c", "us-west-2b", "us-west-2a"}, STACK_AZS, "", "g6.12xlarge", "us-west-2")
    assert (az, valid) == ("us-west-2a", STACK_AZS), f"expected us-west-2a among {STACK_AZS}, got {az} among {valid}"
    assert (row.check, row.status) == ("GPU availability zone", "pass"), f"expected a passing AZ row, got {row}"
    expected = "chose us-west-2a (valid: us-west-2a, us-west-2b)"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"


def test_configured_az_that_cannot_be_used_fails_naming_the_key_and_a_valid_az():
    row, az, _ = check_az(STACK_AZS, STACK_AZS, "us-west-2d", "g6.12xlarge", "us-west-2")
    expected = (
        "set 'ray-efa-eks:gpuAvailabilityZone: us-west-2a' in Pulumi.us-west-2.yaml (valid: us-west-2a, us-west-2b)"
    )
    assert (row.status, az, row.fix) == ("fail", None, expected), f"expected a fail with fix {expected!r}, got {row}"


def test_type_offered_only_outside_the_stack_fails_naming_where_and_how_to_list_offerings():
    row, az, valid = check_az({"us-west-2c"}, STACK_AZS, "us-west-2a", "p5e.48xlarge", "us-west-2")
    assert (row.status, az, valid) == ("fail", None, ()), f"expected a fail with no AZ, got {row}, {az}, {valid}"
    assert "p5e.48xlarge is offered in ['us-west-2c']" in row.detail, (
        f"expected where it is offered, got {row.detail!r}"
    )
    expected_fix = (
        "add an AZ that offers it to ray-efa-eks:availabilityZones in Pulumi.us-west-2.yaml "
        "(aws ec2 describe-instance-type-offerings --location-type availability-zone "
        "--filters Name=instance-type,Values=p5e.48xlarge)"
    )
    assert row.fix == expected_fix, f"expected fix {expected_fix!r}, got {row.fix!r}"


def test_type_offered_nowhere_says_so():
    row, _, _ = check_az(set(), STACK_AZS, "", "p5e.48xlarge", "us-west-2")
    assert row.status == "fail" and "is offered in no AZ but" in row.detail, f"expected 'offered in no AZ', got {row}"


def test_configured_az_that_offers_the_type_passes_as_is():
    row, az, valid = check_az(STACK_AZS, STACK_AZS, "us-west-2b", "g6.12xlarge", "us-west-2")
    assert (row.check, row.status, az) == ("GPU availability zone", "pass", "us-west-2b"), f"got {row}, {az}"
    expected = "us-west-2b offers g6.12xlarge (valid: us-west-2a, us-west-2b)"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"


# ---- preflight's Kubernetes version row against EKS's DescribeClusterVersions, answered by botocore's Stubber (the
# answer's shape is botocore's EKS model; the dates are EKS's published 1.36 / 1.32 support windows as
# https://endoflife.date/amazon-eks lists them, read 2026-12-06, and illustrative only).

REGION = "us-east-2"


def eks_answering(version: str, versions: list[dict] | None = None, error: str = ""):
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    ask = {"clusterVersions": [version], "includeAll": True}
    if error:
        stub.add_client_error("describe_cluster_versions", error, "denied", expected_params=ask)
    else:
        stub.add_response("describe_cluster_versions", {"clusterVersions": versions or []}, ask)
    stub.activate()
    return client


def info(version: str, status: str) -> dict:
    return {
        "clusterVersion": version,
        "versionStatus": status,
        "endOfStandardSupportDate": datetime(2027, 8, 2, tzinfo=UTC),
        "endOfExtendedSupportDate": datetime(2028, 8, 2, tzinfo=UTC),
    }


def test_a_version_in_standard_support_passes_with_its_end_date():
    row = check_kubernetes_version(eks_answering("1.36", [info("1.36", "STANDARD_SUPPORT")]), "1.36", REGION)
    assert (row.status, row.detail) == ("pass", "1.36 is in EKS standard support until 2027-08-02 ($0.10/h)"), row


def test_a_version_in_extended_support_warns_with_the_price():
    row = check_kubernetes_version(eks_answering("1.32", [info("1.32", "EXTENDED_SUPPORT")]), "1.32", REGION)
    expected = ("WARNING 1.32 is in EKS extended support until 2028-08-02", "$0.60/h ($14.40 a day) instead of $0.10/h")
    assert row.status == "pass" and all(e in row.detail for e in expected), row


def test_a_version_past_support_fails_naming_the_supported_ones():
    row = check_kubernetes_version(eks_answering("1.28", []), "1.28", REGION)
    assert (row.status, row.detail) == ("fail", f"1.28 is past EKS support in {REGION}"), row
    assert "describe-cluster-versions" in row.fix and "STANDARD_SUPPORT" in row.fix, row.fix


def test_a_refused_call_skips_the_row_leaving_it_to_eks():
    row = check_kubernetes_version(eks_answering("1.36", error="AccessDeniedException"), "1.36", REGION)
    assert (row.status, "AccessDeniedException" in row.detail) == ("skip", True), row


# ---- The EKS API endpoint's allow-list left to the driver: this machine's address from checkip.amazonaws.com
# (read through a stand-in opener, never the network) and preflight's row that shows it.
#
# checkip.amazonaws.com answers one line, the caller's public IPv4 and a newline (`curl -s
# https://checkip.amazonaws.com` prints e.g. `203.0.113.7`); the stand-in answers the same way.


class Opener:
    """`urllib.request.urlopen` as checkip_address calls it (the URL and a timeout), answering ``body`` or raising
    ``error``; what it was asked is kept."""

    def __init__(self, body: bytes = b"203.0.113.7\n", error: Exception | None = None):
        self.body, self.error = body, error
        self.asked: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout: float) -> io.BytesIO:
        self.asked.append((url, timeout))
        if self.error is not None:
            raise self.error
        return io.BytesIO(self.body)


def test_address_is_read_from_checkip_amazonaws_com():
    urlopen = Opener()
    got = checkip_address(urlopen)
    assert (got, urlopen.asked[0][0]) == ("203.0.113.7", CHECKIP_URL), f"got {got} from {urlopen.asked}"


def test_unreachable_checkip_names_the_key_to_set_by_hand():
    with pytest.raises(DriverError) as err:
        checkip_address(Opener(error=urllib.error.URLError("Name or service not known")))
    assert (err.value.exit_code, API_CIDRS_KEY in str(err.value)) == (2, True), f"got {err.value}"


def test_an_answer_that_is_no_ipv4_address_is_refused():
    with pytest.raises(DriverError) as err:
        checkip_address(Opener(b"<html>captive portal</html>"))
    assert "not an IPv4 address" in str(err.value), f"got {err.value}"


def _cluster(**changes):
    return dataclasses.replace(quiet_stack("us-west-2").cluster, **changes)


def test_preflight_shows_the_address_run_will_write():
    row = check_api_endpoint(_cluster(), "us-west-2", lambda: "203.0.113.7/32")
    assert (row.status, "203.0.113.7/32" in row.detail) == ("pass", True), f"got {row}"


def test_preflight_fails_when_the_address_cannot_be_learned():
    def fails() -> str:
        raise DriverError("could not read this machine's address", exit_code=2)

    row = check_api_endpoint(_cluster(), "us-west-2", fails)
    assert (row.status, API_CIDRS_KEY in row.fix) == ("fail", True), f"got {row}"


def test_preflight_shows_an_allow_list_the_stack_sets():
    row = check_api_endpoint(_cluster(public_access_cidrs=("198.51.100.0/24",)), "us-west-2", None)
    assert (row.status, "198.51.100.0/24" in row.detail) == ("pass", True), f"got {row}"


# ---- a second run from another address (issue 44 item 3). This machine's address is faked: HERE, in TEST-NET-3;
# the earlier machine's in TEST-NET-2 (RFC 5737).
HERE = "203.0.113.7/32"
ELSEWHERE = "198.51.100.9/32"


def _row(cidrs: tuple[str, ...], driver_cidr: str = ""):
    cluster = _cluster(public_access_cidrs=cidrs, driver_cidr=driver_cidr)
    return check_api_endpoint(cluster, "us-west-2", lambda: HERE)


def test_a_list_the_user_wrote_without_this_address_fails_with_the_command_that_adds_it():
    row = _row((ELSEWHERE, "192.0.2.0/24"))
    wanted = f"pulumi config set --stack us-west-2 --path '{API_CIDRS_KEY}[2]' {HERE}"
    assert (row.status, row.fix) == ("fail", wanted), f"expected fail with `{wanted}`, got {row}"


def test_a_list_open_to_the_world_passes():
    assert _row(("0.0.0.0/0",)).status == "pass", "0.0.0.0/0 covers every address"


def test_a_cidr_covering_this_address_passes():
    row = _row((ELSEWHERE, "203.0.113.0/24"))
    assert (row.status, "203.0.113.0/24" in row.detail) == ("pass", True), f"got {row}"


def test_the_drivers_entry_from_another_address_passes_saying_run_replaces_it():
    row = _row((ELSEWHERE,), driver_cidr=ELSEWHERE)
    assert (row.status, "replace" in row.detail, HERE in row.detail) == ("pass", True, True), f"got {row}"


def test_an_unreachable_address_service_skips_the_comparison_of_a_list_the_stack_sets():
    def fails() -> str:
        raise DriverError("could not read this machine's address", exit_code=2)

    row = check_api_endpoint(_cluster(public_access_cidrs=(ELSEWHERE,)), "us-west-2", fails)
    assert row.status == "skip", f"expected skip (the list may well hold this machine), got {row}"
