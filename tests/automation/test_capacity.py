"""The capacity finder's survey around its ranking (automation/capacity_finder.py), in process: which EC2 answer feeds
which column, the Spot placement score's call and its limits, open reservations and Capacity Blocks, the lines
under the table, a node group stuck for want of capacity, and the stack file it writes.

Facts written here from EC2's documentation: GetSpotPlacementScores takes at most ten RegionNames (botocore's EC2
model) and needs at least three instance types, fewer "always" score low
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html, Limitations); a Spot score is
1 to 10 per AZ id; DescribeCapacityReservations carries AvailableInstanceCount
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html); EKS reports EC2's refusal
as a health issue whose message carries InsufficientInstanceCapacity
(https://docs.aws.amazon.com/eks/latest/APIReference/API_Issue.html). No member of these answers is required in
botocore's EC2 and EKS models (GetSpotPlacementScores, DescribeCapacityReservations, DescribeInstanceTypes'
InstanceTypeInfo, SpotPlacementScore, EKS's Nodegroup and Issue: no `required` list), so an answer without one is a
shape the code must read. The lower-level reads (offerings, the
instance type, the quota, the price: automation/ec2.py, automation/cost.py) are replaced by stand-ins here; their
own tests are theirs.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from hypothesis import given, settings
from hypothesis import strategies as st

from automation import capacity_finder as capacity
from automation.aws_clients import Paginator
from automation.capacity_finder import (
    PROBED,
    RegionClients,
    SpotSignal,
    UpWatch,
    Zone,
    block_offerings,
    capacity_stuck,
    next_az,
    open_reservations,
    rank,
    ranking_lines,
    spot_signal,
    stack_file_text,
    stuck_line,
    survey,
    survey_region,
)
from automation.ec2 import error_code

G6, P5 = "g6.12xlarge", "p5.48xlarge"
WEST = "us-west-2"


def refused(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "Op")


def test_an_error_code_is_ec2s_code_or_the_exceptions_name():
    assert (
        error_code(refused("AuthFailure")),
        error_code(ClientError({}, "Op")),
        error_code(EndpointConnectionError(endpoint_url="https://ec2")),
    ) == ("AuthFailure", "ClientError", "EndpointConnectionError")


# ---- Zone ------------------------------------------------------------------------------------------------------
def usable(**kw) -> Zone:
    return Zone(WEST, "us-west-2a", True, efa=True, vcpus_needed=96, vcpus_free=96, **kw)


@pytest.mark.parametrize(
    "quota, capped, counts",
    [(None, None, False), (95.0, True, False), (96.0, False, True)],
    ids=["unread", "one-below", "exactly-the-need"],
)
def test_a_spot_score_counts_only_when_the_spot_quota_covers_the_vcpus_asked(quota, capped, counts):
    z = usable(spot_score=7, spot_quota_vcpus=quota)
    assert (z.spot_capped, z.spot_counts) == (capped, counts), z


def test_no_spot_score_never_counts():
    assert usable(spot_quota_vcpus=1000.0).spot_counts is False


def test_a_zone_not_offered_is_not_usable():
    assert replace(usable(), offered=False).usable is False


def test_a_capacity_block_ranks_like_a_reservation():
    block = replace(usable(blocks=({"id": "cb-1"},), usd_per_hour=99.0), az="us-west-2b")
    assert capacity.rank([usable(usd_per_hour=1.0), block])[0] is block


def test_the_name_breaks_a_tie_by_region_then_az():
    zones = [replace(usable(), region="us-west-2", az="us-west-2a"), replace(usable(), region="us-east-2", az="x")]
    assert [z.region for z in capacity.rank(zones)] == ["us-east-2", "us-west-2"]


def test_a_zone_as_json_adds_its_verdicts_and_drops_the_regions_azs():
    doc = usable(spot_score=7, spot_quota_vcpus=96.0, region_azs=("a", "b")).to_dict()
    assert "region_azs" not in doc, doc
    assert (doc["usable"], doc["quota_ok"], doc["spot_capped"], doc["spot_counts"]) == (True, True, False, True), doc


def test_next_az_is_the_best_usable_az_not_tried():
    zones = [
        usable(usd_per_hour=9.0),
        replace(usable(usd_per_hour=5.0), az="us-west-2b"),
        replace(usable(usd_per_hour=1.0), az="us-west-2c", efa=False),
    ]
    assert next_az(zones, ["us-west-2b"]) == "us-west-2a"
    assert next_az(zones, ["us-west-2a"]) == "us-west-2b"
    assert next_az(zones[2:3], ["us-west-2a"]) is None


def test_next_az_within_a_network_leaves_out_the_azs_outside_it():
    zones = [usable(usd_per_hour=9.0), replace(usable(usd_per_hour=5.0), az="us-west-2b")]
    assert next_az(zones, [], within=["us-west-2a", "us-west-2c"]) == "us-west-2a"


# ---- the Spot placement score ----------------------------------------------------------------------------------
class SpotEc2:
    """GetSpotPlacementScores' paginator: each call's arguments recorded; answers ``pages`` per call, or raises."""

    def __init__(self, pages=(), error=None):
        self.pages, self.error, self.calls = list(pages), error, []

    def get_paginator(self, name):
        assert name == "get_spot_placement_scores", name
        return self

    def paginate(self, **kw):
        self.calls.append(kw)
        if self.error:
            raise self.error
        yield from self.pages


def test_the_spot_score_is_asked_once_per_ten_regions_for_the_family():
    regions = [f"r{i}" for i in range(11)]
    ec2 = SpotEc2()
    spot_signal(ec2, G6, 2, regions)
    assert [c["RegionNames"] for c in ec2.calls] == [regions[:10], regions[10:]], ec2.calls
    assert ec2.calls[0]["InstanceTypes"] == ["g6.12xlarge", "g5.12xlarge", "g6e.12xlarge"], ec2.calls[0]
    assert (ec2.calls[0]["TargetCapacity"], ec2.calls[0]["SingleAvailabilityZone"]) == (2, True), ec2.calls[0]


def test_the_spot_scores_are_keyed_by_region_and_az_id():
    page = {"SpotPlacementScores": [{"Region": WEST, "AvailabilityZoneId": "usw2-az1", "Score": 9}]}
    got = spot_signal(SpotEc2([page, {"SpotPlacementScores": []}]), G6, 2, [WEST])
    assert (got.scores, got.note) == ({(WEST, "usw2-az1"): 9}, ""), got


def test_a_spot_score_ec2_refuses_is_a_note_not_a_failure():
    got = spot_signal(SpotEc2(error=refused("UnauthorizedOperation")), G6, 2, [WEST])
    assert (got.scores, got.note) == ({}, "Spot placement score: UnauthorizedOperation"), got


def test_a_spot_page_without_scores_is_read_as_none():
    got = spot_signal(SpotEc2([{}]), G6, 2, [WEST])
    assert (got.scores, got.note) == ({}, ""), got


@pytest.mark.parametrize("unnamed", ["Region", "AvailabilityZoneId"])
def test_a_spot_score_that_does_not_name_its_region_or_az_is_dropped(unnamed):
    # Both are optional in SpotPlacementScore (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotPlacementScore.html):
    # a score without them cannot be placed in an AZ, nor matched to an AZ whose id is unknown.
    score = {"Region": WEST, "AvailabilityZoneId": "usw2-az1", "Score": 9}
    del score[unnamed]
    got = spot_signal(SpotEc2([{"SpotPlacementScores": [score]}]), G6, 2, [WEST])
    assert got.scores == {}, got


def test_a_family_of_two_comparable_types_is_not_asked(monkeypatch):
    monkeypatch.setattr(capacity, "spot_types", lambda t: ("a.1", "b.1"))
    ec2 = SpotEc2()
    got = spot_signal(ec2, "a.1", 2, [WEST])
    assert (ec2.calls, got.note) == ([], "not asked: fewer than 3 comparable types (a.1, b.1)"), got


def test_a_family_of_three_comparable_types_is_asked(monkeypatch):
    monkeypatch.setattr(capacity, "spot_types", lambda t: ("a.1", "b.1", "c.1"))
    ec2 = SpotEc2()
    spot_signal(ec2, "a.1", 2, [WEST])
    assert len(ec2.calls) == 1, ec2.calls


# ---- reservations and Capacity Blocks --------------------------------------------------------------------------
class ReservationsEc2:
    def __init__(self, reservations=(), offerings=()):
        self.reservations, self.offerings, self.asked = list(reservations), list(offerings), []

    def describe_capacity_reservations(self, **kw):
        self.asked.append(kw)
        return {"CapacityReservations": self.reservations}

    def get_paginator(self, name):
        assert name == "describe_capacity_block_offerings", name
        return self

    def paginate(self, **kw):
        self.asked.append(kw)
        yield {"CapacityBlockOfferings": self.offerings[:1]}
        yield {"CapacityBlockOfferings": self.offerings[1:]}


def cr(cid: str, az: str, available: int) -> dict:
    return {"CapacityReservationId": cid, "AvailabilityZone": az, "AvailableInstanceCount": available}


def test_open_reservations_with_room_for_the_count_are_listed_by_az():
    ec2 = ReservationsEc2([cr("cr-1", "us-west-2a", 2), cr("cr-2", "us-west-2a", 1), cr("cr-3", "us-west-2b", 3)])
    assert open_reservations(ec2, G6, 2) == {"us-west-2a": ["cr-1"], "us-west-2b": ["cr-3"]}
    assert ec2.asked == [
        {
            "Filters": [
                {"Name": "instance-type", "Values": [G6]},
                {"Name": "state", "Values": ["active"]},
            ]
        }
    ], ec2.asked


def test_a_reservation_without_an_available_count_has_no_room():
    assert open_reservations(ReservationsEc2([{"CapacityReservationId": "c", "AvailabilityZone": "a"}]), G6, 1) == {}


def test_an_answer_without_capacity_reservations_holds_none():
    class NoList(ReservationsEc2):
        def describe_capacity_reservations(self, **kw):
            return {}

    assert open_reservations(NoList(), G6, 1) == {}


def test_a_page_without_capacity_blocks_is_read_as_none():
    class EmptyPages(ReservationsEc2):
        def paginate(self, **kw):
            yield {}

    assert block_offerings(EmptyPages(), P5, 2) == {}


def test_capacity_blocks_of_every_page_are_read_for_a_day():
    offering = {
        "CapacityBlockOfferingId": "cb-1",
        "AvailabilityZone": "us-east-2a",
        "StartDate": "2026-12-07 11:30:00+00:00",
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "755.52",
        "CurrencyCode": "USD",
    }
    ec2 = ReservationsEc2(offerings=[offering, {**offering, "CapacityBlockOfferingId": "cb-2"}])
    got = block_offerings(ec2, P5, 2)
    assert ec2.asked == [{"InstanceType": P5, "InstanceCount": 2, "CapacityDurationHours": 24}], ec2.asked
    assert got == {
        "us-east-2a": [
            {
                "id": "cb-1",
                "start": "2026-12-07 11:30:00+00:00",
                "hours": 24,
                "upfront_fee": "755.52",
                "currency": "USD",
            },
            {
                "id": "cb-2",
                "start": "2026-12-07 11:30:00+00:00",
                "hours": 24,
                "upfront_fee": "755.52",
                "currency": "USD",
            },
        ]
    }, got


# ---- the lines under the table ---------------------------------------------------------------------------------
def test_the_ranking_is_explained_in_order():
    first = ranking_lines([])[0]
    assert first.startswith("ranked by: (1) usable (offered, EFA, On-Demand vCPU quota); (2) a probe"), first
    assert first.endswith("; (4) On-Demand price; (5) region and AZ name"), first


def test_capped_and_unread_spot_quotas_are_named_by_region():
    zones = [
        usable(spot_score=5, spot_quota_vcpus=64.0),
        replace(usable(spot_score=5), region="us-east-2"),
        replace(usable(spot_score=5, spot_quota_vcpus=1000.0), region="eu-north-1"),
    ]
    lines = ranking_lines(zones)
    assert lines[2].startswith("Spot scores capped in us-west-2 (64 < 96 vCPUs):"), lines
    assert lines[3] == "Spot scores unchecked in us-east-2: the Spot quota could not be read", lines
    assert len(lines) == 4, lines


def test_the_capped_line_says_why_the_scores_are_capped():
    line = ranking_lines([usable(spot_score=5, spot_quota_vcpus=64.0)])[2]
    assert line == (
        "Spot scores capped in us-west-2 (64 < 96 vCPUs): the account's Spot vCPU quota is below the vCPUs asked, "
        "and EC2 limits a new account's score target by its Spot limit"
    ), line


@pytest.mark.parametrize(
    "quota, named",
    [(64.0, "eu-north-1 (64 < 96 vCPUs), us-west-2 (64 < 96 vCPUs):"), (None, "eu-north-1, us-west-2:")],
    ids=["capped", "unread"],
)
def test_several_regions_capped_or_unchecked_are_named_comma_separated(quota, named):
    zones = [
        usable(spot_score=5, spot_quota_vcpus=quota),
        replace(usable(spot_score=5, spot_quota_vcpus=quota), region="eu-north-1"),
    ]
    line = ranking_lines(zones)[2]
    assert line.startswith(f"Spot scores {'capped' if quota else 'unchecked'} in {named}"), line


def test_the_spot_score_is_explained_as_a_signal_not_a_rank():
    lines = ranking_lines([usable(spot_score=9, spot_quota_vcpus=1000.0)])
    assert lines[1:] == [
        "spot (family) is a signal, not a rank: EC2 scores a Spot request for any of the family's types, not "
        "On-Demand capacity for this type"
    ], lines


def test_a_capped_zone_without_a_score_is_not_named():
    assert len(ranking_lines([usable(spot_quota_vcpus=1.0), usable(spot_score=3, spot_quota_vcpus=1000.0)])) == 2


# ---- one region's survey ---------------------------------------------------------------------------------------
class RegionEc2:
    """The region's AZs (name and id), as DescribeAvailabilityZones answers them; the survey's other reads are
    replaced by the `reads` fixture, so the rest of the driver's EC2 protocol (automation/aws_clients.py) fails."""

    def describe_availability_zones(self) -> dict:
        return {
            "AvailabilityZones": [
                {"ZoneName": "us-west-2b", "ZoneId": "usw2-az1"},
                {"ZoneName": "us-west-2a", "ZoneId": "usw2-az2"},
                {"ZoneName": "us-west-2c", "ZoneId": "usw2-az3"},
            ]
        }

    def describe_instance_types(self, *, InstanceTypes: list[str]) -> dict:  # noqa: N803
        raise AssertionError(f"the survey described {InstanceTypes} past the `reads` fixture")

    def describe_capacity_reservations(self, **params: object) -> dict:
        raise AssertionError(f"the survey listed reservations {params} past the `reads` fixture")

    def describe_regions(self) -> dict:
        raise AssertionError("the survey listed the regions past the `reads` fixture")

    def get_paginator(self, operation_name: str) -> Paginator:
        raise AssertionError(f"the survey paginated {operation_name} past the `reads` fixture")


