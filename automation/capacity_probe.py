"""`capacity --probe` and `capacity --cleanup`: a probe reservation that cannot outlive the command that made it.

A probe is a targeted On-Demand Capacity Reservation of the count, created in a candidate AZ and cancelled at once:
EC2 holds the capacity (the AZ has it now) or answers InsufficientInstanceCapacity. It bills at the On-Demand rate
while it exists, so each is made to be found and to end on its own:
- a ClientToken per run and AZ: botocore's retry of a create whose answer was lost gets the same reservation back
  ("Ensure idempotency", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html);
- EndDateType=limited, EndDate one hour out: EC2 ends it within the hour after EndDate even if nothing here runs
  again (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateCapacityReservation.html);
- tags naming the tool, the purpose and the run, so ``cleanup`` finds it by its tags alone (DescribeCapacityReservations
  documents no tag filter, so they are matched here over the states that still hold capacity);
- cancelled by id on every exit; where a create's answer never came, this run's tags are swept in that region
  before the command returns; every probe first sweeps the regions it will probe.
The parameter names are botocore's EC2 model's (tests/support/_reservations_world.py validates every call).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from botocore.exceptions import BotoCoreError, ClientError

from automation.aws_clients import Ec2Reservations
from automation.capacity_finder import PROBED, Zone, rank
from automation.ec2 import error_code
from automation.errors import DriverError
from workloads.config import new_run_id

TOOL = ("ray-efa-eks:tool", "ray-efa-eks")
PURPOSE = ("ray-efa-eks:purpose", "capacity-probe")
RUN_KEY = "ray-efa-eks:probe-run"
LIVE_STATES = ("active", "pending")  # the states that hold (and bill) capacity and can be cancelled
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CLEANUP_COMMAND = "python -m automation capacity --cleanup"

Say = Callable[[str], None]
Created = list[tuple[Ec2Reservations, str, str]]  # (EC2 client, region, reservation id)
Ec2For = Callable[[str], Ec2Reservations]  # the EC2 client of a region


def probe_tags(run_id: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in (TOOL, PURPOSE, (RUN_KEY, run_id))]


def client_token(run_id: str, az: str) -> str:
    """One token per run and AZ (EC2 allows 64 ASCII characters): a retry of the same create is idempotent."""
    return f"ray-efa-eks-probe-{run_id}-{az}"[:64]


def cancel_command(cr: str, region: str) -> str:
    return f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {cr} --region {region}"


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while a reservation is made or cancelled, so a Ctrl-C cannot land between EC2's
    answer and the id being recorded (only the main thread may set handlers; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            raise KeyboardInterrupt


def create_probe(ec2: Ec2Reservations, instance_type: str, count: int, az: str, run_id: str, now: datetime) -> str:
    """A targeted reservation of ``count`` x ``instance_type`` in ``az`` that ends on its own an hour from ``now``."""
    resp = ec2.create_capacity_reservation(
        ClientToken=client_token(run_id, az),
        InstanceType=instance_type,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=az,
        InstanceCount=count,
        InstanceMatchCriteria="targeted",
        EndDateType="limited",
        EndDate=now + timedelta(hours=1),
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": probe_tags(run_id)}],
    )
    return resp["CapacityReservation"]["CapacityReservationId"]


def is_probe(reservation: dict, run_id: str | None = None) -> bool:
    tags = {t.get("Key"): t.get("Value") for t in reservation.get("Tags", [])}
    mine = all(tags.get(k) == v for k, v in (TOOL, PURPOSE))
    return mine and (run_id is None or tags.get(RUN_KEY) == run_id)


def live_probes(ec2: Ec2Reservations, run_id: str | None = None) -> list[str]:
    """Ids of this tool's probe reservations (of ``run_id`` alone, if given) that still hold capacity."""
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(
        Filters=[{"Name": "state", "Values": list(LIVE_STATES)}]
    )
    return [
        cr["CapacityReservationId"]
        for page in pages
        for cr in page.get("CapacityReservations", [])
        if cr.get("State", "active") in LIVE_STATES and is_probe(cr, run_id)
    ]


def cancel_all(created: Created, say: Say) -> list[str]:
    """Cancel every reservation in ``created`` (emptying it); for each EC2 did not cancel, the line to do it by hand."""
    left = []
    with _signals_held():
        while created:
            ec2, region, cr = created.pop()
            try:
                ec2.cancel_capacity_reservation(CapacityReservationId=cr)
                say(f"cancelled probe reservation {cr} in {region}")
            except (ClientError, BotoCoreError) as e:
                left.append(f"{cr} in {region} ({error_code(e)}): {cancel_command(cr, region)}")
                say(f"probe reservation {cr} in {region} NOT cancelled: {left[-1]}")
    return left


def sweep(regions: Iterable[str], ec2_for: Ec2For, say: Say, run_id: str | None = None) -> list[str]:
    """Cancel the probe reservations left in ``regions`` (this tool's, or ``run_id``'s); the lines for what was
    not searched or cancelled."""
    left: list[str] = []
    for region in regions:
        ec2 = ec2_for(region)
        try:
            found = live_probes(ec2, run_id)
        except (ClientError, BotoCoreError) as e:
            left.append(f"{region} could not be searched ({error_code(e)}): {CLEANUP_COMMAND} --regions {region}")
            say(f"probe reservations in {region} NOT searched: {left[-1]}")
            continue
        if found:
            say(f"{len(found)} probe reservation(s) left in {region}: {', '.join(found)}")
        left += cancel_all([(ec2, region, cr) for cr in found], say)
    return left


def _refuse_if_left(left: list[str]) -> None:
    if left:
        raise DriverError(
            "probe reservations that may still exist (billed at the On-Demand rate until cancelled; each ends by "
            f"itself within two hours of its creation): {'; '.join(left)}; `{CLEANUP_COMMAND}` finds and cancels "
            "every one"
        )


def probe(
    zones: Sequence[Zone],
    ec2_for: Ec2For,
    instance_type: str,
    count: int,
    say: Say = lambda s: None,
    run_id: str | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[Zone]:
    """For each usable zone, a probe reservation created and cancelled at once; the zone's ``probe`` says PROBED or
    EC2's error code. Sweeps and cancels as the module's docstring says; DriverError names any that may be left."""
    run_id = run_id or new_run_id()
    usable = [z for z in zones if z.usable]
    left = sweep(dict.fromkeys(z.region for z in usable), ec2_for, say)
    created: Created = []
    unsure: set[str] = set()  # regions where a create failed: EC2 may have made it before the answer was lost
    out: list[Zone] = [z for z in zones if not z.usable]
    try:
        for z in usable:
            ec2 = ec2_for(z.region)
            try:
                with _signals_held():  # the id is recorded before a Ctrl-C can land
                    cr = create_probe(ec2, instance_type, count, z.az, run_id, clock())
                    created.append((ec2, z.region, cr))
            except (ClientError, BotoCoreError) as e:
                unsure.add(z.region)
                out.append(replace(z, probe=error_code(e)))
                continue
            say(f"probe {z.az}: reservation {cr} of {count} x {instance_type} created")
            left += cancel_all(created, say)
            out.append(replace(z, probe=PROBED))
    finally:
        left += cancel_all(created, say)
        left += sweep(sorted(unsure), ec2_for, say, run_id)
    _refuse_if_left(left)
    return rank(out)


def cleanup(regions: Sequence[str], ec2_for: Ec2For, say: Say = lambda s: None) -> None:
    """``capacity --cleanup``: cancel every probe reservation of this tool left in ``regions``."""
    _refuse_if_left(sweep(regions, ec2_for, say))
