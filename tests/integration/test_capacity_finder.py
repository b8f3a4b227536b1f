"""The capacity finder (automation/capacity.py, automation/commands/capacity.py) against moto's EC2 (offerings,
instance types, instances, AZs, regions: moto 5.2.5's fixed data, not live capacity) and botocore's Stubber for
what moto lacks (Service Quotas, Spot placement scores, Capacity Reservations, Capacity Block offerings, Pricing,
EKS health issues). Stubbed answers follow the EC2 API reference's response shapes; their values are
illustrative, not observed."""

from __future__ import annotations

import argparse
import json
import shutil
import time
import warnings
from datetime import UTC, datetime

import boto3
import pytest
from _shared_env import MOTO_REGION
from botocore.stub import Stubber
from conftest import REPO

from automation import cli
from automation.capacity import (
    RegionClients,
    UpWatch,
    probe,
    stuck_line,
    survey,
    survey_region,
)
from automation.commands import capacity as command
from automation.errors import DriverError
from automation.ui import Ui
from infra.config import load_stack

REGION = MOTO_REGION
G6 = "g6.12xlarge"
AZ_ID = {"us-west-2a": "usw2-az2", "us-west-2b": "usw2-az1", "us-west-2c": "usw2-az3", "us-west-2d": "usw2-az4"}


class Ec2:
    """moto's EC2 client, with the calls moto does not model answered by a Stubber (``stub``)."""

    STUBBED = frozenset(
        {
            "get_spot_placement_scores",
            "describe_capacity_reservations",
            "describe_capacity_block_offerings",
            "create_capacity_reservation",
            "cancel_capacity_reservation",
        }
    )

    def __init__(self, region: str = REGION):
        self.moto = boto3.client("ec2", region_name=region)
        self.stubbed = boto3.client("ec2", region_name=region)
        self.stub = Stubber(self.stubbed)
        self.stub.activate()

    def __getattr__(self, name):
        return getattr(self.stubbed if name in self.STUBBED else self.moto, name)


def quotas(value: float = 1000):
    client = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(client)
    stub.add_response("get_service_quota", {"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA", "Value": value}})
    stub.activate()
    return client


def answer_signals(ec2: Ec2, scores: dict[str, int], reservations: list[dict] = ()) -> None:
    ec2.stub.add_response(
        "get_spot_placement_scores",
        {
            "SpotPlacementScores": [
                {"Region": REGION, "AvailabilityZoneId": AZ_ID[az], "Score": s} for az, s in scores.items()
            ]
        },
    )
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(reservations)})


def by_az(zones):
    return {z.az: z for z in zones}


