"""The EKS control-plane log group under Pulumi's mock engine: the stack creates `/aws/eks/<cluster>/cluster` with
the controlPlaneLogRetentionDays retention before the cluster, so EKS never makes one that keeps logs forever
(https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html), and `destroy` deletes it with the rest."""

from __future__ import annotations

import warnings

import pytest
from conftest import REPO

from infra.config import PROJECT, ConfigWarning, StackConfigError, stack_config_values, validate
from infra.mock_render import Render, run_program

LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def render(**overrides) -> Render:
    values = stack_config_values("us-east-2", REPO)
    values.update({f"{PROJECT}:{k}": str(v) for k, v in overrides.items()})
    return run_program("us-east-2", REPO, config=values)


@pytest.fixture(scope="module")
def east() -> Render:
    return render()


def log_group(r: Render):
    found = [x for x in r.records if x.type == LOG_GROUP]
    assert len(found) == 1, f"expected one log group, got {[x.name for x in found]}"
    return found[0]


def test_the_log_group_is_the_one_eks_writes_to_and_keeps_30_days(east):
    cluster = next(x for x in east.records if x.type == "eks:index:Cluster").inputs["name"]
    got = (log_group(east).inputs["name"], log_group(east).inputs["retentionInDays"])
    assert got == (f"/aws/eks/{cluster}/cluster", 30), got


def test_the_retention_key_sets_the_log_groups_retention():
    got = log_group(render(controlPlaneLogRetentionDays=7)).inputs["retentionInDays"]
    assert got == 7, got


def test_the_cluster_waits_for_the_log_group(east):
    cluster = next(x for x in east.records if x.type == "eks:index:Cluster")
    assert log_group(east).name in cluster.depends_on, cluster.depends_on


def test_a_retention_cloudwatch_does_not_offer_is_refused_with_the_choices():
    with (
        warnings.catch_warnings(),
        pytest.raises(StackConfigError, match="controlPlaneLogRetentionDays 10 is not a Cloud"),
    ):
        warnings.simplefilter("ignore", ConfigWarning)
        validate({"controlPlaneLogRetentionDays": 10}, stack="test", region="us-east-2")
