"""preflight's vCPU quota row at its boundary: a quota the node group fills exactly is enough.

The clients are small fakes answering with the shapes of Service Quotas' GetServiceQuota and EC2's
DescribeInstances / DescribeInstanceTypes responses
(https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html), so only the
arithmetic of `check_quota` is under test.
"""

from __future__ import annotations

import pytest

from automation.steps.preflight import check_quota

G6_VCPUS = 48  # g6.12xlarge's DefaultVCpus


class Quotas:
    def __init__(self, value: float):
        self.value = value

    def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict:  # noqa: N803 (boto3's spelling)
        return {"Quota": {"ServiceCode": ServiceCode, "QuotaCode": QuotaCode, "Value": self.value}}


class Ec2:
    """`running` g6.12xlarge instances are running and `pending` are pending; the paginator honours
    DescribeInstances' instance-state-name filter as EC2 does."""

    def __init__(self, running: int, pending: int = 0):
        self.instances = [{"InstanceType": "g6.12xlarge", "State": {"Name": "running"}}] * running
        self.instances += [{"InstanceType": "g6.12xlarge", "State": {"Name": "pending"}}] * pending

    def get_paginator(self, name: str):
        assert name == "describe_instances", f"expected the describe_instances paginator, got {name!r}"

        def paginate(_self, Filters=()):  # noqa: N803
            states = [f["Values"] for f in Filters if f["Name"] == "instance-state-name"]
            found = [i for i in self.instances if not states or i["State"]["Name"] in states[0]]
            return [{"Reservations": [{"Instances": found}]}]

        return type("Paginator", (), {"paginate": paginate})()

    def describe_instance_types(self, InstanceTypes: list[str]) -> dict:  # noqa: N803
        return {"InstanceTypes": [{"InstanceType": t, "VCpuInfo": {"DefaultVCpus": G6_VCPUS}} for t in InstanceTypes]}


def quota_row(quota: float, running: int, nodes: int = 2, pending: int = 0):
    ec2 = Ec2(running, pending)
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
