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
from _reservations_world import FileWorld, Killed, World
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from conftest import REPO
from test_capacity import args_for

from automation.capacity import Zone
from automation.capacity_probe import cleanup, probe, probe_tags
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
