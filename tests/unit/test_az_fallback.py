"""`up --auto-az`'s bound and its reading of a failed `up`, with a stand-in target (the driver-level behaviour is in
tests/integration/test_driver_pipeline.py). The capacity wording is EC2's: the error code InsufficientInstanceCapacity
and the Auto Scaling activity's "We currently do not have sufficient <type> capacity in the Availability Zone you
requested" (EC2 user guide, troubleshooting-launch.html#troubleshooting-launch-capacity)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from automation import az_fallback
from automation.capacity import Zone
from automation.errors import DriverError
from automation.pipeline import StepResult

AZS = ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d")


class Target:
    """What up_with_fallback uses of AwsTarget: cfg's AZs, run.auto_az, note, set_gpu_az, deps.confirm."""

    def __init__(self, auto_az: bool = True):
        self.run = SimpleNamespace(auto_az=auto_az)
        self.cfg = SimpleNamespace(
            network=SimpleNamespace(azs=AZS), gpu_nodes=SimpleNamespace(availability_zone=AZS[0])
        )
        self.notes: list[str] = []
        self.deps = SimpleNamespace(confirm=lambda q: False)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def set_gpu_az(self, az: str) -> None:
        self.cfg.gpu_nodes.availability_zone = az


@pytest.fixture(autouse=True)
def every_az_usable(monkeypatch):
    zones = [Zone("us-west-2", az, True, efa=True, vcpus_needed=96, vcpus_free=1000.0) for az in AZS]
    monkeypatch.setattr(az_fallback, "stack_zones", lambda target: zones)


def short_everywhere(attempts: list[str], target: Target):
    def attempt() -> StepResult:
        attempts.append(target.cfg.gpu_nodes.availability_zone)
        raise DriverError("pulumi up failed: AsgInstanceLaunchFailures: InsufficientInstanceCapacity")

    return attempt


def test_auto_az_tries_at_most_max_moves_other_azs():
    target, attempts = Target(), []
    with pytest.raises(DriverError):
        az_fallback.up_with_fallback(target, short_everywhere(attempts, target))
    assert len(attempts) == 1 + az_fallback.MAX_MOVES, f"expected {1 + az_fallback.MAX_MOVES} ups, got {attempts}"


def test_a_failure_other_than_capacity_is_not_retried():
    target, attempts = Target(), []

    def attempt() -> StepResult:
        attempts.append("up")
        raise DriverError("pulumi up failed: AccessDenied: not authorized to perform eks:CreateNodegroup")

    with pytest.raises(DriverError, match="AccessDenied"):
        az_fallback.up_with_fallback(target, attempt)
    assert attempts == ["up"], attempts


@pytest.mark.parametrize(
    "error",
    [
        "AsgInstanceLaunchFailures: InsufficientInstanceCapacity",
        "We currently do not have sufficient g6.12xlarge capacity in the Availability Zone you requested (us-west-2a).",
    ],
)
def test_ec2s_capacity_wordings_read_as_short(error):
    assert az_fallback.capacity_short(error), error