def test_spot_score_ranks_the_usable_azs(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2a": 3, "us-west-2b": 9, "us-west-2c": 5, "us-west-2d": 1})
    zones = survey([REGION], lambda r: RegionClients(ec2, quotas()), None, G6, 2)
    assert [z.az for z in zones] == ["us-west-2b", "us-west-2c", "us-west-2a", "us-west-2d"], zones
    assert all(z.usable and z.efa and z.vcpus_needed == 96 for z in zones), zones


def test_an_open_reservation_with_room_ranks_first(moto_aws):
    ec2 = Ec2()
    fits = {
        "CapacityReservationId": "cr-0123456789abcdef0",
        "AvailabilityZone": "us-west-2d",
        "AvailableInstanceCount": 2,
    }
    small = {
        "CapacityReservationId": "cr-0123456789abcdef1",
        "AvailabilityZone": "us-west-2a",
        "AvailableInstanceCount": 1,
    }
    answer_signals(ec2, {"us-west-2a": 9, "us-west-2d": 1}, [fits, small])
    zones = survey([REGION], lambda r: RegionClients(ec2, quotas()), None, G6, 2)
    assert (zones[0].az, zones[0].reservations) == ("us-west-2d", ("cr-0123456789abcdef0",)), zones[0]
    assert by_az(zones)["us-west-2a"].reservations == (), "a reservation with room for 1 does not fit 2"


def test_a_short_quota_makes_the_azs_unusable_and_prints_the_increase(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, {})
    zones = survey_region(RegionClients(ec2, quotas(48)), None, G6, 2, REGION)
    fix = zones[0].quota_fix
    assert not any(z.usable for z in zones), zones
    assert "request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA --desired-value 96" in fix, fix


def test_g6_asks_for_no_capacity_blocks_but_a_p5_does(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, {})  # no describe_capacity_block_offerings answer: the stub fails if g6 asks
    survey_region(RegionClients(ec2, quotas()), None, G6, 2, REGION)
    ec2.stub.assert_no_pending_responses()
    answer_signals(ec2, {})
    start = datetime(2026, 12, 8, 11, 30, tzinfo=UTC)
    offering = {
        "CapacityBlockOfferingId": "cb-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-west-2b",
        "InstanceCount": 2,
        "StartDate": start,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "1234.56",
        "CurrencyCode": "USD",
    }
    ec2.stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [offering]})
    zones = by_az(survey_region(RegionClients(ec2, quotas()), None, "p5.48xlarge", 2, REGION))
    assert zones["us-west-2b"].blocks[0]["upfront_fee"] == "1234.56", zones["us-west-2b"].blocks


def test_a_signal_that_fails_is_a_note_not_a_failure(moto_aws):
    ec2 = Ec2()
    ec2.stub.add_client_error("get_spot_placement_scores", "UnauthorizedOperation", "not allowed")
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": []})
    zones = survey_region(RegionClients(ec2, quotas()), None, G6, 2, REGION)
    assert zones[0].usable and zones[0].spot_score is None, zones[0]
    assert "Spot placement score: UnauthorizedOperation" in zones[0].notes, zones[0].notes


def test_a_region_that_cannot_be_read_is_one_row_saying_why(moto_aws):
    class Refused:
        def describe_availability_zones(self):
            from botocore.exceptions import ClientError

            raise ClientError(
                {"Error": {"Code": "AuthFailure", "Message": "opt-in region"}}, "DescribeAvailabilityZones"
            )

    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2a": 5})
    clients = {REGION: RegionClients(ec2, quotas()), "me-south-1": RegionClients(Refused(), None)}
    zones = survey([REGION, "me-south-1"], clients.__getitem__, None, G6, 2)
    assert zones[-1].region == "me-south-1" and "could not be read: AuthFailure" in zones[-1].notes[0], zones[-1]
    assert zones[0].az == "us-west-2a", "a readable region still ranks first"


# ---- --probe ----------------------------------------------------------------------------------------------
def usable_zones(ec2: Ec2):
    answer_signals(ec2, {"us-west-2a": 9, "us-west-2b": 5})
    return survey_region(RegionClients(ec2, quotas()), None, G6, 2, REGION)[:2]


def created(cr: str) -> dict:
    return {"CapacityReservation": {"CapacityReservationId": cr}}


def test_probe_cancels_what_it_creates_and_ranks_capacity_now_first(moto_aws):
    ec2 = Ec2()
    zones = usable_zones(ec2)
    ec2.stub.add_client_error("create_capacity_reservation", "InsufficientInstanceCapacity", "no capacity")
    ec2.stub.add_response("create_capacity_reservation", created("cr-0123456789abcdef0"))
    ec2.stub.add_response(
        "cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": "cr-0123456789abcdef0"}
    )
    out = probe(zones, lambda r: ec2, G6, 2)
    ec2.stub.assert_no_pending_responses()
    assert [(z.az, z.probe) for z in out] == [
        ("us-west-2b", "capacity now"),
        ("us-west-2a", "InsufficientInstanceCapacity"),
    ], out


