"""Clean-up paths under the faults a network gives, not only the service's refusal: the scale-down after a run
(automation/scaling.py, ``after_run``) and the cancel of probe reservations (automation/capacity_probe.py,
``cancel_all``). Each test shows the line the user reads and that whatever still costs money is named with the
command that stops it.

The faults are botocore's own exceptions, raised as botocore raises them once its retries are spent:
EndpointConnectionError (no route, DNS), ReadTimeoutError (the endpoint took the request and never answered) and
a ClientError whose code is ThrottlingException, EKS's and EC2's throttling error
(https://docs.aws.amazon.com/eks/latest/APIReference/CommonErrors.html).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from automation.capacity_probe import cancel_all
from automation.kube import ExecResult
from automation.scaling import Clock, after_run

EKS_URL = "https://eks.us-west-2.amazonaws.com"
EC2_URL = "https://ec2.us-west-2.amazonaws.com"


def _faults(url: str, operation: str) -> dict[str, Exception]:
    return {
        "unreachable": EndpointConnectionError(endpoint_url=url),
        "read-timeout": ReadTimeoutError(endpoint_url=url),
        "throttled": ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation),
    }


class FailingEks:
    """An EKS client whose ``failing`` call raises ``error``; the other answers as EKS's DescribeNodegroup does."""

    def __init__(self, failing: str, error: Exception):
        self.failing, self.error = failing, error
        self.updates: list[dict] = []

    def describe_nodegroup(self, **kw):
        if self.failing == "describe_nodegroup":
            raise self.error
        return {"nodegroup": {"scalingConfig": {"desiredSize": 2, "minSize": 0, "maxSize": 2}}}

    def update_nodegroup_config(self, **kw):
        if self.failing == "update_nodegroup_config":
            raise self.error
        self.updates.append(kw)


class IdleHead:
    """The RayCluster's head as the job check before a scale-down sees it: its job server lists no job."""

    namespace = "ray"

    def __init__(self):
        self.kube = SimpleNamespace(exec=lambda pod, ns, cmd, **kw: ExecResult(0, "[]\n", ""))

    def head_pod(self) -> str:
        return "ray-efa-head-abcde"


def _target(eks: FailingEks) -> SimpleNamespace:
    cfg = SimpleNamespace(stack="us-west-2", gpu_nodes=SimpleNamespace(idle_nodes=0, idle_minutes=30))
    outputs = {"cluster_name": "ray-efa-eks", "nodegroup_name": "gpu-ng", "region": "us-west-2"}
    clock = Clock(now=lambda: 0.0, sleep=lambda s: None)
    deps = SimpleNamespace(client=lambda name: eks, clock=clock)
    return SimpleNamespace(cfg=cfg, outputs=lambda: outputs, deps=deps, ray_pods=IdleHead, on_progress=lambda s: None)


@pytest.mark.parametrize("call", ["describe_nodegroup", "update_nodegroup_config"])
@pytest.mark.parametrize("fault", sorted(_faults(EKS_URL, "UpdateNodegroupConfig")))
def test_a_scale_down_that_fails_on_the_network_names_the_nodes_left_and_the_command(call, fault):
    error = _faults(EKS_URL, "UpdateNodegroupConfig")[fault]
    line = after_run(_target(FailingEks(call, error)), keep_nodes=False)
    assert line.startswith("GPU nodes NOT scaled down"), f"{call} {fault}: {line}"
    assert "gpu-ng" in line, f"{call} {fault}: the node group left running is not named: {line}"
    assert "`python -m automation scale --stack us-west-2 --gpu-nodes 0`" in line, f"{call} {fault}: {line}"


def test_a_scale_down_that_fails_never_raises_over_the_runs_own_failure():
    # the clean-up runs in the run's finally: an exception here would replace the step's own error
    eks = FailingEks("update_nodegroup_config", RuntimeError("connection pool is closed"))
    line = after_run(_target(eks), keep_nodes=False)
    assert "NOT scaled down (RuntimeError: connection pool is closed)" in line, line


class FailingEc2:
    """An EC2 client whose cancel of the reservations in ``failing`` raises ``error``."""

    def __init__(self, failing: set[str], error: Exception):
        self.failing, self.error = failing, error
        self.cancelled: list[str] = []

    def cancel_capacity_reservation(self, CapacityReservationId: str):  # noqa: N803 - boto3's argument name
        if CapacityReservationId in self.failing:
            raise self.error
        self.cancelled.append(CapacityReservationId)
        return {"Return": True}


@pytest.mark.parametrize("fault", sorted(_faults(EC2_URL, "CancelCapacityReservation")))
def test_a_reservation_whose_cancel_fails_on_the_network_is_named_with_its_cancel_command(fault):
    error = _faults(EC2_URL, "CancelCapacityReservation")[fault]
    ec2 = FailingEc2({"cr-0bbbbbbbbbbbbbbbb"}, error)
    ids = ("cr-0aaaaaaaaaaaaaaaa", "cr-0bbbbbbbbbbbbbbbb", "cr-0cccccccccccccccc")
    created = [(ec2, "us-west-2", cr) for cr in ids]
    said: list[str] = []
    left = cancel_all(created, said.append)
    expected = "aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-0bbbbbbbbbbbbbbbb --region us-west-2"
    assert len(left) == 1 and expected in left[0], (
        f"{fault}: expected the one uncancelled reservation named, got {left}"
    )
    assert sorted(ec2.cancelled) == ["cr-0aaaaaaaaaaaaaaaa", "cr-0cccccccccccccccc"], (
        f"{fault}: one failed cancel stopped the others: cancelled {ec2.cancelled}"
    )
    assert any("NOT cancelled" in s and expected in s for s in said), f"{fault}: the user was not told: {said}"
