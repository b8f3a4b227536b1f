"""Which EC2 vCPU quota covers an instance family (automation/ec2.py). The codes are those Service Quotas lists for
EC2 (`aws service-quotas list-service-quotas --service-code ec2`; published listings of it, read 2026-12-06)."""

from __future__ import annotations

import pytest

from automation.ec2 import quota_for, spot_quota_for


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