class RegionQuotas:
    """The region's Service Quotas client; the quota reads are replaced by the `reads` fixture."""

    def get_service_quota(self, *, ServiceCode: str, QuotaCode: str) -> dict:  # noqa: N803
        raise AssertionError(f"the survey read quota {QuotaCode} past the `reads` fixture")


@pytest.fixture
def reads(monkeypatch):
    """The lower-level reads, answering as a region that offers g6.12xlarge in 2a and 2b, with EFA, 48 vCPUs a
    node and 1000 vCPUs free; each can be changed or made to fail by the test."""
    state = SimpleNamespace(
        offered={"us-west-2b", "us-west-2a"},
        info={"NetworkInfo": {"EfaSupported": True}, "VCpuInfo": {"DefaultVCpus": 48}},
        free=1000.0,
        price=4.6,
        spot_quota=192.0,
        reservations={"us-west-2b": ["cr-1"]},
        blocks={},
        quota_asked=[],
        asked={},  # read -> what it was asked about (the type, and the count or region where it takes one)
    )
    finding = SimpleNamespace(detail="quota not read: NoSuchResource", fix="aws service-quotas request ...")

    def quota(quotas, ec2, t, vcpus, count, region):
        assert isinstance(quotas, RegionQuotas) and isinstance(ec2, RegionEc2), (quotas, ec2)
        state.quota_asked.append((t, vcpus, count, region))
        return finding, vcpus * count, state.free

    def fails_or(value):
        if isinstance(value, Exception):
            raise value
        return value

    def ec2_of_region(ec2):
        assert isinstance(ec2, RegionEc2), f"asked {ec2!r}, not the region's EC2 client"

    def asked(read, *about):
        state.asked[read] = about

    monkeypatch.setattr(
        capacity, "offered_azs", lambda ec2, t: ec2_of_region(ec2) or asked("offered_azs", t) or set(state.offered)
    )
    monkeypatch.setattr(
        capacity, "describe_type", lambda ec2, t: ec2_of_region(ec2) or asked("describe_type", t) or state.info
    )
    monkeypatch.setattr(capacity, "check_quota", quota)
    monkeypatch.setattr(
        capacity,
        "spot_quota_vcpus",
        lambda q, t: asked("spot_quota_vcpus", t) or fails_or(state.spot_quota) if isinstance(q, RegionQuotas) else 0,
    )
    monkeypatch.setattr(
        capacity,
        "open_reservations",
        lambda ec2, t, n: ec2_of_region(ec2) or asked("open_reservations", t, n) or fails_or(state.reservations),
    )
    monkeypatch.setattr(
        capacity,
        "block_offerings",
        lambda ec2, t, n: ec2_of_region(ec2) or asked("block_offerings", t, n) or fails_or(state.blocks),
    )
    monkeypatch.setattr(
        capacity,
        "on_demand_price",
        lambda p, t, r: asked("on_demand_price", t, r) or fails_or(state.price) if p == "pricing" else 0,
    )
    return state