def test_ctrl_c_after_a_reservation_is_made_still_cancels_it(moto_aws):
    ec2 = Ec2()
    zones = usable_zones(ec2)
    ec2.stub.add_response("create_capacity_reservation", created("cr-0123456789abcdef0"))
    ec2.stub.add_response(
        "cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": "cr-0123456789abcdef0"}
    )

    def interrupted(line: str) -> None:
        if "created" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probe(zones, lambda r: ec2, G6, 2, say=interrupted)
    ec2.stub.assert_no_pending_responses()  # the cancel was called


def test_a_reservation_ec2_will_not_cancel_is_named_with_the_command(moto_aws):
    ec2 = Ec2()
    zones = usable_zones(ec2)[:1]
    ec2.stub.add_response("create_capacity_reservation", created("cr-0123456789abcdef0"))
    ec2.stub.add_client_error("cancel_capacity_reservation", "RequestLimitExceeded", "slow down")
    with pytest.raises(DriverError, match="aws ec2 cancel-capacity-reservation --capacity-reservation-id cr-0123"):
        probe(zones, lambda r: ec2, G6, 2)


# ---- the command ------------------------------------------------------------------------------------------
class Session:
    def __init__(self, ec2: Ec2, quota: float = 1000):
        self.ec2, self.quota = ec2, quota

    def client(self, name, region_name=None):
        if name == "ec2":
            return self.ec2
        if name == "service-quotas":
            return quotas(self.quota)
        pricing = boto3.client("pricing", region_name="us-east-1")
        stub = Stubber(pricing)
        stub.add_response("get_products", {"PriceList": []})  # the API has no price: the column says "?"
        stub.activate()
        return pricing


def args_for(project_dir, **kw) -> argparse.Namespace:
    base = dict(
        instance_type=G6,
        count=2,
        regions=[REGION],
        all_regions=False,
        probe=False,
        yes=False,
        write_stack=None,
        json=True,
        project_dir=project_dir,
    )
    return argparse.Namespace(**{**base, **kw})


def test_write_stack_writes_a_stack_the_config_loader_accepts(moto_aws, tmp_path, capsys):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2c": 9})
    rc = command.run(args_for(tmp_path, write_stack="found"), Ui(json_mode=True), session=Session(ec2))
    doc = json.loads(capsys.readouterr().out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_stack("found", tmp_path)
    got = (rc, cfg.region, cfg.gpu_nodes.availability_zone, cfg.gpu_nodes.node_count, cfg.network.azs[0])
    assert got == (0, REGION, "us-west-2c", 2, "us-west-2c"), f"got {got}; {doc['written']}"


def test_probe_is_refused_without_confirmation(moto_aws, tmp_path):
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2a": 9})
    with pytest.raises(DriverError, match="--probe not confirmed: no reservation was made"):
        command.run(args_for(tmp_path, probe=True), Ui(json_mode=True), session=Session(ec2), confirm=lambda q: False)
    ec2.stub.assert_no_pending_responses()


def test_no_credentials_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    rc = cli.main(["capacity", "--regions", REGION])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "no AWS credentials" in err, f"got {rc}: {err!r}"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--instance-type", "g6.12xlarg"], "--instance-type 'g6.12xlarg' is not in infra/data/instance_types.json"),
        (["--count", "0"], "--count 0 is outside 1..450"),
        (["--regions", "us-west-9"], "--regions 'us-west-9' is not an AWS region"),
        (["--write-stack", "us-west-2"], "Pulumi.us-west-2.yaml exists"),
    ],
)
def test_bad_input_is_refused_before_any_aws_call(argv, expected, capsys, monkeypatch):
    monkeypatch.setattr(command, "aws_session", lambda: pytest.fail("bad input must not reach AWS"))
    rc = cli.main(["capacity", *argv])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and expected in err, f"got {rc}: {err}"


