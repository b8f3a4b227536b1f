"""The capacity finder (automation/capacity_finder.py, automation/commands/capacity.py) against moto's EC2 (offerings,
instance types, instances, AZs, regions: moto 5.2.5's fixed data, not live capacity) and botocore's Stubber for
what moto lacks (Service Quotas, Spot placement scores, Capacity Reservations, Capacity Block offerings, Pricing,
EKS health issues). Stubbed answers follow the EC2 API reference's response shapes; their values are
illustrative, not observed."""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime

import boto3
import pytest
from _capacity_world import G6, REGION, args_for
from botocore.stub import Stubber
from conftest import REPO

from automation import cli
from automation.capacity_finder import (
    SPOT_SIGNAL,
    RegionClients,
    UpWatch,
    Zone,
    stack_file_text,
    stuck_line,
    survey,
    survey_region,
)
from automation.commands import capacity as command
from automation.errors import DriverError
from automation.ui import Ui
from infra.config import load_stack

AZ_ID = {"us-west-2a": "usw2-az2", "us-west-2b": "usw2-az1", "us-west-2c": "usw2-az3", "us-west-2d": "usw2-az4"}


class Ec2:
    """moto's EC2 client, with the calls moto does not model answered by a Stubber (``stub``)."""

    STUBBED = frozenset(
        {
            "get_spot_placement_scores",
            "describe_capacity_reservations",
            "describe_capacity_block_offerings",
        }
    )

    def __init__(self, region: str = REGION):
        self.moto = boto3.client("ec2", region_name=region)
        self.stubbed = boto3.client("ec2", region_name=region)
        self.stub = Stubber(self.stubbed)
        self.stub.activate()

    def __getattr__(self, name):
        return getattr(self.stubbed if name in self.STUBBED else self.moto, name)

    def get_paginator(self, name):
        return (self.stubbed if name in self.STUBBED else self.moto).get_paginator(name)


def quotas(value: float = 1000, spot: float = 1000):
    """Service Quotas answering the On-Demand "Running On-Demand G and VT instances" quota, then the Spot "All G and VT
    Spot Instance Requests" quota (L-3819A6DF), both in vCPUs, in the order the survey asks them."""
    client = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(client)
    for code, v in (("L-DB2E81BA", value), ("L-3819A6DF", spot)):
        quota = {"ServiceCode": "ec2", "QuotaCode": code, "Value": v}
        stub.add_response("get_service_quota", {"Quota": quota}, {"ServiceCode": "ec2", "QuotaCode": code})
    stub.activate()
    return client


SPOT_ASK = {  # g6.12xlarge's family of comparable types: EFA, 4 GPUs (infra/data/instance_types.json)
    "InstanceTypes": ["g6.12xlarge", "g5.12xlarge", "g6e.12xlarge"],
    "TargetCapacity": 2,
    "SingleAvailabilityZone": True,
    "RegionNames": [REGION],
}


def answer_spot(ec2: Ec2, scores: dict[str, int], regions: tuple[str, ...] = (REGION,)) -> None:
    """EC2's answer for the whole survey: the top AZs of every region asked, by AZ id."""
    found = [{"Region": REGION, "AvailabilityZoneId": AZ_ID[az], "Score": s} for az, s in scores.items()]
    ask = {**SPOT_ASK, "RegionNames": list(regions)}
    ec2.stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": found}, ask)


def answer_signals(
    ec2: Ec2, scores: dict[str, int] | None, reservations: Sequence[dict] = (), regions: tuple[str, ...] = (REGION,)
) -> None:
    """The survey's calls in order: the Spot scores (``survey`` alone asks them, None: not asked), then the
    region's reservations."""
    if scores is not None:
        answer_spot(ec2, scores, regions)
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(reservations)})


def by_az(zones):
    return {z.az: z for z in zones}


def test_reversed_spot_scores_leave_the_ranking_as_it_was(moto_aws):
    orders = []
    for scores in ({"us-west-2a": 9, "us-west-2b": 1}, {"us-west-2a": 1, "us-west-2b": 9}):
        ec2 = Ec2()
        answer_signals(ec2, scores)
        orders.append([z.az for z in survey([REGION], lambda r, ec2=ec2: RegionClients(ec2, quotas()), None, G6, 2)])
    assert orders[0] == orders[1] == ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"], orders


NEW_ACCOUNT_SCORES = {"us-west-2a": 1, "us-west-2b": 9, "us-west-2c": 5, "us-west-2d": 3}


def test_a_new_accounts_zero_spot_quota_marks_every_score_capped(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, NEW_ACCOUNT_SCORES)
    zones = survey([REGION], lambda r: RegionClients(ec2, quotas(spot=0)), None, G6, 2)
    got = [(z.az, z.spot_score, z.spot_capped) for z in zones]
    assert got == [(az, s, True) for az, s in sorted(NEW_ACCOUNT_SCORES.items())], got


def test_the_table_marks_capped_scores_and_says_why_the_order(moto_aws, tmp_path, capsys):
    ec2 = Ec2()
    answer_signals(ec2, NEW_ACCOUNT_SCORES)
    rc = command.run(args_for(tmp_path, json=False), Ui(json_mode=False), session=Session(ec2, spot=0))
    out = " ".join(capsys.readouterr().out.split())
    expected = (
        "'All G and VT Spot Instance Requests' quota (L-3819A6DF)",
        "ranked by: (1) usable",
        "spot (family) is a signal, not a rank",
        "Spot scores capped in us-west-2 (0 < 96 vCPUs)",
    )
    assert rc == 0 and all(e in out for e in expected), out


