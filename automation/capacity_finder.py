"""Where an EFA GPU instance type can be had: per region and AZ, what EC2 says about offering, EFA, quota,
Spot placement score, open reservations, Capacity Blocks and price, ranked (`python -m automation capacity`).

Each fact comes from one call; a call that fails leaves its column unknown with the reason, never a guess:
- offerings per AZ: DescribeInstanceTypeOfferings
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstanceTypeOfferings.html);
  EFA: DescribeInstanceTypes' NetworkInfo.EfaSupported; the vCPU quota as preflight reads it (automation/ec2.py);
- Spot placement score, 1 to 10, per AZ with SingleAvailabilityZone
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html): a signal of spare capacity.
  Asked as that guide's Limitations require: with at least three instance types (fewer "always" score low), so
  for the family of comparable types (``spot_types``), one call per ten regions (RegionNames' limit in botocore's
  model); EC2 answers the top ten AZs only, so an AZ may have no score. Without recent Spot usage the guide caps
  the target at the Spot request limit: where the family's Spot vCPU quota is below the vCPUs asked, the score
  is shown "capped". It is shown, never ranked: it rates a Spot request for any of the family's types
  (GetSpotPlacementScores: "a recommendation only"), not On-Demand capacity for the one type `up` launches, so it
  must not choose the AZ (`--auto-az`, `--write-stack`);
- active On-Demand Capacity Reservations with enough available instances (DescribeCapacityReservations);
- Capacity Block offerings for the eligible families only (infra/eks_facts.py)
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityBlockOfferings.html);
- the On-Demand price from the Pricing API (automation/cost.py).
The AWS sample's scripts/find_gpu_capacity.sh (aws-samples/sample-aws-deep-learning-containers, training/ray-train)
checks offering, quota, the Spot score and, with --probe, a created-and-cancelled reservation; this adds EFA,
reservations, Capacity Blocks and prices.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from automation.aws_clients import Ec2, Eks, Pricing, ServiceQuotas
from automation.cost import on_demand_price
from automation.ec2 import check_quota, describe_type, error_code, offered_azs, spot_quota_for, spot_quota_vcpus
from automation.targets.aws import AwsTarget
from infra.catalog import instance_spec, known_instance_types
from infra.config import GpuNodesConfig, NetworkConfig
from infra.eks_facts import capacity_block_eligible
from infra.names import GPU_ROLE, ROLE_LABEL

_T = TypeVar("_T")
BLOCK_HOURS = 24  # the block length asked about: one day, as the CLI example in infra/eks_facts.py asks
PROBED = "capacity now"  # a probe reservation's answer when EC2 held the capacity (automation/capacity_probe.py)
SPOT_MIN_TYPES = 3  # fewer instance types "always" score low (Spot placement score, Limitations)
SPOT_REGIONS_PER_CALL = 10  # GetSpotPlacementScores' RegionNames holds at most ten (botocore's EC2 model)


@dataclass(frozen=True)
class RegionClients:
    ec2: Ec2
    quotas: ServiceQuotas


@dataclass(frozen=True)
class Zone:
    """One region and AZ's answer for ``count`` instances of a type; None is "could not be read" (see notes)."""

    region: str
    az: str
    offered: bool
    efa: bool | None = None
    vcpus_needed: int = 0
    vcpus_free: float | None = None
    quota_fix: str = ""  # the quota-increase command when the free vCPUs are short
    spot_score: int | None = None  # the family's Spot placement score in this AZ (spot_types)
    spot_quota_vcpus: float | None = None  # the family's Spot vCPU quota in the region
    reservations: tuple[str, ...] = ()  # open ODCRs in this AZ with room for the count
    blocks: tuple[dict, ...] = ()  # Capacity Block offerings: start, hours, upfront fee
    usd_per_hour: float | None = None  # On-Demand, one instance
    probe: str = ""  # "capacity now", or the error code a probe reservation got
    notes: tuple[str, ...] = ()
    region_azs: tuple[str, ...] = field(default=(), repr=False)  # every AZ of the region (for --write-stack)

    @property
    def quota_ok(self) -> bool | None:
        return None if self.vcpus_free is None else self.vcpus_free >= self.vcpus_needed

    @property
    def spot_capped(self) -> bool | None:
        """EC2 scored against a lower target than the count (the Spot quota is below the vCPUs asked)."""
        return None if self.spot_quota_vcpus is None else self.spot_quota_vcpus < self.vcpus_needed

    @property
    def spot_counts(self) -> bool:
        """The score carries information: there is one, and the account's Spot quota does not cap it."""
        return self.spot_score is not None and self.spot_capped is False

    @property
    def usable(self) -> bool:
        """Offered, with EFA, and within the quota: `up` could create the nodes here if capacity exists."""
        return self.offered and self.efa is True and self.quota_ok is True

    def rank_key(self) -> tuple:
        """RANKING's order; the Spot score is not a key (the module's docstring says why)."""
        probe = 0 if self.probe == PROBED else (2 if self.probe else 1)
        held = 0 if (self.reservations or self.blocks) else 1
        price = self.usd_per_hour if self.usd_per_hour is not None else math.inf
        return (not self.usable, probe, held, price, self.region, self.az)

    def to_dict(self) -> dict[str, object]:
        derived = {k: getattr(self, k) for k in ("usable", "quota_ok", "spot_capped", "spot_counts")}
        return {k: v for k, v in asdict(self).items() if k != "region_azs"} | derived


