"""`capacity --probe` and `--cleanup` (automation/capacity_probe.py) against a stand-in of EC2's Capacity Reservation
calls (tests/support/_reservations_world.py names its sources and checks every call against botocore's model):
no probe reservation outlives the command, a killed process included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from _capacity_world import args_for
from _reservations_world import FileWorld, Killed, World
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from conftest import REPO

from automation.capacity_finder import Zone
from automation.capacity_probe import (
    cancel_all,
    cancel_command,
    cleanup,
    client_token,
    create_probe,
    is_probe,
    live_probes,
    probe,
    probe_tags,
    sweep,
)
from automation.commands import capacity as command
from automation.errors import DriverError
from automation.ui import Ui

G6 = "g6.12xlarge"
WEST, EAST = "us-west-2", "us-east-1"
NOW = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)


def zone(region: str, az: str) -> Zone:
    """A zone the survey found usable: offered, EFA, within the On-Demand quota (96 of 1000 vCPUs)."""
    return Zone(region, az, True, efa=True, vcpus_needed=96, vcpus_free=1000)


def world(**free: int) -> World:
    """Free instances per AZ, keyed like us_west_2a=2."""
    return World({(k[:-1].replace("_", "-"), k.replace("_", "-")): n for k, n in free.items()})


def run_probe(w: World, zones, **kw):
    return probe(zones, w.client, G6, 2, clock=lambda: NOW, **kw)


def test_the_probe_asks_for_a_token_an_end_date_an_hour_out_and_its_tags():
    w = world(us_west_2a=2)
    run_probe(w, [zone(WEST, "us-west-2a")], run_id="run1")
    ask = next(kw for op, kw in w.requests if op == "create_capacity_reservation")
    got = (ask["ClientToken"], ask["EndDateType"], ask["EndDate"], ask["TagSpecifications"][0]["Tags"])
    assert got == ("ray-efa-eks-probe-run1-us-west-2a", "limited", NOW + timedelta(hours=1), probe_tags("run1")), got


def test_the_probe_cancels_what_it_creates_and_ranks_capacity_now_first():
    w = world(us_west_2a=1, us_west_2b=2)
    out = run_probe(w, [zone(WEST, "us-west-2a"), zone(WEST, "us-west-2b")])
    assert [(z.az, z.probe) for z in out] == [
        ("us-west-2b", "capacity now"),
        ("us-west-2a", "InsufficientInstanceCapacity"),
    ], out
    assert w.live() == [], w.reservations


def test_a_create_whose_answer_is_lost_is_found_by_its_tags_and_cancelled():
    w = world(us_west_2a=2)
    w.fail("create_capacity_reservation", ReadTimeoutError(endpoint_url="https://ec2.us-west-2.amazonaws.com"), True)
    out = run_probe(w, [zone(WEST, "us-west-2a")])
    assert (out[0].probe, w.live()) == ("ReadTimeoutError", []), (out, w.reservations)


def test_a_process_killed_between_create_and_cancel_leaves_the_reservation_to_the_next_cleanup(tmp_path, capsys):
    w = world(us_west_2a=2, us_east_1b=2)
    w.kill("cancel_capacity_reservation")
    with pytest.raises(Killed):
        run_probe(w, [zone(WEST, "us-west-2a")])
    assert len(w.live(WEST)) == 1, "the killed process left its reservation"
    rc = command.run(args_for(tmp_path, cleanup=True, regions=None), Ui(json_mode=True), session=Session(w))
    assert (rc, w.live()) == (0, []), (rc, w.reservations, capsys.readouterr())


def _killed_probe(state, ready) -> None:
    """Run tests/support/_killed_probe.py and SIGKILL it once it says EC2 made its reservation."""
    child = subprocess.Popen([sys.executable, "tests/support/_killed_probe.py", str(state), str(ready)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60  # a real process: its imports take a second or two
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"the probe process never reached its create (exit {child.poll()})"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


@pytest.mark.slow  # starts a process; its in-process twin above holds the default tier
def test_a_real_process_killed_between_create_and_cancel_is_cleaned_up_by_the_next_cleanup(tmp_path):
    w = FileWorld(tmp_path / "ec2.json", {(WEST, "us-west-2a"): 2})
    _killed_probe(w.path, tmp_path / "ready")
    w.load()
    assert len(w.live(WEST)) == 1, f"the killed process should have left its reservation: {w.reservations}"
    rc = command.run(args_for(tmp_path, cleanup=True, regions=[WEST]), Ui(json_mode=True), session=Session(w))
    w.load()
    assert (rc, w.live()) == (0, []), (rc, w.reservations)


def test_the_next_probe_cancels_what_a_killed_probe_left():
    w = world(us_west_2a=2)
    w.kill("cancel_capacity_reservation")
    with pytest.raises(Killed):
        run_probe(w, [zone(WEST, "us-west-2a")])
    out = run_probe(w, [zone(WEST, "us-west-2a")])
    assert (out[0].probe, w.live()) == ("capacity now", []), (out, w.reservations)


def test_cleanup_leaves_reservations_it_did_not_make():
    w = world(us_west_2a=4)
    mine = w.add(WEST, "us-west-2a", 2, probe_tags("old"))
    theirs = w.add(WEST, "us-west-2a", 2, [{"Key": "team", "Value": "research"}])
    cleanup([WEST], w.client)
    states = (w.reservations[mine]["State"], w.reservations[theirs]["State"])
    assert states == ("cancelled", "active"), states


def test_cleanup_reads_every_page_of_reservations():
    w = world(us_west_2a=10)
    left = [w.add(WEST, "us-west-2a", 2, probe_tags(f"old{i}")) for i in range(5)]  # 3 pages of 2
    cleanup([WEST], w.client)
    assert [w.reservations[cr]["State"] for cr in left] == ["cancelled"] * 5, w.reservations


THROTTLED = ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow"}}, "CancelCapacityReservation")


@pytest.mark.parametrize(
    "fault",
    [
        EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://ec2.us-west-2.amazonaws.com"),
        THROTTLED,
    ],
    ids=["connection", "read-timeout", "throttled"],
)
def test_a_cancel_that_fails_names_the_reservation_and_the_commands_to_cancel_it(fault):
    w = world(us_west_2a=2)
    w.fail("cancel_capacity_reservation", fault)
    w.fail("describe_capacity_reservations", fault)  # the region cannot be searched either
    with pytest.raises(DriverError) as e:
        run_probe(w, [zone(WEST, "us-west-2a")])
    cr = w.live()[0]
    expected = (f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {cr} --region {WEST}", "--cleanup")
    assert all(s in str(e.value) for s in expected), str(e.value)


def test_a_second_ctrl_c_while_cancelling_waits_until_the_reservation_is_cancelled():
    """SIGINT during the cancel call is held: the cancel finishes, then the interrupt is raised."""
    w = world(us_west_2a=2)

    class Interrupted(type(w.client(WEST))):
        def cancel_capacity_reservation(self, **kw):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands while EC2 is cancelling
            return super().cancel_capacity_reservation(**kw)

    with pytest.raises(KeyboardInterrupt):
        probe([zone(WEST, "us-west-2a")], lambda r: Interrupted(w, r), G6, 2)
    assert w.live() == [], w.reservations


# ---- the command ------------------------------------------------------------------------------------------
class Session:
    def __init__(self, w: World):
        self.w = w

    def client(self, name, region_name=None):
        assert name == "ec2", name
        return self.w.client(region_name)


def test_cleanup_searches_every_enabled_region_without_regions(tmp_path):
    w = world(us_west_2a=2, us_east_1b=2)
    w.add(EAST, "us-east-1b", 2, probe_tags("old"))
    rc = command.run(args_for(tmp_path, cleanup=True, regions=None), Ui(json_mode=True), session=Session(w))
    assert (rc, w.live()) == (0, []), (rc, w.reservations)


# ---- The rules of a probe reservation (automation/capacity_probe.py), in process against the stand-in of EC2's
# Capacity Reservation calls (tests/support/_reservations_world.py, which names its sources and validates every
# call against botocore's EC2 model): what a probe asks for, how its reservations are recognised, cancelled, swept,
# and what the user is told.
#
# Numbers written here from EC2's API reference: a ClientToken holds at most 64 ASCII characters ("Ensure
# idempotency", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html); a probe ends
# an hour after it is made (EndDateType limited, the module's documented lifetime); the states that hold capacity
# are ``active`` and ``pending`` (API_CapacityReservation.html, State).

EAST_2 = "us-east-2"
TAGS = [
    {"Key": "ray-efa-eks:tool", "Value": "ray-efa-eks"},
    {"Key": "ray-efa-eks:purpose", "Value": "capacity-probe"},
]


def probe_zone(region: str, az: str, usable: bool = True) -> Zone:
    """A zone the survey found offered with EFA, within the quota (or short of it: 96 needed, 48 free)."""
    return Zone(region, az, True, efa=True, vcpus_needed=96, vcpus_free=1000 if usable else 48)


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
    w = World({(WEST, "us-west-2a"): 10, (EAST_2, "us-east-2a"): 10})
    west = [w.add(WEST, "us-west-2a", 1, probe_tags("r0")) for _ in range(2)]
    east = w.add(EAST_2, "us-east-2a", 1, probe_tags("r0"))
    said: list[str] = []
    assert sweep([WEST, EAST_2], w.client, said.append) == [] and w.live() == [], w.reservations
    assert f"2 probe reservation(s) left in us-west-2: {west[0]}, {west[1]}" in said, said
    assert f"1 probe reservation(s) left in us-east-2: {east}" in said, said


def test_sweep_of_a_clean_region_says_nothing():
    said: list[str] = []
    assert sweep([WEST], World({(WEST, "us-west-2a"): 1}).client, said.append) == [] and said == [], said


def test_a_region_that_cannot_be_searched_is_named_with_the_cleanup_command_and_the_next_is_swept():
    w = World({(WEST, "us-west-2a"): 10, (EAST_2, "us-east-2a"): 10})
    east = w.add(EAST_2, "us-east-2a", 1, probe_tags("r0"))
    w.fail("describe_capacity_reservations", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"))
    said: list[str] = []
    left = sweep([WEST, EAST_2], w.client, said.append)
    line = (
        "us-west-2 could not be searched (EndpointConnectionError): "
        "python -m automation capacity --cleanup --regions us-west-2"
    )
    assert left == [line] and said[0] == f"probe reservations in us-west-2 NOT searched: {line}", (left, said)
    assert east not in w.live(), "one unsearchable region stopped the sweep of the next"


def test_probe_marks_each_usable_zone_and_leaves_the_others_unprobed():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 0})
    zones = [
        probe_zone(WEST, "us-west-2a"),
        probe_zone(WEST, "us-west-2b"),
        probe_zone(WEST, "us-west-2c", usable=False),
    ]
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
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 2, (EAST_2, "us-east-2a"): 0})
    zones = [
        probe_zone(WEST, "us-west-2a"),
        probe_zone(WEST, "us-west-2b"),
        probe_zone(EAST_2, "us-east-2a", usable=False),
    ]
    probe(zones, w.client, G6, 1, run_id="r1", clock=lambda: NOW)
    ops = [op for op, _ in w.requests]
    assert ops[:2] == ["describe_capacity_reservations", "create_capacity_reservation"], ops
    assert ops.count("describe_capacity_reservations") == 1, ops


def test_a_probe_without_a_run_id_makes_one():
    w = World({(WEST, "us-west-2a"): 2})
    probe([probe_zone(WEST, "us-west-2a")], w.client, G6, 1, clock=lambda: NOW)
    ask = next(kw for op, kw in w.requests if op == "create_capacity_reservation")
    run = ask["TagSpecifications"][0]["Tags"][2]["Value"]
    # the run id is workloads.config.new_run_id's; the token stays within EC2's 64 characters uncut
    assert run and ask["ClientToken"] == f"ray-efa-eks-probe-{run}-us-west-2a" and len(ask["ClientToken"]) <= 64, ask


def test_a_probe_that_leaves_a_reservation_refuses_naming_it_and_cleanup():
    w = World({(WEST, "us-west-2a"): 2})
    w.fail("cancel_capacity_reservation", ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "Cancel"))
    with pytest.raises(DriverError) as e:
        probe([probe_zone(WEST, "us-west-2a")], w.client, G6, 1, run_id="r1", clock=lambda: NOW)
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
        probe(
            [probe_zone(WEST, "us-west-2a"), probe_zone(WEST, "us-west-2b")],
            w.client,
            G6,
            1,
            run_id="r1",
            clock=lambda: NOW,
        )
    assert "--region us-west-2; cr-" in str(e.value), e.value


def test_a_probe_first_sweeps_and_tells_what_an_earlier_run_left():
    w = World({(WEST, "us-west-2a"): 4})
    old = w.add(WEST, "us-west-2a", 1, probe_tags("r0"))
    said: list[str] = []
    probe([probe_zone(WEST, "us-west-2a")], w.client, G6, 1, said.append, run_id="r1", clock=lambda: NOW)
    assert said[0] == f"1 probe reservation(s) left in us-west-2: {old}", said


def test_a_refused_zone_does_not_stop_the_probe_of_the_next():
    w = World({(WEST, "us-west-2a"): 0, (WEST, "us-west-2b"): 2})
    out = probe(
        [probe_zone(WEST, "us-west-2a"), probe_zone(WEST, "us-west-2b")],
        w.client,
        G6,
        1,
        run_id="r1",
        clock=lambda: NOW,
    )
    assert {z.az: z.probe for z in out} == {"us-west-2a": "InsufficientInstanceCapacity", "us-west-2b": "capacity now"}


def test_a_region_the_first_sweep_could_not_search_is_still_named_after_the_probe():
    w = World({(WEST, "us-west-2a"): 2, (EAST_2, "us-east-2a"): 2})
    w.fail("describe_capacity_reservations", EndpointConnectionError(endpoint_url="https://ec2.us-west-2"))
    with pytest.raises(DriverError, match="us-west-2 could not be searched"):
        probe(
            [probe_zone(WEST, "us-west-2a"), probe_zone(EAST_2, "us-east-2a")],
            w.client,
            G6,
            1,
            run_id="r1",
            clock=lambda: NOW,
        )


def test_each_probe_reservation_is_cancelled_before_the_next_is_made():
    w = World({(WEST, "us-west-2a"): 2, (WEST, "us-west-2b"): 2})
    probe(
        [probe_zone(WEST, "us-west-2a"), probe_zone(WEST, "us-west-2b")],
        w.client,
        G6,
        1,
        run_id="r1",
        clock=lambda: NOW,
    )
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
        probe([probe_zone(WEST, "us-west-2a")], w.client, G6, 1, say, run_id="r1", clock=lambda: NOW)
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
    out = probe([probe_zone(WEST, "us-west-2a")], ec2_for, G6, 1, said.append, run_id="r1", clock=lambda: NOW)
    assert w.live() == theirs, f"expected only the other run's {theirs} left, got {w.live()}"
    assert out[0].probe == "EndpointConnectionError" and any(s.startswith("cancelled probe") for s in said), said
