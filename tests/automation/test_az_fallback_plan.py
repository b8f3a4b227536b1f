"""The plan of an `up --auto-az` move (automation/az_fallback.py), read from two renders of the program under Pulumi's
mocks: the us-east-2 stack with its GPU nodes in us-east-2b, then in us-east-2c. A render is not a preview (it has no
state to diff), so the plan is read the way Pulumi's engine would make it: a resource whose name and inputs are the
same in both renders is left alone; a changed input that forces a new resource (a NAT gateway's subnet, a node
group's subnets) replaces it, creating the new one before deleting the old unless the resource is
delete_before_replace. A NAT gateway replaced create-before-delete asks for the Elastic IP the old one still holds
and the move fails (pulumi/pulumi-aws#1483, closed by design)."""

from __future__ import annotations

import pytest
from conftest import REPO

from infra.config import PROJECT, stack_config_values
from infra.mock_render import Render, ResourceRecord, run_program

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