CLIENTS = RegionClients(RegionEc2(), RegionQuotas())
SPOT = SpotSignal({(WEST, "usw2-az1"): 8})


def test_a_region_survey_has_one_row_per_offered_az_with_what_ec2_said(reads):
    a, b = survey_region(CLIENTS, "pricing", G6, 2, WEST, SPOT)
    assert (a.az, b.az, a.region, a.offered) == ("us-west-2a", "us-west-2b", WEST, True), (a, b)
    assert (a.efa, a.vcpus_needed, a.vcpus_free, a.quota_fix) == (True, 96, 1000.0, "aws service-quotas request ...")
    assert (a.spot_score, b.spot_score, a.spot_quota_vcpus) == (None, 8, 192.0), (a, b)
    assert (a.reservations, b.reservations, a.usd_per_hour, a.notes) == ((), ("cr-1",), 4.6, ()), (a, b)
    assert a.region_azs == ("us-west-2a", "us-west-2b", "us-west-2c"), a.region_azs
    assert reads.quota_asked == [(G6, 48, 2, WEST)], reads.quota_asked


def test_a_region_that_does_not_offer_the_type_is_one_row_saying_so(reads):
    reads.offered = set()
    (z,) = survey_region(CLIENTS, None, G6, 2, WEST)
    assert (z.region, z.az, z.offered, z.notes) == (WEST, "", False, ("g6.12xlarge is not offered in us-west-2",)), z
    assert z.region_azs == ("us-west-2a", "us-west-2b", "us-west-2c"), z