def test_the_printed_ranking_shows_the_score_as_a_family_signal(moto_aws, tmp_path, capsys):
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2b": 9})
    rc = command.run(args_for(tmp_path), Ui(json_mode=True), session=Session(ec2, spot=96))
    doc = json.loads(capsys.readouterr().out)
    got = (rc, [(z["az"], z["spot_score"]) for z in doc["zones"]][:2], SPOT_SIGNAL in doc["ranking"])
    assert got == (0, [("us-west-2a", None), ("us-west-2b", 9)], True), got


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
    answer_signals(ec2, None)
    zones = survey_region(RegionClients(ec2, quotas(48)), None, G6, 2, REGION)
    fix = zones[0].quota_fix
    assert not any(z.usable for z in zones), zones
    assert "request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA --desired-value 96" in fix, fix


def test_g6_asks_for_no_capacity_blocks_but_a_p5_does(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, None)  # no describe_capacity_block_offerings answer: the stub fails if g6 asks
    survey_region(RegionClients(ec2, quotas()), None, G6, 2, REGION)
    ec2.stub.assert_no_pending_responses()
    answer_signals(ec2, None)
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


def test_capacity_block_offerings_are_read_from_every_page(moto_aws):
    ec2 = Ec2()
    answer_signals(ec2, None)
    offering = {
        "CapacityBlockOfferingId": "cb-0123456789abcdef1",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-west-2c",
        "InstanceCount": 2,
        "StartDate": datetime(2026, 12, 9, 11, 30, tzinfo=UTC),
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "2345.67",
        "CurrencyCode": "USD",
    }
    ec2.stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [], "NextToken": "page2"})
    ec2.stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [offering]})
    zones = by_az(survey_region(RegionClients(ec2, quotas()), None, "p5.48xlarge", 2, REGION))
    assert [b["id"] for b in zones["us-west-2c"].blocks] == ["cb-0123456789abcdef1"], zones["us-west-2c"]


def test_a_signal_that_fails_is_a_note_not_a_failure(moto_aws):
    ec2 = Ec2()
    ec2.stub.add_client_error("get_spot_placement_scores", "UnauthorizedOperation", "not allowed")
    ec2.stub.add_response("describe_capacity_reservations", {"CapacityReservations": []})
    zones = survey([REGION], lambda r: RegionClients(ec2, quotas()), None, G6, 2)
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
    answer_signals(ec2, {"us-west-2a": 5}, regions=(REGION, "me-south-1"))
    clients = {REGION: RegionClients(ec2, quotas()), "me-south-1": RegionClients(Refused(), None)}
    zones = survey([REGION, "me-south-1"], clients.__getitem__, None, G6, 2)
    assert zones[-1].region == "me-south-1" and "could not be read: AuthFailure" in zones[-1].notes[0], zones[-1]
    assert zones[0].az == "us-west-2a", "a readable region still ranks first"


# ---- the command ------------------------------------------------------------------------------------------
class Session:
    def __init__(self, ec2: Ec2, quota: float = 1000, spot: float = 1000):
        self.ec2, self.quota, self.spot = ec2, quota, spot

    def client(self, name, region_name=None):
        if name == "ec2":
            return self.ec2
        if name == "service-quotas":
            return quotas(self.quota, self.spot)
        pricing = boto3.client("pricing", region_name="us-east-1")
        stub = Stubber(pricing)
        stub.add_response("get_products", {"PriceList": []})  # the API has no price: the column says "?"
        stub.activate()
        return pricing


def test_write_stack_writes_a_stack_the_config_loader_accepts(moto_aws, tmp_path, capsys):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    ec2 = Ec2()
    answer_signals(ec2, {"us-west-2c": 9})  # the Spot score does not choose the AZ: the first usable by name does
    rc = command.run(args_for(tmp_path, write_stack="found"), Ui(json_mode=True), session=Session(ec2))
    doc = json.loads(capsys.readouterr().out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_stack("found", tmp_path)
    got = (rc, cfg.region, cfg.gpu_nodes.availability_zone, cfg.gpu_nodes.node_count, cfg.network.azs[0])
    assert got == (0, REGION, "us-west-2a", 2, "us-west-2a"), f"got {got}; {doc['written']}"


def test_write_stack_pairs_the_gpu_az_with_an_az_offering_the_system_node_type():
    zone = Zone(REGION, "us-west-2a", True, region_azs=("us-west-2a", "us-west-2b", "us-west-2c"))
    text = stack_file_text("found", zone, G6, 2, system_azs={"us-west-2a", "us-west-2c"})
    assert "    - us-west-2a\n    - us-west-2c\n" in text, text


def test_write_stack_writes_nothing_when_no_second_az_offers_the_system_node_type():
    zone = Zone(REGION, "us-west-2a", True, region_azs=("us-west-2a", "us-west-2b"))
    assert stack_file_text("found", zone, G6, 2, system_azs={"us-west-2a"}) is None


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
