"""What the driver fills in a stack before preview and up (automation/steps/stack_steps.py, settle_*), over every stack
shape the settle steps see (issue 48): the GPU AZ set or empty against each preflight outcome, and the API
endpoint public or private with an allow-list empty, the user's, or holding the driver's entry from this or another
address."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from automation.errors import DriverError
from automation.pipeline import RunState, StepResult
from automation.steps.stack_steps import settle_api_cidrs, settle_gpu_az, settle_stack
from automation.targets.aws import API_CIDRS_KEY, GPU_AZ_KEY
from infra.config import ConfigWarning, StackConfig, validate


def _config(az: str = "", public: bool = True, cidrs: tuple[str, ...] = (), driver: str = "") -> StackConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = validate({}, stack="dev", region="us-west-2")
    cluster = dataclasses.replace(
        cfg.cluster, endpoint_public_access=public, public_access_cidrs=cidrs, driver_cidr=driver
    )
    return dataclasses.replace(cfg, cluster=cluster, gpu_nodes=dataclasses.replace(cfg.gpu_nodes, availability_zone=az))


class Target:
    """A stand-in for automation.targets.aws.AwsTarget's settle surface: cfg, note, set_gpu_az, deployer_cidr and
    set_api_cidr, which update cfg as AwsTarget's do (automation/targets/aws.py) without the Automation API."""

    def __init__(self, cfg: StackConfig, address: str = "203.0.113.7/32") -> None:
        self.cfg, self.address = cfg, address
        self.calls: list[tuple] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def set_gpu_az(self, az: str) -> None:
        self.calls.append(("az", az))
        self.cfg = dataclasses.replace(
            self.cfg, gpu_nodes=dataclasses.replace(self.cfg.gpu_nodes, availability_zone=az)
        )

    def deployer_cidr(self) -> str:
        self.calls.append(("asked",))
        return self.address

    def set_api_cidr(self, index: int, cidr: str) -> None:
        self.calls.append(("cidr", index, cidr))
        cidrs = [*self.cfg.cluster.public_access_cidrs]
        cidrs[index : index + 1] = [cidr]
        cluster = dataclasses.replace(self.cfg.cluster, public_access_cidrs=tuple(cidrs), driver_cidr=cidr)
        self.cfg = dataclasses.replace(self.cfg, cluster=cluster)


@dataclasses.dataclass(frozen=True)
class Checked:
    gpu_az: str | None


def _prior(status: str | None, az: str | None = "us-west-2b", data: bool = True) -> RunState:
    if status is None:
        return RunState()
    return RunState(preflight=StepResult("preflight", status, "s", data=Checked(az) if data else None))  # type: ignore[arg-type]


# ---- the GPU AZ -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["pass", "warn"])
def test_an_empty_gpu_az_takes_the_az_a_passing_preflight_chose_and_says_so(status) -> None:
    t = Target(_config())
    settle_gpu_az(t, _prior(status))  # type: ignore[arg-type]
    assert (t.calls, t.cfg.gpu_nodes.availability_zone) == ([("az", "us-west-2b")], "us-west-2b")
    assert t.notes == [f"set {GPU_AZ_KEY} = us-west-2b in stack dev (Pulumi.dev.yaml), the AZ preflight chose"]


def test_a_gpu_az_the_stack_sets_is_kept_whatever_preflight_chose() -> None:
    t = Target(_config(az="us-west-2a"))
    settle_gpu_az(t, _prior("pass", "us-west-2c"))  # type: ignore[arg-type]
    assert (t.calls, t.notes, t.cfg.gpu_nodes.availability_zone) == ([], [], "us-west-2a")


@pytest.mark.parametrize(
    "prior",
    [_prior(None), _prior("fail"), _prior("pass", data=False), _prior("pass", az=None), _prior("pass", az="")],
    ids=["no-preflight", "failed", "no-data", "no-az", "empty-az"],
)
def test_an_empty_gpu_az_without_a_passing_preflights_choice_is_refused_as_bad_input(prior) -> None:
    t = Target(_config())
    with pytest.raises(DriverError) as err:
        settle_gpu_az(t, prior)  # type: ignore[arg-type]
    assert err.value.exit_code == 2 and t.calls == [] and t.notes == []
    assert str(err.value) == (
        f"stack dev leaves {GPU_AZ_KEY} empty and no preflight of this run chose one: run "
        f"`python -m automation run --stack dev` (preflight chooses an AZ that offers {t.cfg.gpu_nodes.instance_type} "
        f"and sets it) or set '{GPU_AZ_KEY}: <az>' in Pulumi.dev.yaml"
    )


