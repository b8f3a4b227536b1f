"""Which EC2 vCPU quota covers an instance family (automation/ec2.py). The codes are those Service Quotas lists for
EC2 (`aws service-quotas list-service-quotas --service-code ec2`; published listings of it, read 2026-12-06)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from automation.ec2 import check_quota, quota_for, spot_quota_for


@pytest.mark.parametrize(
    "instance_type, code",
    [
        ("gr6.4xlarge", "L-DB2E81BA"),  # a G instance: "Running On-Demand G and VT instances"
        ("trn1.32xlarge", "L-2C3B7624"),  # "Running On-Demand Trn instances"
        ("inf2.48xlarge", "L-1945791B"),  # "Running On-Demand Inf instances"
        ("dl1.24xlarge", "L-6E869C2A"),  # "Running On-Demand DL instances"
        ("p5.48xlarge", "L-417A185B"),  # "Running On-Demand P instances"
    ],
)
def test_each_accelerated_family_counts_under_its_own_on_demand_quota(instance_type, code):
    assert quota_for(instance_type)[0] == code, quota_for(instance_type)


@pytest.mark.parametrize(
    "instance_type, code",
    [("g6.12xlarge", "L-3819A6DF"), ("gr6.4xlarge", "L-3819A6DF"), ("p5.48xlarge", "L-7212CCBC")],
)
def test_the_spot_quota_of_a_family_is_its_all_spot_requests_quota(instance_type, code):
    assert spot_quota_for(instance_type)[0] == code, spot_quota_for(instance_type)


# ---- preflight's vCPU quota row at its boundary: a quota the node group fills exactly is enough.
#
# The clients are small fakes answering with the shapes of Service Quotas' GetServiceQuota and EC2's
# DescribeInstances / DescribeInstanceTypes responses
# (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html,
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html), so only the
# arithmetic of `check_quota` and the row it makes are under test.

G6_VCPUS = 48  # g6.12xlarge's DefaultVCpus
VCPUS = {"g6.12xlarge": G6_VCPUS, "vt1.3xlarge": 12, "m7i.xlarge": 4}  # DescribeInstanceTypes' DefaultVCpus


class Quotas:
    def __init__(self, value: float | None):
        self.value = value  # None: GetServiceQuota is denied

    def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict:  # noqa: N803 (boto3's spelling)
        if self.value is None:
            error = {"Error": {"Code": "AccessDeniedException", "Message": "denied"}}
            raise ClientError(error, "GetServiceQuota")
        return {"Quota": {"ServiceCode": ServiceCode, "QuotaCode": QuotaCode, "Value": self.value}}


class Ec2:
    """`running` g6.12xlarge instances are running, `pending` are pending and `others` (types) are
    running; the paginator honours DescribeInstances' instance-state-name filter as EC2 does."""

    def __init__(self, running: int, pending: int = 0, others: tuple[str, ...] = ()):
        self.instances = [{"InstanceType": "g6.12xlarge", "State": {"Name": "running"}}] * running
        self.instances += [{"InstanceType": "g6.12xlarge", "State": {"Name": "pending"}}] * pending
        self.instances += [{"InstanceType": t, "State": {"Name": "running"}} for t in others]

    def get_paginator(self, name: str):
        assert name == "describe_instances", f"expected the describe_instances paginator, got {name!r}"

        def paginate(_self, Filters=()):  # noqa: N803
            states = [f["Values"] for f in Filters if f["Name"] == "instance-state-name"]
            found = [i for i in self.instances if not states or i["State"]["Name"] in states[0]]
            return [{"Reservations": [{"Instances": found}]}]

        return type("Paginator", (), {"paginate": paginate})()

    def describe_instance_types(self, InstanceTypes: list[str]) -> dict:  # noqa: N803
        return {"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": VCPUS[t]}} for t in InstanceTypes]}

    # The rest of the driver's EC2 protocol (automation/aws_clients.py), which the quota row never calls.
    def describe_availability_zones(self) -> dict:
        raise AssertionError("the quota row asked EC2 for the availability zones")

    def describe_capacity_reservations(self, **params: object) -> dict:
        raise AssertionError(f"the quota row asked EC2 for capacity reservations {params}")

    def describe_regions(self) -> dict:
        raise AssertionError("the quota row asked EC2 for the regions")


def quota_row(quota: float | None, running: int, nodes: int = 2, pending: int = 0, others: tuple[str, ...] = ()):
    ec2 = Ec2(running, pending, others)
    finding, need, free = check_quota(Quotas(quota), ec2, "g6.12xlarge", G6_VCPUS, nodes, "us-west-2")
    return finding, need, free


@pytest.mark.parametrize(("quota", "running"), [(96, 0), (144, 1)], ids=["empty-account", "one-node-running"])
def test_quota_the_node_group_fills_exactly_passes(quota, running):
    finding, need, free = quota_row(quota, running)
    assert (need, free) == (96, 96), f"expected 96 vCPUs needed and 96 free, got {need} needed and {free} free"
    assert finding.status == "pass", f"expected a free quota equal to the need to pass, got {finding}"


def test_quota_one_vcpu_short_fails_asking_for_exactly_the_need():
    finding, _, _ = quota_row(143, 1)
    expected = "--desired-value 144 "
    assert finding.status == "fail" and expected in finding.fix, (
        f"expected a fail whose fix contains {expected!r}, got {finding}"
    )


@pytest.mark.parametrize(("running", "pending"), [(2, 0), (1, 1)], ids=["two-running", "one-running-one-pending"])
def test_every_running_or_pending_node_counts_against_the_quota(running, pending):
    finding, _, free = quota_row(191, running, pending=pending)
    assert (free, finding.status) == (95, "fail"), (
        f"expected 191 - 2 x 48 = 95 vCPUs free, short of 96, got {free} free and {finding.status}"
    )


def test_vt_instances_count_against_the_g_quota_and_standard_ones_do_not():
    _, _, free = quota_row(156, 1, others=("vt1.3xlarge", "m7i.xlarge"))
    assert free == 96, f"expected 156 - 48 (g6) - 12 (vt1) = 96 vCPUs free, the m7i not counted, got {free}"


def test_quota_that_passes_shows_its_arithmetic_and_no_fix():
    finding, _, _ = quota_row(144, 1)
    expected = "'Running On-Demand G and VT instances' is 144 vCPUs, 48 in use, 96 free; 2 x g6.12xlarge need 96"
    assert (finding.status, finding.detail, finding.fix) == ("pass", expected, ""), f"got {finding}"


def test_unreadable_quota_fails_with_the_command_that_reads_it():
    finding, need, free = quota_row(None, 0)
    expected_fix = "aws service-quotas get-service-quota --service-code ec2 --quota-code L-DB2E81BA --region us-west-2"
    assert (finding.check, finding.status, need, free) == ("vCPU quota L-DB2E81BA", "fail", 96, None), f"got {finding}"
    assert finding.detail == "cannot read 'Running On-Demand G and VT instances': AccessDeniedException: denied", (
        f"expected the quota's title and the error, got {finding.detail!r}"
    )
    assert finding.fix == expected_fix, f"expected fix {expected_fix!r}, got {finding.fix!r}"