RANKING = (
    "usable (offered, EFA, On-Demand vCPU quota)",
    "a probe that got capacity, then unprobed, a refused probe last",
    "an open Capacity Reservation or Capacity Block",
    "On-Demand price",
    "region and AZ name",
)


SPOT_SIGNAL = (
    "spot (family) is a signal, not a rank: EC2 scores a Spot request for any of the family's types, not On-Demand "
    "capacity for this type"
)


@dataclass(frozen=True)
class SpotSignal:
    """The survey's Spot placement scores of the family (spot_types): (region, AZ id) -> score; ``note``: why none."""

    scores: dict[tuple[str, str], int] = field(default_factory=dict)
    note: str = ""


def spot_types(instance_type: str) -> tuple[str, ...]:
    """``instance_type`` and the catalog's comparable types: EFA, the same number of GPUs (the job fits each)."""
    specs = {t: instance_spec(t) for t in known_instance_types()}
    gpus = instance_spec(instance_type).gpus
    return (instance_type, *(t for t, s in specs.items() if t != instance_type and s.efa_supported and s.gpus == gpus))


def spot_signal(ec2: Ec2, instance_type: str, count: int, regions: Sequence[str]) -> SpotSignal:
    """The family's Spot placement scores, one AZ each, for every region of the survey: one call per ten regions."""
    types = spot_types(instance_type)
    if len(types) < SPOT_MIN_TYPES:
        return SpotSignal(note=f"not asked: fewer than {SPOT_MIN_TYPES} comparable types ({', '.join(types)})")
    scores: dict[tuple[str, str], int] = {}
    try:
        for i in range(0, len(regions), SPOT_REGIONS_PER_CALL):
            pages = ec2.get_paginator("get_spot_placement_scores").paginate(
                InstanceTypes=list(types),
                TargetCapacity=count,
                SingleAvailabilityZone=True,
                RegionNames=list(regions[i : i + SPOT_REGIONS_PER_CALL]),
            )
            for page in pages:
                for sc in page.get("SpotPlacementScores", []):
                    # Both names are optional in the API reference (SpotPlacementScore): a score that does not
                    # name its AZ cannot be placed, and must not match an AZ whose id is unknown either.
                    if sc.get("Region") and sc.get("AvailabilityZoneId"):
                        scores[(sc["Region"], sc["AvailabilityZoneId"])] = int(sc["Score"])
    except (ClientError, BotoCoreError) as e:
        return SpotSignal(note=f"Spot placement score: {error_code(e)}")
    return SpotSignal(scores)


def open_reservations(ec2: Ec2, instance_type: str, count: int) -> dict[str, list[str]]:
    """AZ -> ids of active On-Demand Capacity Reservations of the type with ``count`` or more available."""
    resp = ec2.describe_capacity_reservations(
        Filters=[{"Name": "instance-type", "Values": [instance_type]}, {"Name": "state", "Values": ["active"]}]
    )
    found: dict[str, list[str]] = {}
    for cr in resp.get("CapacityReservations", []):
        if int(cr.get("AvailableInstanceCount", 0)) >= count:
            found.setdefault(cr["AvailabilityZone"], []).append(cr["CapacityReservationId"])
    return found