# ---- up: a node group stuck in CREATING ------------------------------------------------------------------
# The message is EC2's InsufficientInstanceCapacity text as EKS relays it in an AsgInstanceLaunchFailures issue
# (shape: https://docs.aws.amazon.com/eks/latest/APIReference/API_Issue.html).
STUCK = {
    "nodegroupName": "ray-efa-eks-gpu-ng-1a2b3c",
    "status": "CREATING",
    "labels": {"role": "gpu-worker", "nvidia.com/gpu.present": "true"},
    "health": {
        "issues": [
            {
                "code": "AsgInstanceLaunchFailures",
                "message": "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not "
                "have sufficient g6.12xlarge capacity in the Availability Zone you requested (us-west-2a).",
                "resourceIds": ["eks-ray-efa-eks-gpu-ng"],
            }
        ]
    },
}


def test_stuck_line_names_the_next_ranked_az():
    line = stuck_line(STUCK, "us-west-2a", "us-west-2c", "us-west-2")
    assert "EC2 has no capacity in us-west-2a" in line and "gpuAvailabilityZone: us-west-2c" in line, line
    assert stuck_line({**STUCK, "status": "ACTIVE"}, "us-west-2a", "us-west-2c", "us-west-2") is None


def test_up_watch_says_so_once_from_describe_nodegroup():
    eks = boto3.client("eks", region_name=REGION)
    stub = Stubber(eks)
    stub.add_response("list_nodegroups", {"nodegroups": ["system", STUCK["nodegroupName"]]})
    stub.add_response(
        "describe_nodegroup",
        {"nodegroup": {"nodegroupName": "system", "status": "ACTIVE", "labels": {"role": "system"}}},
    )
    stub.add_response("describe_nodegroup", {"nodegroup": STUCK})
    said: list[str] = []
    with stub:
        line = UpWatch(eks, "ray-efa-eks", "us-west-2a", "us-west-2", lambda: "us-west-2b", said.append).check_once()
    assert said == [line] and "us-west-2b" in line, said


def test_the_table_shows_the_ranked_azs_and_the_quota_increase(moto_aws, tmp_path, capsys):
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2a": 9})
    rc = command.run(args_for(tmp_path, json=False), Ui(json_mode=False), session=Session(ec2, quota=48))
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "48/96" in out and "quota short: aws service-quotas request-service-quota-increase" in out, out
    assert "g6.12xlarge has no Capacity Blocks" in out, out


def test_a_second_ctrl_c_while_cancelling_waits_until_the_reservation_is_cancelled(moto_aws):
    """SIGINT during the cancel call is held: the cancel finishes, then the interrupt is raised."""
    import os
    import signal

    class Ec2Calls:
        def __init__(self):
            self.cancelled: list[str] = []

        def create_capacity_reservation(self, **kw):
            return created("cr-0123456789abcdef0")

        def cancel_capacity_reservation(self, CapacityReservationId):  # noqa: N803 - the API's argument name
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands while EC2 is cancelling
            self.cancelled.append(CapacityReservationId)
            return {"Return": True}

    zones = usable_zones(Ec2())[:1]
    ec2 = Ec2Calls()
    with pytest.raises(KeyboardInterrupt):
        probe(zones, lambda r: ec2, G6, 2)
    assert ec2.cancelled == ["cr-0123456789abcdef0"], ec2.cancelled


def test_the_up_watch_thread_says_it_within_its_interval():
    eks = boto3.client("eks", region_name=REGION)
    stub = Stubber(eks)
    stub.add_response("list_nodegroups", {"nodegroups": [STUCK["nodegroupName"]]})
    stub.add_response("describe_nodegroup", {"nodegroup": STUCK})
    said: list[str] = []
    with stub, UpWatch(eks, "ray-efa-eks", "us-west-2a", "us-west-2", lambda: None, said.append, interval=0.01):
        for _ in range(200):
            if said:
                break
            time.sleep(0.01)
    assert len(said) == 1 and "capacity --all-regions" in said[0], said
