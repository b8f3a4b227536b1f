"""Properties of the capacity ranking (automation/capacity.py, ``rank``): monotonic in each key, price included,
and blind to the order the zones were surveyed in.

A zone is what one region and AZ answered; its keys, best first, as the module's docstring names them: usable
(offered, EFA, within the vCPU quota), a passed probe (a failed probe last), a reservation or Capacity Block,
a lower On-Demand price (an unknown price last). The Spot placement score (1 to 10,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html) is no key.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from automation.capacity import PROBED, Zone, rank

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
