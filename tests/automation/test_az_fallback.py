"""`up --auto-az`'s bound and its reading of a failed `up`, with a stand-in target (the driver-level behaviour is in
tests/automation/commands/test_run_steps.py). The capacity wording is EC2's: the error code InsufficientInstanceCapacity
and the Auto Scaling activity's "We currently do not have sufficient <type> capacity in the Availability Zone you
requested" (EC2 user guide, troubleshooting-launch.html#troubleshooting-launch-capacity)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError
from conftest import REPO

from automation import az_fallback
from automation.capacity_finder import Zone, next_az
from automation.errors import DriverError
from automation.pipeline import Clock, StepResult
from infra.config import PROJECT, stack_config_values
from infra.mock_render import Render, ResourceRecord, run_program

AZS = ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d")


class Target:
    """What up_with_fallback uses of AwsTarget: cfg's AZs, run.auto_az, note, set_gpu_az, deps.confirm."""

    def __init__(self, auto_az: bool = True):
        self.run = SimpleNamespace(auto_az=auto_az)
        self.cfg = SimpleNamespace(
            network=SimpleNamespace(azs=AZS), gpu_nodes=SimpleNamespace(availability_zone=AZS[0])
        )
        self.notes: list[str] = []
        self.deps = SimpleNamespace(confirm=lambda q: False)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def set_gpu_az(self, az: str) -> None:
        self.cfg.gpu_nodes.availability_zone = az


RETIRE = az_fallback.retire_gpu_groups  # the real one; the fixture below stands it in for the other tests
USABLE = [Zone("us-west-2", az, True, efa=True, vcpus_needed=96, vcpus_free=1000.0) for az in AZS]


@pytest.fixture(autouse=True)
def every_az_usable(monkeypatch):
    monkeypatch.setattr(az_fallback, "stack_zones", lambda target: USABLE)
    # The node groups are emptied against EKS: tests/automation/commands/test_run_steps.py (moto), and below.
    monkeypatch.setattr(az_fallback, "retire_gpu_groups", lambda target: None)


def short_everywhere(attempts: list[str], target: Target):
    def attempt() -> StepResult:
        attempts.append(target.cfg.gpu_nodes.availability_zone)
        raise DriverError("pulumi up failed: AsgInstanceLaunchFailures: InsufficientInstanceCapacity")

    return attempt


def test_auto_az_tries_at_most_max_moves_other_azs():
    target, attempts = Target(), []
    with pytest.raises(DriverError):
        az_fallback.up_with_fallback(target, short_everywhere(attempts, target))
    assert len(attempts) == 1 + az_fallback.MAX_MOVES, f"expected {1 + az_fallback.MAX_MOVES} ups, got {attempts}"


def test_a_failure_other_than_capacity_is_not_retried():
    target, attempts = Target(), []

    def attempt() -> StepResult:
        attempts.append("up")
        raise DriverError("pulumi up failed: AccessDenied: not authorized to perform eks:CreateNodegroup")

    with pytest.raises(DriverError, match="AccessDenied"):
        az_fallback.up_with_fallback(target, attempt)
    assert attempts == ["up"], attempts


@pytest.mark.parametrize(
    "error",
    [
        "AsgInstanceLaunchFailures: InsufficientInstanceCapacity",
        "We currently do not have sufficient g6.12xlarge capacity in the Availability Zone you requested (us-west-2a).",
    ],
)
def test_ec2s_capacity_wordings_read_as_short(error):
    assert az_fallback.capacity_short(error), error


def test_spot_scores_reversed_leave_the_auto_az_order_as_it_was():
    # A Spot placement score rates a Spot request for any of the family's types (botocore's EC2 model,
    # GetSpotPlacementScores), not On-Demand capacity for this type: it must not choose where the nodes go.
    orders = []
    for scores in ((9, 1), (1, 9)):
        scored = [replace(z, spot_score=s, spot_quota_vcpus=1000.0) for z, s in zip(USABLE[1:3], scores, strict=True)]
        orders.append([next_az(scored, ["us-west-2a"], AZS), next_az(scored, ["us-west-2a", "us-west-2b"], AZS)])
    assert orders[0] == orders[1] == ["us-west-2b", "us-west-2c"], f"--auto-az's order for each way round: {orders}"


