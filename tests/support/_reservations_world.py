"""A stand-in for EC2's On-Demand Capacity Reservation calls, as automation/capacity_probe.py uses them.

What it claims about EC2, and where each claim comes from (EC2 API reference, read 2026-12-06):
- CreateCapacityReservation holds ``InstanceCount`` instances of the AZ's free capacity or fails with
  InsufficientInstanceCapacity; the same ClientToken returns the same reservation ("Ensure idempotency",
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Run_Instance_Idempotency.html); TagSpecifications'
  tags land on the reservation (API_CreateCapacityReservation.html);
- CancelCapacityReservation moves it to ``cancelled`` and frees the capacity (API_CancelCapacityReservation.html);
- DescribeCapacityReservations filters by ``state`` and pages with MaxResults/NextToken; each reservation carries
  its Tags and State (API_DescribeCapacityReservations.html, API_CapacityReservation.html).
Every call's parameters are validated against botocore's EC2 service model, as a real client validates them.
Fault switch: ``fail(op, error, after=False)`` raises ``error`` on the next ``op`` (after EC2 acted, with
``after``: the answer is lost). ``kill(op)`` is the process dying at ``op``: it raises ``Killed``, a BaseException no
handler of the driver catches, and the dead client raises it again on every later call, so nothing of the dying
process can clean up; a new ``client()`` is the next process.
``FileWorld`` keeps the same world in a JSON file that every call reads before and writes after it acts, so
several processes share one account, as EC2 does: a reservation is EC2's, and outlives the process that asked for
it (it ends only when cancelled or at its EndDate, API_CapacityReservation.html, State and EndDate).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import botocore.session
from botocore.exceptions import ClientError, ParamValidationError
from botocore.validate import ParamValidator

from automation.aws_clients import Ec2Reservations

_MODEL = botocore.session.get_session().get_service_model("ec2")
_OPS = {
    "create_capacity_reservation": "CreateCapacityReservation",
    "cancel_capacity_reservation": "CancelCapacityReservation",
    "describe_capacity_reservations": "DescribeCapacityReservations",
    "describe_regions": "DescribeRegions",
}


class Killed(BaseException):
    """The process was killed (SIGKILL): nothing after this point of the dying process runs."""


class World:
    """One account's reservations in one or more regions; ``free``: (region, AZ) -> instances EC2 can hold now."""

    def __init__(self, free: dict[tuple[str, str], int], page_size: int = 2):
        self.free = dict(free)
        self.reservations: dict[str, dict] = {}
        self.tokens: dict[str, str] = {}
        self.requests: list[tuple[str, dict]] = []
        self.faults: dict[str, list[tuple[BaseException, bool]]] = {}
        self.page_size = page_size
        self._ids = (f"cr-{n:017x}" for n in itertools.count(1))

    def fail(self, op: str, error: BaseException, after: bool = False) -> None:
        self.faults.setdefault(op, []).append((error, after))

    def kill(self, op: str) -> None:
        self.fail(op, Killed(op))

    def client(self, region: str) -> FakeEc2:
        return FakeEc2(self, region)

    def live(self, region: str | None = None) -> list[str]:
        return [
            cr
            for cr, r in self.reservations.items()
            if r["State"] == "active" and region in (None, r["AvailabilityZone"][:-1])
        ]

    def add(self, region: str, az: str, count: int, tags: list[dict], token: str = "") -> str:
        """A reservation as EC2 holds it (made by an earlier process, or by the user)."""
        if self.free.get((region, az), 0) < count:
            error = {"Code": "InsufficientInstanceCapacity", "Message": "no capacity"}
            raise ClientError({"Error": error}, "CreateCapacityReservation")
        cr = next(self._ids)
        self.free[(region, az)] -= count
        self.reservations[cr] = {
            "CapacityReservationId": cr,
            "AvailabilityZone": az,
            "TotalInstanceCount": count,
            "AvailableInstanceCount": count,
            "State": "active",
            "Tags": list(tags),
        }
        if token:
            self.tokens[token] = cr
        return cr