def test_a_type_ec2_does_not_describe_has_unknown_efa_and_no_vcpus(reads):
    reads.info = None
    z = survey_region(CLIENTS, None, G6, 2, WEST)[0]
    assert (z.efa, reads.quota_asked[0][1]) == (None, 0), (z, reads.quota_asked)


@pytest.mark.parametrize(
    "info",
    [{"NetworkInfo": {}, "VCpuInfo": {"DefaultVCpus": 48}}, {"VCpuInfo": {"DefaultVCpus": 48}}],
    ids=["no-EfaSupported", "no-NetworkInfo"],
)
def test_a_type_without_efa_is_read_as_no_efa(reads, info):
    reads.info = info
    assert survey_region(CLIENTS, None, G6, 2, WEST)[0].efa is False


def test_an_unread_quota_is_noted_with_why(reads):
    reads.free = None
    assert survey_region(CLIENTS, None, G6, 2, WEST)[0].notes == ("quota not read: NoSuchResource",)


def test_the_spot_quota_is_read_only_when_there_are_scores(reads):
    reads.spot_quota = AssertionError("the Spot quota was read without a score to judge")
    assert survey_region(CLIENTS, None, G6, 2, WEST, SpotSignal(note="n"))[0].notes == ("n",)


def test_without_spot_scores_the_spot_quota_is_unknown(reads):
    assert survey_region(CLIENTS, None, G6, 2, WEST, SpotSignal(note="n"))[0].spot_quota_vcpus is None


@pytest.mark.parametrize(
    "read, about",
    [
        ("offered_azs", (P5,)),
        ("describe_type", (P5,)),
        ("spot_quota_vcpus", (P5,)),
        ("open_reservations", (P5, 3)),
        ("block_offerings", (P5, 3)),
        ("on_demand_price", (P5, WEST)),
    ],
)
def test_each_read_asks_about_the_surveyed_type_count_and_region(reads, read, about):
    survey_region(CLIENTS, "pricing", P5, 3, WEST, SPOT)
    assert reads.asked[read] == about, reads.asked


def test_an_az_the_region_does_not_name_has_no_spot_score(reads):
    # DescribeAvailabilityZones leaves out zones not opted in to unless asked with AllAvailabilityZones
    # (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeAvailabilityZones.html).
    reads.offered = {"us-west-2a", "us-west-2-lax-1a"}
    lax = next(z for z in survey_region(CLIENTS, None, G6, 2, WEST, SPOT) if z.az == "us-west-2-lax-1a")
    assert lax.spot_score is None, lax


