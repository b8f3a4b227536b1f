"""The rules of a probe reservation (automation/capacity_probe.py), in process against the stand-in of EC2's
Capacity Reservation calls (tests/support/_reservations_world.py, which names its sources and validates every
call against botocore's EC2 model): what a probe asks for, how its reservations are recognised, cancelled, swept,
and what the user is told.

Numbers written here from EC2's API reference: a ClientToken holds at most 64 ASCII characters ("Ensure
idempotency", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html); a probe ends
an hour after it is made (EndDateType limited, the module's documented lifetime); the states that hold capacity
are ``active`` and ``pending`` (API_CapacityReservation.html, State).
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import pytest
from _reservations_world import World
from botocore.exceptions import ClientError, EndpointConnectionError

from automation.capacity import Zone
from automation.capacity_probe import (
    cancel_all,
    cancel_command,
    cleanup,
    client_token,
    create_probe,
    is_probe,
    live_probes,
    new_run_id,
    probe,
    probe_tags,
    sweep,
)
from automation.errors import DriverError

G6, WEST, EAST = "g6.12xlarge", "us-west-2", "us-east-2"
NOW = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)
TAGS = [
    {"Key": "ray-efa-eks:tool", "Value": "ray-efa-eks"},
    {"Key": "ray-efa-eks:purpose", "Value": "capacity-probe"},
]


def zone(region: str, az: str, usable: bool = True) -> Zone:
    """A zone the survey found offered with EFA, within the quota (or short of it: 96 needed, 48 free)."""
    return Zone(region, az, True, efa=True, vcpus_needed=96, vcpus_free=1000 if usable else 48)


def test_a_run_id_is_twelve_hex_characters_and_new_each_time():
    a, b = new_run_id(), new_run_id()
    assert len(a) == 12 and int(a, 16) >= 0 and a != b, (a, b)


def test_the_tags_name_the_tool_the_purpose_and_the_run():
    assert probe_tags("run1") == [*TAGS, {"Key": "ray-efa-eks:probe-run", "Value": "run1"}]


def test_a_client_token_is_cut_to_ec2s_64_characters():
    token = client_token("a" * 12, "us-west-2a" + "x" * 60)
    assert token == ("ray-efa-eks-probe-" + "a" * 12 + "-us-west-2a" + "x" * 60)[:64] and len(token) == 64, token


def test_the_cancel_command_names_the_reservation_and_its_region():
    got = cancel_command("cr-0123", WEST)
    assert got == "aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-0123 --region us-west-2", got


def test_a_probe_reservation_is_targeted_linux_of_the_count_in_the_az_for_an_hour():
    w = World({(WEST, "us-west-2a"): 4})
    cr = create_probe(w.client(WEST), G6, 3, "us-west-2a", "run1", NOW)
    ((op, ask),) = w.requests
    assert ask == {
        "ClientToken": "ray-efa-eks-probe-run1-us-west-2a",
        "InstanceType": G6,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-west-2a",
        "InstanceCount": 3,
        "InstanceMatchCriteria": "targeted",
        "EndDateType": "limited",
        "EndDate": NOW + timedelta(hours=1),
        "TagSpecifications": [{"ResourceType": "capacity-reservation", "Tags": probe_tags("run1")}],
    }, ask
    assert w.live() == [cr], w.reservations


@pytest.mark.parametrize(
    "tags, run_id, mine",
    [
        (probe_tags("run1"), None, True),
        (probe_tags("run1"), "run1", True),
        (probe_tags("run1"), "run2", False),
        (TAGS[:1] + [{"Key": "ray-efa-eks:purpose", "Value": "training"}], None, False),
        (TAGS[1:], None, False),  # the tool's tag missing
        ([], None, False),
    ],
)
def test_a_probe_is_known_by_both_tool_tags_and_its_run(tags, run_id, mine):
    assert is_probe({"Tags": tags}, run_id) is mine


def test_a_reservation_without_tags_is_not_a_probe():
    assert is_probe({}) is False


def test_live_probes_asks_for_the_states_that_hold_capacity_and_reads_every_page():
    w = World({(WEST, "us-west-2a"): 10}, page_size=2)
    mine = [w.add(WEST, "us-west-2a", 1, probe_tags("r1")) for _ in range(3)]
    w.add(WEST, "us-west-2a", 1, [])  # the user's own reservation
    assert live_probes(w.client(WEST)) == mine
    first = next(kw for op, kw in w.requests if op == "describe_capacity_reservations")
    assert first == {"Filters": [{"Name": "state", "Values": ["active", "pending"]}]}, first


class Ec2Pages:
    """EC2 answering one page of reservations as given (the state filter asked is recorded, not applied)."""

    def __init__(self, reservations):
        self.reservations = reservations

    def get_paginator(self, name):
        assert name == "describe_capacity_reservations", name
        return self

    def paginate(self, **kw):
        yield {"CapacityReservations": self.reservations}


@pytest.mark.parametrize("state, live", [("active", True), ("pending", True), ("cancelled", False), (None, True)])
def test_only_probes_that_still_hold_capacity_are_live(state, live):
    cr = {"CapacityReservationId": "cr-1", "Tags": probe_tags("r1")}
    if state:
        cr["State"] = state
    assert live_probes(Ec2Pages([cr])) == (["cr-1"] if live else [])


def test_live_probes_of_one_run_leave_the_others():
    w = World({(WEST, "us-west-2a"): 10})
    w.add(WEST, "us-west-2a", 1, probe_tags("r1"))
    theirs = w.add(WEST, "us-west-2a", 1, probe_tags("r2"))
    assert live_probes(w.client(WEST), "r2") == [theirs]


def test_cancel_all_cancels_each_says_so_and_empties_the_list():
    w = World({(WEST, "us-west-2a"): 10})
    ec2 = w.client(WEST)
    created = [(ec2, WEST, w.add(WEST, "us-west-2a", 1, probe_tags("r1"))) for _ in range(2)]
    ids = [cr for _, _, cr in created]
    said: list[str] = []
    assert cancel_all(created, said.append) == [] and created == [], created
    assert w.live() == [] and said == [f"cancelled probe reservation {cr} in us-west-2" for cr in reversed(ids)], said


def test_a_cancel_refused_names_the_code_and_the_command():
    w = World({(WEST, "us-west-2a"): 10})
    cr = w.add(WEST, "us-west-2a", 1, probe_tags("r1"))
    w.fail("cancel_capacity_reservation", ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "Cancel"))
    said: list[str] = []
    left = cancel_all([(w.client(WEST), WEST, cr)], said.append)
    line = f"{cr} in us-west-2 (UnauthorizedOperation): {cancel_command(cr, WEST)}"
    assert left == [line] and said == [f"probe reservation {cr} in us-west-2 NOT cancelled: {line}"], (left, said)


def test_sweep_cancels_what_it_finds_in_each_region_and_says_how_many():
    w = World({(WEST, "us-west-2a"): 10, (EAST, "us-east-2a"): 10})
    west = [w.add(WEST, "us-west-2a", 1, probe_tags("r0")) for _ in range(2)]
    east = w.add(EAST, "us-east-2a", 1, probe_tags("r0"))
    said: list[str] = []
    assert sweep([WEST, EAST], w.client, said.append) == [] and w.live() == [], w.reservations
    assert f"2 probe reservation(s) left in us-west-2: {west[0]}, {west[1]}" in said, said
    assert f"1 probe reservation(s) left in us-east-2: {east}" in said, said


def test_sweep_of_a_clean_region_says_nothing():
    said: list[str] = []
    assert sweep([WEST], World({(WEST, "us-west-2a"): 1}).client, said.append) == [] and said == [], said


def test_a_region_that_cannot_be_searched_is_named_with_the_cleanup_command_and_the_next_is_swept():
    w = World({(WEST, "us-west-2a"): 10, (EAST, "us-east-2a"): 10})
    east = w.add(EAST, "us-east-2a", 1, probe_tags("r0"))
    w.fail("describe_capacity_reservations", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"))
    said: list[str] = []
    left = sweep([WEST, EAST], w.client, said.append)
    line = (
        "us-west-2 could not be searched (EndpointConnectionError): "
        "python -m automation capacity --cleanup --regions us-west-2"
    )
    assert left == [line] and said[0] == f"probe reservations in us-west-2 NOT searched: {line}", (left, said)
    assert east not in w.live(), "one unsearchable region stopped the sweep of the next"


def test_probe_marks_each_usable_zone_and_leaves_the_others_unprobed():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 0})
    zones = [zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b"), zone(WEST, "us-west-2c", usable=False)]
    said: list[str] = []
    out = probe(zones, w.client, G6, 2, said.append, run_id="r1", clock=lambda: NOW)
    assert [(z.az, z.probe) for z in out] == [
        ("us-west-2a", "capacity now"),
        ("us-west-2b", "InsufficientInstanceCapacity"),
        ("us-west-2c", ""),
    ], out
    created = next(s for s in said if s.startswith("probe us-west-2a"))
    assert created.startswith("probe us-west-2a: reservation cr-") and created.endswith(" of 2 x g6.12xlarge created")
    assert w.live() == [], w.reservations


def test_probe_sweeps_each_probed_region_once_before_it_creates():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 2, (EAST, "us-east-2a"): 0})
    zones = [zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b"), zone(EAST, "us-east-2a", usable=False)]
    probe(zones, w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    ops = [op for op, _ in w.requests]
    assert ops[:2] == ["describe_capacity_reservations", "create_capacity_reservation"], ops
    assert ops.count("describe_capacity_reservations") == 1, ops


def test_a_probe_without_a_run_id_makes_one():
    w = World({(WEST, "us-west-2a"): 2})
    probe([zone(WEST, "us-west-2a")], w.client, G6, 1, clock=lambda: NOW)
    ask = next(kw for op, kw in w.requests if op == "create_capacity_reservation")
    run = ask["TagSpecifications"][0]["Tags"][2]["Value"]
    assert len(run) == 12 and ask["ClientToken"] == f"ray-efa-eks-probe-{run}-us-west-2a", ask


def test_a_probe_that_leaves_a_reservation_refuses_naming_it_and_cleanup():
    w = World({(WEST, "us-west-2a"): 2})
    w.fail("cancel_capacity_reservation", ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "Cancel"))
    with pytest.raises(DriverError) as e:
        probe([zone(WEST, "us-west-2a")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    text = str(e.value)
    assert text.startswith("probe reservations that may still exist (billed at the On-Demand rate"), text
    assert "aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-" in text, text
    assert text.endswith("`python -m automation capacity --cleanup` finds and cancels every one"), text


def test_cleanup_refuses_while_a_region_cannot_be_searched():
    w = World({(WEST, "us-west-2a"): 2})
    w.fail("describe_capacity_reservations", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"))
    with pytest.raises(DriverError, match="us-west-2 could not be searched"):
        cleanup([WEST], w.client)


def test_cleanup_of_clean_regions_returns_quietly():
    assert cleanup([WEST], World({(WEST, "us-west-2a"): 1}).client) is None


def test_a_ctrl_c_while_cancelling_waits_for_the_cancel_then_is_raised():
    w = World({(WEST, "us-west-2a"): 2})
    cr = w.add(WEST, "us-west-2a", 1, probe_tags("r1"))
    ec2 = w.client(WEST)
    real_cancel = ec2.cancel_capacity_reservation

    def cancel_with_a_ctrl_c(**kw):
        signal.raise_signal(signal.SIGINT)  # lands while the cancel is under way
        return real_cancel(**kw)

    ec2.cancel_capacity_reservation = cancel_with_a_ctrl_c
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        cancel_all([(ec2, WEST, cr)], lambda s: None)
    assert w.live() == [] and signal.getsignal(signal.SIGINT) is previous, "the cancel did not finish first"


def test_a_page_without_reservations_is_read_as_none():
    class EmptyPage(Ec2Pages):
        def paginate(self, **kw):
            yield {}

    assert live_probes(EmptyPage([])) == []


def test_two_reservations_left_are_named_apart():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 2})
    w.fail("cancel_capacity_reservation", ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "Cancel"))
    w.fail("cancel_capacity_reservation", ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "Cancel"))
    with pytest.raises(DriverError) as e:
        probe([zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    assert "--region us-west-2; cr-" in str(e.value), e.value


def test_a_probe_first_sweeps_and_tells_what_an_earlier_run_left():
    w = World({(WEST, "us-west-2a"): 4})
    old = w.add(WEST, "us-west-2a", 1, probe_tags("r0"))
    said: list[str] = []
    probe([zone(WEST, "us-west-2a")], w.client, G6, 1, said.append, run_id="r1", clock=lambda: NOW)
    assert said[0] == f"1 probe reservation(s) left in us-west-2: {old}", said


def test_a_refused_zone_does_not_stop_the_probe_of_the_next():
    w = World({(WEST, "us-west-2a"): 0, (WEST, "us-west-2b"): 2})
    out = probe([zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    assert {z.az: z.probe for z in out} == {"us-west-2a": "InsufficientInstanceCapacity", "us-west-2b": "capacity now"}


def test_a_region_the_first_sweep_could_not_search_is_still_named_after_the_probe():
    w = World({(WEST, "us-west-2a"): 2, (EAST, "us-east-2a"): 2})
    w.fail("describe_capacity_reservations", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"))
    with pytest.raises(DriverError, match="us-west-2 could not be searched"):
        probe([zone(WEST, "us-west-2a"), zone(EAST, "us-east-2a")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)


def test_each_probe_reservation_is_cancelled_before_the_next_is_made():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 2})
    probe([zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    ops = [op for op, _ in w.requests if op != "describe_capacity_reservations"]
    assert ops == ["create_capacity_reservation", "cancel_capacity_reservation"] * 2, ops


def test_a_ctrl_c_right_after_a_create_still_cancels_it_and_says_so():
    w = World({(WEST, "us-west-2a"): 2})
    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        if text.startswith("probe us-west-2a: reservation"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probe([zone(WEST, "us-west-2a")], w.client, G6, 1, say, run_id="r1", clock=lambda: NOW)
    assert w.live() == [] and said[-1].startswith("cancelled probe reservation cr-"), (w.reservations, said)


def test_a_lost_create_sweeps_this_runs_reservation_and_leaves_another_runs():
    w = World({(WEST, "us-west-2a"): 4})
    w.fail("create_capacity_reservation", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"), after=True)
    theirs: list[str] = []

    def ec2_for(region: str):
        ec2 = w.client(region)
        create = ec2.create_capacity_reservation

        def create_beside_another_run(**kw):
            theirs.append(w.add(WEST, "us-west-2a", 1, probe_tags("r2")))  # a probe of another run, meanwhile
            return create(**kw)

        ec2.create_capacity_reservation = create_beside_another_run
        return ec2

    said: list[str] = []
    out = probe([zone(WEST, "us-west-2a")], ec2_for, G6, 1, said.append, run_id="r1", clock=lambda: NOW)
    assert w.live() == theirs, f"expected only the other run's {theirs} left, got {w.live()}"
    assert out[0].probe == "EndpointConnectionError" and any(s.startswith("cancelled probe") for s in said), said