def block_offerings(ec2: Ec2, instance_type: str, count: int) -> dict[str, list[dict]]:
    """AZ -> Capacity Block offerings of ``count`` instances for BLOCK_HOURS: start, hours, upfront fee (every page:
    EC2 pages the offerings with NextToken)."""
    pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
        InstanceType=instance_type, InstanceCount=count, CapacityDurationHours=BLOCK_HOURS
    )
    found: dict[str, list[dict]] = {}
    for o in (o for page in pages for o in page.get("CapacityBlockOfferings", [])):
        found.setdefault(o["AvailabilityZone"], []).append(
            {
                "id": o.get("CapacityBlockOfferingId"),
                "start": str(o.get("StartDate")),
                "hours": o.get("CapacityBlockDurationHours"),
                "upfront_fee": o.get("UpfrontFee"),
                "currency": o.get("CurrencyCode"),
            }
        )
    return found


def ranking_lines(zones: Sequence[Zone]) -> list[str]:
    """The ranking's order and why, as printed under the table."""
    scored = [z for z in zones if z.spot_score is not None]
    capped = sorted({f"{z.region} ({z.spot_quota_vcpus:g} < {z.vcpus_needed} vCPUs)" for z in scored if z.spot_capped})
    unknown = sorted({z.region for z in scored if z.spot_capped is None})
    lines = ["ranked by: " + "; ".join(f"({i}) {what}" for i, what in enumerate(RANKING, 1)), SPOT_SIGNAL]
    if capped:
        lines.append(
            f"Spot scores capped in {', '.join(capped)}: the account's Spot vCPU quota is below the vCPUs asked, "
            "and EC2 limits a new account's score target by its Spot limit"
        )
    if unknown:
        lines.append(f"Spot scores unchecked in {', '.join(unknown)}: the Spot quota could not be read")
    return lines


def _optional(what: str, notes: list[str], call: Callable[[], _T], empty: _T) -> _T:
    try:
        return call()
    except (ClientError, BotoCoreError) as e:
        notes.append(f"{what}: {error_code(e)}")
        return empty


def survey_region(
    c: RegionClients,
    pricing: Pricing | None,
    instance_type: str,
    count: int,
    region: str,
    spot: SpotSignal = SpotSignal(),
) -> list[Zone]:
    """Every AZ of ``region`` that offers ``instance_type``, with what EC2 says about ``count`` of them there
    (``spot``: the survey's Spot placement scores)."""
    # The Spot placement score names AZs by id. Without AllAvailabilityZones, DescribeAvailabilityZones leaves out
    # zones not opted in to: an AZ may lack an id.
    az_id = {z["ZoneName"]: z["ZoneId"] for z in c.ec2.describe_availability_zones()["AvailabilityZones"]}
    all_azs = tuple(sorted(az_id))
    offered = sorted(offered_azs(c.ec2, instance_type))
    if not offered:
        return [Zone(region, "", False, notes=(f"{instance_type} is not offered in {region}",), region_azs=all_azs)]
    info = describe_type(c.ec2, instance_type)
    efa = bool(info.get("NetworkInfo", {}).get("EfaSupported")) if info else None
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"]) if info else 0
    finding, need, free = check_quota(c.quotas, c.ec2, instance_type, vcpus, count, region)
    notes = [n for n in (finding.detail if free is None else "", spot.note) if n]
    spot_quota = None
    if spot.scores and spot_quota_for(instance_type):
        spot_quota = _optional("Spot quota", notes, lambda: spot_quota_vcpus(c.quotas, instance_type), None)
    none_held: dict[str, list[str]] = {}
    held = _optional("capacity reservations", notes, lambda: open_reservations(c.ec2, instance_type, count), none_held)
    blocks: dict[str, list[dict]] = {}
    if capacity_block_eligible(instance_type):
        blocks = _optional("Capacity Blocks", notes, lambda: block_offerings(c.ec2, instance_type, count), {})
    price = None
    if pricing is not None:
        price = _optional("price", notes, lambda: on_demand_price(pricing, instance_type, region), None)
    return [
        Zone(
            region,
            az,
            True,
            efa=efa,
            vcpus_needed=need,
            vcpus_free=free,
            quota_fix=finding.fix,
            spot_score=spot.scores.get((region, az_id[az])) if az in az_id else None,
            spot_quota_vcpus=spot_quota,
            reservations=tuple(held.get(az, ())),
            blocks=tuple(blocks.get(az, ())),
            usd_per_hour=price,
            notes=tuple(notes),
            region_azs=all_azs,
        )
        for az in offered
    ]