def test_each_optional_read_that_fails_is_a_note_and_an_empty_column(reads):
    reads.spot_quota = refused("NoSuchResourceException")
    reads.reservations = refused("UnauthorizedOperation")
    reads.price = EndpointConnectionError(endpoint_url="https://pricing")
    z = survey_region(CLIENTS, "pricing", G6, 2, WEST, SPOT)[1]
    assert (z.spot_quota_vcpus, z.reservations, z.usd_per_hour) == (None, (), None), z
    assert z.notes == (
        "Spot quota: NoSuchResourceException",
        "capacity reservations: UnauthorizedOperation",
        "price: EndpointConnectionError",
    ), z.notes


def test_capacity_blocks_are_asked_only_for_eligible_families(reads):
    reads.blocks = {"us-west-2a": [{"id": "cb-1"}]}
    g6 = survey_region(CLIENTS, None, G6, 2, WEST)[0]
    p5 = survey_region(CLIENTS, None, P5, 2, WEST)[0]
    assert (g6.blocks, p5.blocks) == ((), ({"id": "cb-1"},)), (g6, p5)


def test_capacity_blocks_that_cannot_be_read_are_noted(reads):
    reads.blocks = refused("UnauthorizedOperation")
    assert survey_region(CLIENTS, None, P5, 2, WEST)[0].notes == ("Capacity Blocks: UnauthorizedOperation",)


def test_no_pricing_client_leaves_the_price_unknown(reads):
    reads.price = AssertionError("the price was asked without a pricing client")
    assert survey_region(CLIENTS, None, G6, 2, WEST)[0].usd_per_hour is None


def test_a_survey_of_regions_ranks_them_and_names_a_region_that_cannot_be_read(reads, monkeypatch):
    monkeypatch.setattr(capacity, "spot_signal", lambda ec2, t, n, regions: SpotSignal(note="n"))

    def clients_for(region):
        if region == "ap-east-1":
            raise refused("AuthFailure")
        return CLIENTS

    done: list[str] = []
    zones = survey([WEST, "ap-east-1"], clients_for, None, G6, 2, on_region=done.append, workers=1)
    assert [z.az for z in zones] == ["us-west-2b", "us-west-2a", ""], zones  # 2b holds cr-1
    assert zones[2] == Zone("ap-east-1", "", False, notes=("region ap-east-1 could not be read: AuthFailure",)), zones[
        2
    ]
    assert sorted(done) == ["ap-east-1", WEST], done


def test_the_survey_asks_the_spot_score_once_for_all_regions_with_the_first_regions_client(reads, monkeypatch):
    clients = {WEST: CLIENTS, "us-east-2": RegionClients(RegionEc2(), RegionQuotas())}
    calls = []
    monkeypatch.setattr(
        capacity, "spot_signal", lambda ec2, t, n, regions: calls.append((ec2, t, n, regions)) or SpotSignal(note="n")
    )
    survey([WEST, "us-east-2"], clients.__getitem__, None, G6, 2, workers=1)
    assert calls == [(CLIENTS.ec2, G6, 2, [WEST, "us-east-2"])], calls


def test_a_surveyed_region_is_its_own_survey_with_the_surveys_spot_scores_and_prices(reads, monkeypatch):
    monkeypatch.setattr(capacity, "spot_signal", lambda ec2, t, n, regions: SPOT)
    got = survey([WEST], lambda region: CLIENTS, "pricing", G6, 2)
    assert got == capacity.rank(survey_region(CLIENTS, "pricing", G6, 2, WEST, SPOT)), got


@pytest.mark.parametrize("regions, workers, threads", [(1, 8, 1), (3, 2, 2), (3, 8, 3)])
def test_the_survey_runs_one_thread_per_region_up_to_workers(reads, monkeypatch, regions, workers, threads):
    sizes = []

    class Pool(capacity.ThreadPoolExecutor):
        def __init__(self, max_workers=None):
            sizes.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(capacity, "ThreadPoolExecutor", Pool)
    monkeypatch.setattr(capacity, "spot_signal", lambda ec2, t, n, regions: SpotSignal(note="n"))
    survey([f"r{i}" for i in range(regions)], lambda region: CLIENTS, None, G6, 2, workers=workers)
    assert sizes == [threads], sizes


def test_a_survey_of_no_regions_is_empty():
    assert survey([], lambda r: CLIENTS, None, G6, 2) == []


# ---- a node group stuck for want of capacity -------------------------------------------------------------------
def stuck(status="CREATING", code="AsgInstanceLaunchFailures", message="InsufficientInstanceCapacity: no g6") -> dict:
    return {
        "nodegroupName": "gpu-ng",
        "status": status,
        "labels": {"role": "gpu-worker"},
        "health": {
            "issues": [{"code": "Ec2SecurityGroupNotFound", "message": "x"}, {"code": code, "message": message}]
        },
    }


def test_a_creating_group_with_a_capacity_issue_is_stuck():
    assert capacity_stuck(stuck()) == "AsgInstanceLaunchFailures: InsufficientInstanceCapacity: no g6"


def test_the_capacity_code_may_be_the_issues_code():
    assert capacity_stuck(stuck(code="InsufficientInstanceCapacity", message="m")) is not None


@pytest.mark.parametrize("group", [stuck(status="ACTIVE"), stuck(message="AccessDenied"), {"status": "CREATING"}])
def test_an_active_group_or_another_issue_is_not_stuck(group):
    assert capacity_stuck(group) is None