class FailedGroupEks:
    """EKS with one GPU node group CREATE_FAILED (EKS's status for a group whose instances never launched:
    https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html) that DeleteNodegroup turns DELETING,
    and gone (DescribeNodegroup's ResourceNotFoundException) ``deleting_polls`` describes after."""

    def __init__(self, deleting_polls: int = 2):
        self.status, self.polls_left = "CREATE_FAILED", deleting_polls
        self.calls: list[tuple[str, str]] = []

    def list_nodegroups(self, clusterName):  # noqa: N803 (boto3's keyword)
        return {"nodegroups": ["gpu-a"]}

    def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803
        if self.status == "DELETING":
            if self.polls_left == 0:
                error = {"Error": {"Code": "ResourceNotFoundException", "Message": "No node group found"}}
                raise ClientError(error, "DescribeNodegroup")
            self.polls_left -= 1
        return {"nodegroup": {"nodegroupName": nodegroupName, "status": self.status, "labels": {"role": "gpu-worker"}}}

    def delete_nodegroup(self, clusterName, nodegroupName):  # noqa: N803
        self.calls.append(("delete", nodegroupName))
        self.status = "DELETING"
        return {}


def retiring_target(eks: FailedGroupEks, slept: list[float]) -> SimpleNamespace:
    progress: list[str] = []
    return SimpleNamespace(
        cfg=SimpleNamespace(cluster=SimpleNamespace(name="ray-efa-eks"), region="us-west-2"),
        deps=SimpleNamespace(client=lambda name: eks, clock=Clock(lambda: sum(slept), slept.append)),
        on_progress=progress.append,
        progress=progress,
        notes=[],
        note=lambda text: None,
    )


def test_a_create_failed_gpu_group_is_deleted_and_waited_for_before_the_move():
    eks, slept = FailedGroupEks(), []
    target = retiring_target(eks, slept)
    RETIRE(target)
    assert (eks.calls, eks.polls_left, len(target.progress)) == ([("delete", "gpu-a")], 0, 2), (
        f"expected a delete, then two shown polls until EKS no longer knows the group: {eks.calls}, {target.progress}"
    )


# ---- The plan of an `up --auto-az` move (automation/az_fallback.py), read from two renders of the program under
# Pulumi's
# mocks: the us-east-2 stack with its GPU nodes in us-east-2b, then in us-east-2c. A render is not a preview (it has no
# state to diff), so the plan is read the way Pulumi's engine would make it: a resource whose name and inputs are the
# same in both renders is left alone; a changed input that forces a new resource (a NAT gateway's subnet, a node
# group's subnets) replaces it, creating the new one before deleting the old unless the resource is
# delete_before_replace. A NAT gateway replaced create-before-delete asks for the Elastic IP the old one still holds
# and the move fails (pulumi/pulumi-aws#1483, closed by design).

STACK, HERE, THERE = "us-east-2", "us-east-2b", "us-east-2c"
EIP = "aws:ec2/eip:Eip"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"


def render_in(gpu_az: str) -> Render:
    values = stack_config_values(STACK, REPO)
    values[f"{PROJECT}:gpuAvailabilityZone"] = gpu_az
    return run_program(STACK, REPO, config=values)


@pytest.fixture(scope="module")
def move() -> tuple[Render, Render]:
    return render_in(HERE), render_in(THERE)


def holding_the_eip(r: Render) -> list[ResourceRecord]:
    """The Elastic IP and every resource that takes its allocation id (RenderMocks gives a resource the id
    '<name>-id')."""
    ids = {f"{x.name}-id" for x in r.records if x.type == EIP}
    return [x for x in r.records if x.type == EIP or x.inputs.get("allocationId") in ids]


def test_a_move_leaves_the_elastic_ip_and_the_nat_gateway_as_they_are(move):
    before, after = move
    after_by_name = {(x.type, x.name): x for x in after.records}
    holders = holding_the_eip(before)
    changed = [
        x.name for x in holders if (same := after_by_name.get((x.type, x.name))) is None or same.inputs != x.inputs
    ]
    assert len(holders) == 2 and changed == [], (
        f"expected the EIP and the NAT gateway unchanged by the move, got {changed} of {[x.name for x in holders]}"
    )


def test_a_replaced_nat_gateway_gives_up_its_elastic_ip_before_the_new_one_asks(move):
    nat = [x for x in holding_the_eip(move[0]) if x.type != EIP]
    assert [x.delete_before_replace for x in nat] == [True], f"expected one delete_before_replace NAT, got {nat}"


def test_the_placement_group_of_another_az_is_a_new_group(move):
    names = [[x.name for x in r.records if x.type == PLACEMENT_GROUP] for r in move]
    assert len(names[0]) == len(names[1]) == 1 and names[0] != names[1], f"placement groups by render: {names}"
    assert HERE in names[0][0] and THERE in names[1][0], f"expected each AZ in its group's name: {names}"