class FakeEc2:
    def __init__(self, world: World, region: str):
        self.world, self.region, self.dead = world, region, False

    def _call(self, op: str, params: dict) -> tuple[BaseException, bool] | None:
        if self.dead:
            raise Killed(op)
        report = ParamValidator().validate(params, _MODEL.operation_model(_OPS[op]).input_shape)
        if report.has_errors():
            raise ParamValidationError(report=report.generate_report())
        self.world.requests.append((op, params))
        queued = self.world.faults.get(op)
        fault = queued.pop(0) if queued else None
        if fault and isinstance(fault[0], Killed):
            self.dead = True
            raise fault[0]
        if fault and not fault[1]:
            raise fault[0]
        return fault

    def create_capacity_reservation(self, **kw: Any) -> dict:
        fault = self._call("create_capacity_reservation", kw)
        token = kw.get("ClientToken", "")
        cr = self.world.tokens.get(token) if token else None
        if cr is None:
            tags = [t for spec in kw.get("TagSpecifications", []) for t in spec["Tags"]]
            cr = self.world.add(self.region, kw["AvailabilityZone"], kw["InstanceCount"], tags, token)
        if fault:
            raise fault[0]
        return {"CapacityReservation": dict(self.world.reservations[cr])}

    def cancel_capacity_reservation(self, **kw: Any) -> dict:
        fault = self._call("cancel_capacity_reservation", kw)
        r = self.world.reservations[kw["CapacityReservationId"]]
        if r["State"] == "active":
            r["State"] = "cancelled"
            self.world.free[(self.region, r["AvailabilityZone"])] += r["TotalInstanceCount"]
        if fault:
            raise fault[0]
        return {"Return": True}

    def describe_capacity_reservations(self, **kw: Any) -> dict:
        fault = self._call("describe_capacity_reservations", kw)
        if fault:
            raise fault[0]
        states = next((f["Values"] for f in kw.get("Filters", []) if f["Name"] == "state"), None)
        found = [
            dict(r)
            for r in self.world.reservations.values()
            if r["AvailabilityZone"].startswith(self.region) and (states is None or r["State"] in states)
        ]
        start = int(kw.get("NextToken", "0"))
        page = found[start : start + self.world.page_size]
        more = start + self.world.page_size < len(found)
        return {"CapacityReservations": page, **({"NextToken": str(start + self.world.page_size)} if more else {})}

    def describe_regions(self, **kw: Any) -> dict:
        self._call("describe_regions", kw)
        regions = sorted({region for region, _ in self.world.free})
        return {"Regions": [{"RegionName": r} for r in regions]}

    def get_paginator(self, name: str) -> _Paginator:
        return _Paginator(getattr(self, name))


class _Paginator:
    """botocore's paginator contract: pages follow NextToken until an answer has none."""

    def __init__(self, call):
        self.call = call

    def paginate(self, **kw: Any):
        token = None
        while True:
            page = self.call(**kw, **({"NextToken": token} if token else {}))
            yield page
            token = page.get("NextToken")
            if not token:
                return


class FileWorld(World):
    """A World whose state (free capacity, reservations, client tokens) lives in ``path``, shared by processes."""

    def __init__(self, path: Path, free: dict[tuple[str, str], int] | None = None, page_size: int = 2):
        super().__init__(free or {}, page_size)
        self.path = Path(path)
        if free is not None:
            self.save()
        else:
            self.load()

    def load(self) -> None:
        state = json.loads(self.path.read_text())
        self.free = {tuple(k.split("|")): n for k, n in state["free"].items()}
        self.reservations, self.tokens = state["reservations"], state["tokens"]
        # Ids count up from 1 and are never reused, as World's do.
        self._ids = (f"cr-{n:017x}" for n in itertools.count(len(self.reservations) + 1))

    def save(self) -> None:
        state = {
            "free": {f"{r}|{az}": n for (r, az), n in self.free.items()},
            "reservations": self.reservations,
            "tokens": self.tokens,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)  # whole or not at all, whenever the process dies

    def client(self, region: str) -> FakeEc2:
        return _FileEc2(self, region)


def _persisted(name: str):
    def call(self: _FileEc2, **kw: Any) -> dict:
        self.world.load()
        try:
            return getattr(FakeEc2, name)(self, **kw)
        finally:
            self.world.save()

    return call


class _FileEc2(FakeEc2):
    world: FileWorld
    create_capacity_reservation = _persisted("create_capacity_reservation")
    cancel_capacity_reservation = _persisted("cancel_capacity_reservation")
    describe_capacity_reservations = _persisted("describe_capacity_reservations")
    describe_regions = _persisted("describe_regions")


def _as_the_driver_takes_them(ec2: FakeEc2) -> Ec2Reservations:
    """Never called: mypy holds the stand-in to the protocol the probe takes it as (automation/aws_clients.py)."""
    return ec2