def test_the_stuck_line_names_the_az_the_issue_and_the_key_to_set():
    line = stuck_line(stuck(), "us-west-2a", "us-west-2b", "us-west-2")
    assert line == (
        "GPU node group gpu-ng is still CREATING: EC2 has no capacity in us-west-2a (AsgInstanceLaunchFailures: "
        "InsufficientInstanceCapacity: no g6); the capacity finder ranks us-west-2b next: set "
        "'ray-efa-eks:gpuAvailabilityZone: us-west-2b' in Pulumi.us-west-2.yaml and run `up` again"
    ), line


def test_without_another_usable_az_the_line_says_to_look_further():
    line = stuck_line(stuck(), "us-west-2a", None, "us-west-2")
    assert line.endswith(
        "no other AZ of the region is usable: `python -m automation capacity --all-regions` looks further"
    )


def test_a_stuck_group_eks_did_not_name_is_named_with_a_question_mark():
    group = {k: v for k, v in stuck().items() if k != "nodegroupName"}
    line = stuck_line(group, "us-west-2a", None, "s")
    assert line.startswith("GPU node group ? is still CREATING: "), line


def test_a_group_not_stuck_has_no_line():
    assert stuck_line(stuck(status="ACTIVE"), "us-west-2a", "us-west-2b", "s") is None


class Groups:
    def __init__(self, *groups):
        self.groups = {g["nodegroupName"]: g for g in groups}

    def list_nodegroups(self, clusterName):  # noqa: N803
        assert clusterName in ("c", "ray-efa-eks"), f"asked about cluster {clusterName!r}"
        return {"nodegroups": list(self.groups)} if self.groups else {}  # EKS may leave an empty list out

    def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803
        assert clusterName in ("c", "ray-efa-eks"), f"asked about cluster {clusterName!r}"
        return {"nodegroup": self.groups[nodegroupName]}


def test_the_watch_says_once_which_gpu_group_is_stuck_and_the_next_az():
    system = {**stuck(), "nodegroupName": "system", "labels": {"role": "system"}}
    said: list[str] = []
    watch = UpWatch(Groups(system, stuck()), "c", "us-west-2a", "us-west-2", lambda: "us-west-2c", said.append)
    line = watch.check_once()
    assert said == [line] and watch.said == line, said
    assert line == stuck_line(stuck(), "us-west-2a", "us-west-2c", "us-west-2"), line


def test_the_watch_passes_over_a_group_without_labels():
    by_hand = {**{k: v for k, v in stuck().items() if k != "labels"}, "nodegroupName": "by-hand"}
    watch = UpWatch(Groups(by_hand, stuck()), "c", "us-west-2a", "s", lambda: None, lambda line: None)
    line = watch.check_once()
    assert line.startswith("GPU node group gpu-ng is still CREATING"), line


def test_leaving_the_watch_waits_a_bounded_time_for_its_thread():
    # The thread may be inside an EKS call that hangs on the network: `up` must not hang with it.
    watch = UpWatch(Groups(), "c", "a", "s", lambda: None, lambda line: None)
    joined = []
    watch._thread = SimpleNamespace(join=lambda timeout=None: joined.append(timeout))
    watch.__exit__(None, None, None)
    assert [t is not None for t in joined] == [True], joined


def test_the_watch_of_healthy_groups_says_nothing():
    said: list[str] = []
    watch = UpWatch(Groups(stuck(status="ACTIVE")), "c", "a", "s", lambda: pytest.fail("ranked"), said.append)
    assert (watch.check_once(), said) == (None, []), said


# ---- --write-stack ---------------------------------------------------------------------------------------------
def test_the_stack_file_pins_region_azs_type_count_and_reservation():
    z = usable(reservations=("cr-1", "cr-2"), region_azs=("us-west-2a", "us-west-2b", "us-west-2c"))
    text = stack_file_text("gpu-west", z, G6, 2, system_azs={"us-west-2c"})
    assert text == (
        "# Stack gpu-west: 2 x g6.12xlarge in us-west-2a, chosen by `python -m automation capacity`.\n"
        "config:\n"
        "  aws:region: us-west-2\n"
        "  ray-efa-eks:availabilityZones:\n"
        "    - us-west-2a\n"
        "    - us-west-2c\n"
        "  ray-efa-eks:gpuAvailabilityZone: us-west-2a\n"
        "  ray-efa-eks:gpuInstanceType: g6.12xlarge\n"
        "  ray-efa-eks:gpuNodeCount: 2\n"
        "  ray-efa-eks:gpuCapacityReservationId: cr-1\n"
    ), text


def test_no_other_az_for_the_system_nodes_writes_no_stack():
    z = usable(region_azs=("us-west-2a", "us-west-2b"))
    assert stack_file_text("s", z, G6, 2, system_azs={"us-west-2a"}) is None


def test_a_capacity_block_on_sale_is_a_comment_with_its_purchase_command():
    block = {"id": "cb-1", "start": "2026-12-07", "hours": 24, "upfront_fee": "755.52", "currency": "USD"}
    z = usable(blocks=(block, {**block, "id": "cb-2"}), region_azs=("us-west-2a", "us-west-2b"))
    lines = stack_file_text("s", z, P5, 2, system_azs={"us-west-2b"}).splitlines()
    assert lines[1] == (
        "# A Capacity Block is on sale here (2026-12-07, 24 h, 755.52 USD upfront): `aws ec2 purchase-capacity-block "
        "--capacity-block-offering-id cb-1 --instance-platform Linux/UNIX --region us-west-2`, then set "
        "gpuCapacityReservationId to its reservation and gpuCapacityBlock: true."
    ), lines
    assert sum("cb-2" in line for line in lines) == 0 and lines[2] == "config:", lines