def survey(
    regions: Sequence[str],
    clients_for: Callable[[str], RegionClients],
    pricing: Pricing | None,
    instance_type: str,
    count: int,
    on_region: Callable[[str], None] = lambda region: None,
    workers: int = 8,
) -> list[Zone]:
    """``survey_region`` over ``regions`` in parallel after one Spot survey of all, ranked; a region that cannot be
    read is one row saying why (an opt-in region without opt-in answers AuthFailure, for example)."""
    spot = spot_signal(clients_for(regions[0]).ec2, instance_type, count, regions) if regions else SpotSignal()

    def one(region: str) -> list[Zone]:
        try:
            return survey_region(clients_for(region), pricing, instance_type, count, region, spot)
        except (ClientError, BotoCoreError) as e:
            return [Zone(region, "", False, notes=(f"region {region} could not be read: {error_code(e)}",))]

    zones: list[Zone] = []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(regions)))) as pool:
        futures = {pool.submit(one, r): r for r in regions}
        for done in as_completed(futures):
            zones.extend(done.result())
            on_region(futures[done])
    return rank(zones)


def rank(zones: Sequence[Zone]) -> list[Zone]:
    return sorted(zones, key=Zone.rank_key)


def next_az(zones: Sequence[Zone], tried: Collection[str], within: Collection[str] = ()) -> str | None:
    """The best-ranked usable AZ of ``zones`` (one region's) not in ``tried``, and in ``within`` when given."""
    return next((z.az for z in rank(zones) if z.usable and z.az not in tried and (not within or z.az in within)), None)


# ---- `up`: a GPU node group stuck in CREATING for want of capacity ------------------------------------------
# EKS reports a launch EC2 refused as the health issue AsgInstanceLaunchFailures (or NodeCreationFailure), whose
# message carries EC2's error code (https://docs.aws.amazon.com/eks/latest/APIReference/API_Issue.html;
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/troubleshooting-launch.html#troubleshooting-launch-capacity).
NO_CAPACITY = "InsufficientInstanceCapacity"


def capacity_stuck(nodegroup: dict) -> str | None:
    """The health issue that says EC2 has no capacity for a node group still CREATING, else None."""
    if nodegroup.get("status") != "CREATING":
        return None
    issues = (f"{i.get('code')}: {i.get('message')}" for i in nodegroup.get("health", {}).get("issues", []))
    return next((said for said in issues if NO_CAPACITY in said), None)


def stuck_line(nodegroup: dict, az: str, next_best: str | None, stack: str) -> str | None:
    """What to tell the user while `up` waits on a node group EC2 cannot fill, naming the next ranked AZ."""
    issue = capacity_stuck(nodegroup)
    if issue is None:
        return None
    name = nodegroup.get("nodegroupName", "?")
    instead = (
        f"the capacity finder ranks {next_best} next: set "
        f"'{GpuNodesConfig.keyname('availability_zone', prefixed=True)}: {next_best}' in "
        f"Pulumi.{stack}.yaml and run `up` again"
        if next_best
        else "no other AZ of the region is usable: `python -m automation capacity --all-regions` looks further"
    )
    return f"GPU node group {name} is still CREATING: EC2 has no capacity in {az} ({issue}); {instead}"