# ---- the API endpoint's allow-list --------------------------------------------------------------------------------
def test_an_empty_allow_list_of_a_public_endpoint_gets_this_machines_address() -> None:
    t = Target(_config())
    settle_api_cidrs(t)  # type: ignore[arg-type]
    assert t.calls == [("asked",), ("cidr", 0, "203.0.113.7/32")]
    assert t.notes == [f"set {API_CIDRS_KEY} = [203.0.113.7/32] in stack dev (Pulumi.dev.yaml): this machine's address"]


def test_the_drivers_entry_from_another_address_is_replaced_in_place_and_said() -> None:
    t = Target(_config(cidrs=("10.1.0.0/16", "198.51.100.9/32"), driver="198.51.100.9/32"))
    settle_api_cidrs(t)  # type: ignore[arg-type]
    assert t.calls == [("asked",), ("cidr", 1, "203.0.113.7/32")]
    assert t.cfg.cluster.public_access_cidrs == ("10.1.0.0/16", "203.0.113.7/32")
    assert t.notes == [
        f"replaced 198.51.100.9/32, the address an earlier run wrote, with 203.0.113.7/32, this machine's, in "
        f"{API_CIDRS_KEY} of stack dev (Pulumi.dev.yaml): `up` updates the cluster's endpoint access in place"
    ]


@pytest.mark.parametrize(
    ("cidrs", "driver"),
    [(("203.0.113.7/32",), "203.0.113.7/32"), (("203.0.113.0/24", "198.51.100.9/32"), "198.51.100.9/32")],
    ids=["same-address", "admitted-by-another-entry"],
)
def test_a_drivers_entry_whose_list_admits_this_machine_is_left_alone(cidrs, driver) -> None:
    t = Target(_config(cidrs=cidrs, driver=driver))
    settle_api_cidrs(t)  # type: ignore[arg-type]
    assert (t.calls, t.notes, t.cfg.cluster.public_access_cidrs) == ([("asked",)], [], cidrs)


@pytest.mark.parametrize(
    ("public", "cidrs", "driver"),
    [
        (False, (), ""),
        (False, ("198.51.100.9/32",), "198.51.100.9/32"),
        (True, ("198.51.100.9/32",), ""),
        (True, ("198.51.100.9/32",), "192.0.2.1/32"),
    ],
    ids=["private-empty", "private-drivers", "users-list", "driver-entry-gone"],
)
def test_a_private_endpoint_or_a_list_the_user_wrote_is_not_touched_nor_the_address_asked(
    public, cidrs, driver
) -> None:
    t = Target(_config(public=public, cidrs=cidrs, driver=driver))
    settle_api_cidrs(t)  # type: ignore[arg-type]
    assert (t.calls, t.notes) == ([], [])


def test_settle_stack_fills_the_az_then_the_allow_list() -> None:
    t = Target(_config())
    settle_stack(t, _prior("pass"))  # type: ignore[arg-type]
    assert t.calls == [("az", "us-west-2b"), ("asked",), ("cidr", 0, "203.0.113.7/32")]


def test_settle_stack_touches_no_allow_list_when_the_az_is_refused():
    t = Target(_config())
    with pytest.raises(DriverError):
        settle_stack(t, RunState())
    assert t.calls == []


_CIDRS = ["198.51.100.9/32", "203.0.113.0/24", "10.0.0.0/8", "192.0.2.1/32"]
_ADDRESSES = ["203.0.113.7/32", "198.51.100.9/32", "192.0.2.1/32"]


@given(
    public=st.booleans(),
    cidrs=st.lists(st.sampled_from(_CIDRS), unique=True, max_size=3),
    driver_pick=st.integers(-1, 3),
    address=st.sampled_from(_ADDRESSES),
)
def test_every_allow_list_shape_ends_admitting_this_machine_only_where_the_driver_owns_it(
    public, cidrs, driver_pick, address
) -> None:
    driver = cidrs[driver_pick] if 0 <= driver_pick < len(cidrs) else ""
    t = Target(_config(public=public, cidrs=tuple(cidrs), driver=driver), address)
    settle_api_cidrs(t)  # type: ignore[arg-type]
    after = t.cfg.cluster.public_access_cidrs
    owned = public and (not cidrs or bool(driver))
    if not owned:
        assert (after, t.calls) == (tuple(cidrs), []), "the user's list or a private endpoint changed"
        return
    assert t.cfg.cluster.admits(address), f"{address} not admitted by {after}"
    kept = [c for c in cidrs if c != driver]
    assert [c for c in after if c in kept] == kept, "an entry the user wrote was dropped or moved"
    assert len(after) == max(len(cidrs), 1), after