def test_the_watch_keeps_looking_while_the_cluster_cannot_be_read_and_stops_once_it_said():
    class NotYet(Groups):
        def __init__(self, *groups):
            super().__init__(*groups)
            self.looks = 0

        def list_nodegroups(self, clusterName):  # noqa: N803
            self.looks += 1
            if self.looks == 1:
                raise refused("ResourceNotFoundException")  # the cluster does not exist yet
            return super().list_nodegroups(clusterName)

    eks, said = NotYet(stuck()), []
    watch = UpWatch(eks, "c", "us-west-2a", "s", lambda: "us-west-2b", said.append, interval=0)
    watch._loop()
    assert (eks.looks, len(said)) == (2, 1), (eks.looks, said)


def test_a_cluster_without_node_groups_is_not_stuck():
    assert UpWatch(Groups(), "c", "a", "s", lambda: None, lambda s: None).check_once() is None


def test_the_watch_thread_ends_when_up_ends_and_never_holds_the_process():
    watch = UpWatch(Groups(), "c", "a", "s", lambda: None, lambda s: None, interval=3600)
    with watch:
        assert watch._thread.is_alive() and watch._thread.daemon
    assert not watch._thread.is_alive(), "the watch outlived `up`"


def stack_target(ec2=None) -> SimpleNamespace:
    """The `up` target as the watch reads it: the stack's cluster, region, GPU AZ, type and count."""
    cfg = SimpleNamespace(
        stack="us-west-2",
        region=WEST,
        cluster=SimpleNamespace(name="ray-efa-eks"),
        gpu_nodes=SimpleNamespace(instance_type=G6, node_count=2, availability_zone="us-west-2a"),
    )
    clients = {"ec2": ec2 or RegionEc2(), "service-quotas": RegionQuotas(), "eks": Groups(stuck())}
    notes: list[str] = []
    return SimpleNamespace(
        cfg=cfg, deps=SimpleNamespace(client=lambda name: clients[name]), note=notes.append, notes=notes
    )


def test_the_stacks_zones_are_the_survey_of_its_region_type_and_count_without_prices(reads):
    zones = capacity.stack_zones(stack_target())
    assert [(z.region, z.az, z.usd_per_hour) for z in zones] == [(WEST, "us-west-2a", None), (WEST, "us-west-2b", None)]
    assert reads.quota_asked == [(G6, 48, 2, WEST)], reads.quota_asked


def test_the_stacks_zones_are_none_when_ec2_cannot_be_read(reads):
    class Refusing(RegionEc2):
        def describe_availability_zones(self):
            raise refused("UnauthorizedOperation")

    assert capacity.stack_zones(stack_target(Refusing())) == []


def test_ups_watch_names_the_best_other_az_of_the_stacks_region(reads):
    reads.reservations = {"us-west-2a": ["cr-1"]}  # the stuck AZ itself ranks first
    t = stack_target()
    watch = capacity.up_watch(t, interval=7.0)
    line = watch.check_once()
    assert (watch.cluster, watch.az, watch.stack, watch.interval) == ("ray-efa-eks", "us-west-2a", "us-west-2", 7.0)
    assert "ranks us-west-2b next" in line and t.notes == [line], (line, t.notes)


# ---- Properties of the capacity ranking (automation/capacity_finder.py, ``rank``): monotonic in each key, price
# included, and blind to the order the zones were surveyed in.
#
# A zone is what one region and AZ answered; its keys, best first, as the module's docstring names them: usable
# (offered, EFA, within the vCPU quota), a passed probe (a failed probe last), a reservation or Capacity Block,
# a lower On-Demand price (an unknown price last). The Spot placement score (1 to 10,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html) is no key.

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True)

zone = st.builds(
    Zone,
    region=st.sampled_from(["us-east-1", "us-east-2", "us-west-2"]),
    az=st.sampled_from(["a", "b", "c", "d"]),
    offered=st.booleans(),
    efa=st.sampled_from([True, False, None]),
    vcpus_needed=st.sampled_from([48, 96, 192]),  # 1, 2, 4 x g6.12xlarge (48 vCPUs each)
    vcpus_free=st.one_of(st.none(), st.sampled_from([0.0, 47.0, 48.0, 96.0, 1000.0])),
    spot_score=st.one_of(st.none(), st.integers(min_value=1, max_value=10)),
    reservations=st.sampled_from([(), ("cr-0123456789abcdef0",)]),
    usd_per_hour=st.one_of(st.none(), st.floats(min_value=0.5, max_value=100.0)),
    probe=st.sampled_from(["", PROBED, "InsufficientInstanceCapacity"]),
)


def _before(better: Zone, worse: Zone, others: list[Zone], at: int) -> bool:
    """Whether ``better`` ranks ahead of ``worse`` with ``others`` around them (both listed worse first)."""
    listed = [*others[:at], worse, *others[at:], better]
    order = rank(listed)
    return next(i for i, z in enumerate(order) if z is better) < next(i for i, z in enumerate(order) if z is worse)


def _same_place(a: Zone, b: Zone) -> Zone:
    """``b`` moved to ``a``'s region and AZ, so only the key under test differs (region and AZ break ties)."""
    return replace(b, region=a.region, az=a.az)