@dataclass
class UpWatch:
    """While `up` runs: every ``interval`` s, the cluster's GPU node groups (label role=gpu-worker); the first time
    one is stuck for want of capacity, ``say`` the line naming the next AZ (``next_best()``, asked only then)."""

    eks: Eks
    cluster: str
    az: str
    stack: str
    next_best: Callable[[], str | None]
    say: Callable[[str], None]
    interval: float = 60.0
    said: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, init=False)

    def check_once(self) -> str | None:
        """One look; the line said, if this look found the node group stuck."""
        for name in self.eks.list_nodegroups(clusterName=self.cluster).get("nodegroups", []):
            ng = self.eks.describe_nodegroup(clusterName=self.cluster, nodegroupName=name)["nodegroup"]
            if ng.get("labels", {}).get(ROLE_LABEL) != GPU_ROLE or capacity_stuck(ng) is None:
                continue
            said = stuck_line(ng, self.az, self.next_best(), self.stack)
            if said is not None:
                self.said = said
                self.say(said)
            return said
        return None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval) and self.said is None:
            try:
                self.check_once()
            except (ClientError, BotoCoreError):
                continue  # the cluster may not exist yet; `up` itself reports what fails

    def __enter__(self) -> UpWatch:
        self._thread = threading.Thread(target=self._loop, name="up-capacity-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def stack_zones(target: AwsTarget) -> list[Zone]:
    """The finder's survey of the stack's region for its GPU type and count (no prices); [] when EC2 cannot be read."""
    cfg, client = target.cfg, target.deps.client
    try:
        clients = RegionClients(client("ec2"), client("service-quotas"))
        return survey_region(clients, None, cfg.gpu_nodes.instance_type, cfg.gpu_nodes.node_count, cfg.region)
    except (ClientError, BotoCoreError):
        return []


def up_watch(target: AwsTarget, interval: float = 60.0) -> UpWatch:
    """The watch `up` runs under on AWS: the stack's cluster, its GPU AZ, and the finder's ranking of the region's
    other AZs (asked only once the node group is stuck)."""
    cfg, az = target.cfg, target.cfg.gpu_nodes.availability_zone
    next_best = lambda: next_az(stack_zones(target), [az])  # noqa: E731
    return UpWatch(target.deps.client("eks"), cfg.cluster.name, az, cfg.stack, next_best, target.note, interval)


# ---- --write-stack ----------------------------------------------------------------------------------------
def stack_file_text(name: str, zone: Zone, instance_type: str, count: int, system_azs: Collection[str]) -> str | None:
    """``Pulumi.<name>.yaml`` for ``zone``: the region, two AZs for the control plane (the GPU AZ first, then one
    of ``system_azs``, those that offer the system node type), the GPU AZ, type and count, and the zone's open
    reservation when it has one; None when no other AZ offers the system node type."""
    others = [az for az in zone.region_azs if az != zone.az and az in system_azs]
    if not others:
        return None
    azs = [zone.az, others[0]]
    lines = [
        f"# Stack {name}: {count} x {instance_type} in {zone.az}, chosen by `python -m automation capacity`.",
        "config:",
        f"  aws:region: {zone.region}",
        f"  {NetworkConfig.keyname('azs', prefixed=True)}:",
        *(f"    - {az}" for az in azs),
        f"  {GpuNodesConfig.keyname('availability_zone', prefixed=True)}: {zone.az}",
        f"  {GpuNodesConfig.keyname('instance_type', prefixed=True)}: {instance_type}",
        f"  {GpuNodesConfig.keyname('node_count', prefixed=True)}: {count}",
    ]
    if zone.reservations:
        lines.append(f"  {GpuNodesConfig.keyname('capacity_reservation_id', prefixed=True)}: {zone.reservations[0]}")
    for block in zone.blocks[:1]:
        lines.insert(
            1,
            f"# A Capacity Block is on sale here ({block['start']}, {block['hours']} h, {block['upfront_fee']} "
            f"{block['currency']} upfront): `aws ec2 purchase-capacity-block --capacity-block-offering-id "
            f"{block['id']} --instance-platform Linux/UNIX --region {zone.region}`, then set "
            f"{GpuNodesConfig.keyname('capacity_reservation_id')} to its reservation and "
            f"{GpuNodesConfig.keyname('capacity_block')}: true.",
        )
    return "\n".join(lines) + "\n"