@PROPERTY
@given(z=zone, cheaper=st.floats(min_value=0.01, max_value=0.99), others=st.lists(zone, max_size=6), data=st.data())
def test_a_lower_price_never_ranks_lower(z, cheaper, others, data):
    priced = replace(z, usd_per_hour=z.usd_per_hour or 10.0)
    low = replace(priced, usd_per_hour=priced.usd_per_hour * cheaper)
    at = data.draw(st.integers(min_value=0, max_value=len(others)))
    assert _before(low, priced, others, at), f"${low.usd_per_hour:.2f} ranked behind ${priced.usd_per_hour:.2f}"


@PROPERTY
@given(z=zone, price=st.floats(min_value=0.01, max_value=1000.0))
def test_a_known_price_ranks_ahead_of_an_unknown_one(z, price):
    known, unknown = replace(z, usd_per_hour=price), replace(z, usd_per_hour=None)
    assert _before(known, unknown, [], 0), f"${price:.2f} ranked behind an unknown price"


@PROPERTY
@given(zones=st.lists(zone, max_size=10, unique_by=lambda z: (z.region, z.az)), data=st.data())
def test_no_spot_score_changes_the_ranking(zones, data):
    # The score rates a Spot request for the family's types, not On-Demand capacity for this one (automation/
    # capacity.py's docstring): it is shown, never ranked, whatever the scores and the Spot quota.
    scores = data.draw(st.lists(st.integers(min_value=1, max_value=10), min_size=len(zones), max_size=len(zones)))
    rescored = [replace(z, spot_score=s, spot_quota_vcpus=1000.0) for z, s in zip(zones, scores, strict=True)]
    places = [[(z.region, z.az) for z in rank(zs)] for zs in (zones, rescored)]
    assert places[0] == places[1], f"new Spot scores {scores} changed the order"


@PROPERTY
@given(z=zone)
def test_a_reservation_ranks_ahead_of_none_at_any_price(z):
    held = replace(z, reservations=("cr-0123456789abcdef0",), spot_score=1, usd_per_hour=99.0)
    bare = replace(z, reservations=(), blocks=(), spot_score=10, usd_per_hour=0.01)
    assert _before(held, bare, [], 0), "a zone with an open reservation ranked behind one without"


@PROPERTY
@given(z=zone)
def test_a_passed_probe_ranks_ahead_of_an_unprobed_zone_and_a_failed_probe_last(z):
    passed, unprobed, failed = (replace(z, probe=p) for p in (PROBED, "", "InsufficientInstanceCapacity"))
    assert _before(passed, unprobed, [], 0) and _before(unprobed, failed, [], 0), (
        f"expected probe order passed < unprobed < failed for {z}"
    )


@PROPERTY
@given(z=zone)
def test_a_failed_probe_ranks_last_even_with_a_reservation(z):
    # rank_key's docstring: "a failed probe last"; EC2 refused capacity there a moment ago
    failed = replace(z, probe="InsufficientInstanceCapacity", reservations=("cr-0123456789abcdef0",))
    unprobed = replace(z, probe="", reservations=(), blocks=())
    assert _before(unprobed, failed, [], 0), f"a failed probe with a reservation ranked ahead of {unprobed}"


@PROPERTY
@given(worse=zone, better=zone)
def test_a_usable_zone_ranks_ahead_of_any_unusable_one(worse, better):
    usable = replace(_same_place(worse, better), offered=True, efa=True, vcpus_needed=48, vcpus_free=48.0)
    unusable = replace(worse, efa=False)
    assert usable.usable and not unusable.usable
    assert _before(usable, unusable, [], 0), f"usable {usable} ranked behind unusable {unusable}"


@PROPERTY
@given(zones=st.lists(zone, max_size=10, unique_by=lambda z: (z.region, z.az)), data=st.data())
def test_the_ranking_does_not_depend_on_the_order_zones_were_surveyed(zones, data):
    shuffled = data.draw(st.permutations(zones))
    assert rank(shuffled) == rank(zones), "two survey orders of the same zones ranked differently"


# ---- the quota on both sides: g6.12xlarge has 48 vCPUs (DescribeInstanceTypes; ENVIRONMENT.md, moto 5.2.5) ----
def test_a_quota_that_exactly_fits_is_usable():
    z = Zone("us-west-2", "us-west-2a", offered=True, efa=True, vcpus_needed=2 * 48, vcpus_free=96.0)
    assert z.usable, f"96 free vCPUs for 2 x 48: expected usable, got quota_ok={z.quota_ok}"


def test_a_quota_one_vcpu_short_is_not_usable():
    z = Zone("us-west-2", "us-west-2a", offered=True, efa=True, vcpus_needed=2 * 48, vcpus_free=95.0)
    assert not z.usable, f"95 free vCPUs for 2 x 48: expected not usable, got quota_ok={z.quota_ok}"


def test_an_unread_quota_is_not_usable():
    z = Zone("us-west-2", "us-west-2a", offered=True, efa=True, vcpus_needed=48, vcpus_free=None)
    assert (z.quota_ok, z.usable) == (None, False), f"quota unread: got quota_ok={z.quota_ok}, usable={z.usable}"


def test_a_zone_whose_efa_could_not_be_read_is_not_usable():
    # DescribeInstanceTypes failed there (efa None): usable claims `up` could create EFA nodes, which is unknown
    z = Zone("us-west-2", "us-west-2a", offered=True, efa=None, vcpus_needed=48, vcpus_free=96.0)
    assert not z.usable, f"EFA unknown: expected not usable, got usable (quota_ok={z.quota_ok})"
