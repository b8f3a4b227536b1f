"""The cloud as it is, not as moto answers: a node group that stays UPDATING and refuses updates meanwhile, a
size read back late, a Ray job on the nodes, and a `run` that takes 53 minutes to start while the idle guard
ticks. Everything runs on a fake clock (tests/support/_cloud_fakes.py): hours of waiting, no real sleep."""

from __future__ import annotations

import dataclasses
import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _cloud_fakes import FakeClock, SlowEks, job
from _scale_world import cluster_with_record, run_with_steps, target_for
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from conftest import REPO

from automation.commands import scale
from automation.errors import DriverError
from automation.pipeline import RunState
from automation.scaling import LEASE_S, NodeGroupRef, after_run, scale_up, set_desired, sizes
from automation.steps.stack_steps import run_up
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget
from automation.ui import Ui
from infra.config import MOCK_DEPLOYER_CIDR, stack_config_values
from infra.idle_guard_script import LEASE_KEY, run_once
from infra.mock_render import run_program

REF = NodeGroupRef(MOTO_CLUSTER, MOTO_NODEGROUP)
MIN = 60.0


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def eks(moto_eks):
    return moto_eks


# ---- waiting for EKS before and after UpdateNodegroupConfig ------------------------------------------------
def test_a_scale_waits_while_the_node_group_is_updating_then_says_how_long(eks, clock):
    slow = SlowEks(eks, clock, busy_until=clock.now() + 4 * MIN)
    said: list[str] = []
    scaled = set_desired(slow, REF, 0, said.append, clock.clock())
    assert (scaled.waited_for, slow.refused) == ("UPDATING", 0), f"waited for {scaled.waited_for!r}: {said}"
    assert "waited 240 s for the node group to leave UPDATING" in scaled.text(), scaled.text()


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_no_update_is_sent_while_the_node_group_is_updating(eks, clock):
    slow = SlowEks(eks, clock, busy_until=clock.now() + 4 * MIN)
    start = clock.now()
    set_desired(slow, REF, 0, lambda s: None, clock.clock())
    assert slow.updates[0][0] >= start + 4 * MIN, f"the update came at +{slow.updates[0][0] - start:.0f} s"


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_each_wait_is_shown_through_the_progress_callback(eks, clock):
    said: list[str] = []
    set_desired(SlowEks(eks, clock, busy_until=clock.now() + 30), REF, 0, said.append, clock.clock())
    assert any("is UPDATING: waiting to scale it" in s for s in said), said


def test_a_refused_update_is_retried_with_backoff(eks, clock):
    slow = SlowEks(eks, clock, refusals=2, report_lag_s=0)
    scaled = set_desired(slow, REF, 0, lambda s: None, clock.clock())
    assert (slow.refused, clock.slept[:2], scaled.after) == (2, [5.0, 10.0], 0), (slow.refused, clock.slept)


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_set_desired_returns_once_eks_reports_the_new_size(eks, clock):
    slow = SlowEks(eks, clock, report_lag_s=25)
    set_desired(slow, REF, 0, lambda s: None, clock.clock())
    assert (
        slow.describe_nodegroup(clusterName=MOTO_CLUSTER, nodegroupName=MOTO_NODEGROUP)["nodegroup"]["scalingConfig"][
            "desiredSize"
        ]
        == 0
    ), "returned before EKS reported the new size"


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_a_node_group_updating_past_the_bound_fails_naming_its_status(eks, clock):
    slow = SlowEks(eks, clock, busy_until=clock.now() + 3 * 3600)
    with pytest.raises(DriverError, match=r"still UPDATING after 1200 s"):
        set_desired(slow, REF, 0, lambda s: None, clock.clock())
    assert slow.updates == [], "no update may be sent to a group that never left UPDATING"


def test_a_rerun_while_the_node_group_is_updating_waits_then_scales_and_says_how_long(eks, clock, capsys, monkeypatch):
    """`run --stack` right after a run's scale-down (the group still UPDATING for 3 more minutes): the scale-up
    is the real `scale-up` step (automation/scaling.py), the other steps stand in."""
    set_desired(eks, REF, 0)
    slow = SlowEks(eks, clock, busy_until=clock.now() + 3 * MIN)

    argv = ["run", "--stack", "us-west-2", "--yes", "--json"]
    rc = run_with_steps(monkeypatch, argv, real={"scale-up": scale_up}, eks=slow, clock=clock)
    rows = json.loads(capsys.readouterr().out)["steps"]
    up = next((r["summary"] for r in rows if "scaled from 0 to 2" in r["summary"]), None)
    assert rc == 0 and up is not None, rows
    assert "waited 180 s for the node group to leave UPDATING" in up, up
    assert [d for _, d in slow.updates] == [2, 0], f"expected the scale-up, then the run's scale-down: {slow.updates}"


# ---- nothing scales down under a job ------------------------------------------------------------------------
def test_run_end_keeps_the_nodes_while_a_job_runs(eks):
    with helpers.FakeKubeApi() as api:
        line = after_run(target_for(api, jobs=[job("r1", "RUNNING")]), keep_nodes=False)
    assert sizes(eks, REF)["desiredSize"] == 2, f"a RUNNING job lost its nodes: {line}"
    assert "kept at 2: Ray job r1 is RUNNING" in line, line


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_run_end_keeps_the_nodes_when_the_job_api_cannot_be_asked_and_names_the_command(eks):
    with helpers.FakeKubeApi() as api:
        line = after_run(target_for(api, jobs=None), keep_nodes=False)
    assert sizes(eks, REF)["desiredSize"] == 2, f"scaled down on a guess: {line}"
    assert "could not be asked" in line and "scale --stack us-west-2 --gpu-nodes 0" in line, line


def test_run_end_scales_down_when_every_job_has_ended(eks):
    with helpers.FakeKubeApi() as api:
        after_run(target_for(api, jobs=[job("r1", "SUCCEEDED", 1.0), job("r0", "FAILED", 1.0)]), keep_nodes=False)
    assert sizes(eks, REF)["desiredSize"] == 0


def test_scale_command_refuses_a_scale_down_under_a_running_job(eks):
    with helpers.FakeKubeApi() as api:
        deps = target_for(api, jobs=[job("r7", "PENDING")]).deps
        with pytest.raises(DriverError, match="Ray job r7 is PENDING.*--force"):
            scale.run(scale_args(0), Ui(json_mode=True), deps=deps)
    assert sizes(eks, REF)["desiredSize"] == 2


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_scale_command_with_force_scales_down_under_a_running_job(eks, capsys):
    with helpers.FakeKubeApi() as api:
        deps = target_for(api, jobs=[job("r7", "RUNNING")]).deps
        rc = scale.run(scale_args(0, force=True), Ui(json_mode=True), deps=deps)
    assert (rc, sizes(eks, REF)["desiredSize"]) == (0, 0)


def scale_args(n: int, force: bool = False):
    from _scale_world import scale_args as args

    return args(n, force=force)


class GuardKube:
    """The idle guard's view of the record: the same ConfigMap the driver's lease is written to."""

    def __init__(self, objects: dict):
        self.cm = objects["configmaps"]["items"][0]
        self.decisions: list[dict] = []

    def lease(self, name):
        return json.loads(self.cm["data"].get(LEASE_KEY) or "null")

    def event(self, kind, message, pod):
        pass

    def record(self, name, doc):
        self.decisions.append(doc)
        self.cm["data"]["last"] = json.dumps(doc)


GUARD_ENV = {
    "CLUSTER_NAME": MOTO_CLUSTER,
    "NODEGROUP_NAME": MOTO_NODEGROUP,
    "IDLE_MINUTES": "30",
    "IDLE_NODES": "0",
    "RAY_JOBS_URL": "http://ray-efa-head-svc.ray.svc:8265/api/jobs/",
    "NAMESPACE": "ray",
    "RECORD_NAME": "idle-guard-record",
    "RECORD_BUCKET": "unused",
    "RECORD_PREFIX": "us-west-2/idle-guard",
    "AWS_REGION": MOTO_REGION,
}


def guard_tick(slow, guard: GuardKube, clock: FakeClock, jobs: list | None) -> str:
    run_once(GUARD_ENV, slow, guard, None, jobs_of=lambda url: jobs, clock=clock.now)
    return guard.decisions[-1]["action"]


def start_of(minutes: float, target, slow, guard, clock, jobs) -> list[str]:
    """`run`'s start: its lease and scale-up (the `scale-up` step), then ``minutes`` of waiting on add-ons and pods
    (verify's polls, every 10 s, each renewing the lease) while the guard decides every 5 minutes."""
    from automation.scaling import Lease

    scale_up(target, RunState())
    began, sleep, actions = clock.now(), Lease.of(target).renewing(clock.sleep), []
    while clock.now() - began < minutes * MIN:
        if int(clock.now() - began) % 300 == 0:
            actions.append(guard_tick(slow, guard, clock, jobs))
        sleep(10)
    return actions


@pytest.fixture(params=[True, False], ids=["modifiedAt-moves", "modifiedAt-unchanged"])
def idle_world(request, eks, clock):
    """The GPU node group at 0, last modified 5 hours ago, on EKS that moves modifiedAt on a scale-up or (the
    undocumented case) does not; the cluster with the guard's record: (EKS, the cluster's objects, the guard)."""
    set_desired(eks, REF, 0)
    slow = SlowEks(eks, clock, update_s=0, report_lag_s=0, modified_at_moves=request.param)
    slow.modified_at = _hours_ago(clock, 5)
    objects = cluster_with_record()
    return slow, objects, GuardKube(objects)


def test_the_guard_fed_runs_lease_keeps_the_nodes_for_a_53_minute_start(eks, clock, idle_world):
    slow, objects, guard = idle_world
    with helpers.FakeKubeApi(objects) as api:
        target = target_for(api, eks=slow, clock=clock)
        actions = start_of(53, target, slow, guard, clock, jobs=[])
    assert sizes(eks, REF)["desiredSize"] == 2 and set(actions) == {"keep"}, actions
    assert "run r1 starting, lease until" in guard.decisions[-1]["reason"], guard.decisions[-1]


def test_an_expired_lease_and_no_job_lets_the_guard_scale_down(eks, clock, idle_world):
    """The driver took its lease and scaled up, then died (no renewal): after the lease and the idle minutes the
    guard scales down."""
    slow, objects, guard = idle_world
    with helpers.FakeKubeApi(objects) as api:
        scale_up(target_for(api, eks=slow, clock=clock), {})
    clock.sleep(max(LEASE_S, 30 * MIN) + 1)
    assert (guard_tick(slow, guard, clock, []), sizes(eks, REF)["desiredSize"]) == ("scale-down", 0), guard.decisions


def test_a_running_job_keeps_the_nodes_whatever_the_lease(eks, clock, idle_world):
    slow, objects, guard = idle_world
    with helpers.FakeKubeApi(objects) as api:
        scale_up(target_for(api, eks=slow, clock=clock), {})
    actions = []
    for _ in range(36):  # three hours of the guard's 5-minute ticks, the lease long expired
        clock.sleep(5 * MIN)
        actions.append(guard_tick(slow, guard, clock, [job("r1", "RUNNING")]))
    assert (set(actions), sizes(eks, REF)["desiredSize"]) == ({"keep"}, 2), actions


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_run_releases_its_lease_at_the_end(eks, clock):
    objects = cluster_with_record()
    with helpers.FakeKubeApi(objects) as api:
        target = target_for(api, clock=clock, jobs=[])
        scale_up(target, RunState())
        held = LEASE_KEY in objects["configmaps"]["items"][0]["data"]
        after_run(target, keep_nodes=False)
    assert (held, LEASE_KEY in objects["configmaps"]["items"][0]["data"]) == (True, False), objects["configmaps"]


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_a_lease_is_renewed_at_most_once_a_minute(eks, clock):
    from automation.scaling import Lease

    objects = cluster_with_record()
    with helpers.FakeKubeApi(objects) as api:
        lease = Lease.of(target_for(api, clock=clock))
        for _ in range(12):  # two minutes of 10 s polls
            lease.renew()
            clock.sleep(10)
        patches = [r for r in api.requests if r.startswith("PATCH")]
    assert len(patches) == 2, patches


def _hours_ago(clock: FakeClock, hours: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(clock.now() - hours * 3600, UTC)


# ---- `up` keeps the live desired size -----------------------------------------------------------------------
class RenderingStack(helpers.FakeStack):
    """A stack whose `up` notes the config the driver set for it and, with ``render``, runs the Pulumi program
    under the mocks (infra/mock_render.py) with the stack's config, ``overrides`` and that config: what the
    engine would send to AWS."""

    def __init__(self, overrides: dict[str, str], outputs: dict, render: bool):
        super().__init__("us-west-2", outputs=outputs)
        self.overrides, self.rendering, self.render = overrides, render, None
        self.config_at_up: dict[str, str] = {}

    def up(self, on_event=None):
        self.config_at_up = {k: v.value for k, v in self.config.items()}
        if self.rendering:
            values = {**stack_config_values("us-west-2", REPO), **self.overrides, **self.config_at_up}
            self.render = run_program("us-west-2", REPO, config=values)
        return super().up(on_event)


def up_with_node_count(node_count: int, render: bool = False):
    """`up` (the driver's step) after gpuNodeCount changed to ``node_count``: the stack it ran."""
    outputs = {"region": MOTO_REGION, "cluster_name": MOTO_CLUSTER, "nodegroup_name": MOTO_NODEGROUP}
    stack = RenderingStack({"ray-efa-eks:gpuNodeCount": str(node_count)}, outputs, render)
    deps = AwsDeps(
        client=lambda name: boto3.client(name, region_name=MOTO_REGION), stack=lambda: stack, kube=helpers.no_kube
    )
    # A stack that lists its own API allow-list: the only key the driver sets for this `up` is the live size.
    cfg = helpers.stack_config()
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, public_access_cidrs=(MOCK_DEPLOYER_CIDR,)))
    run_up(AwsTarget(AwsRun(cfg, "r1", yes=True), deps), RunState())
    return stack


def node_group_inputs(stack) -> tuple[dict, tuple]:
    ng = next(r for r in stack.render.records if r.type == "aws:eks/nodeGroup:NodeGroup" and r.name.endswith("gpu-ng"))
    return ng.inputs["scalingConfig"], ng.ignore_changes


def test_up_on_a_group_scaled_to_zero_with_a_new_node_count_starts_no_gpu_node(eks):
    set_desired(eks, REF, 0)
    scaling, ignored = node_group_inputs(up_with_node_count(3, render=True))
    assert (scaling["desiredSize"], scaling["maxSize"], ignored) == (0, 3, ()), (scaling, ignored)


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_up_hands_the_program_a_running_groups_live_size(eks):
    seen = up_with_node_count(3).config_at_up
    assert seen == {"ray-efa-eks:gpuLiveDesiredSize": "2"}, f"the 2 nodes that run now must stay: {seen}"


@pytest.mark.slow  # a moto world per test: the default tier keeps one test of each protection
def test_the_live_size_is_in_the_stack_only_for_the_length_of_up(eks):
    stack = up_with_node_count(3)
    key = "ray-efa-eks:gpuLiveDesiredSize"
    order = [c for c in stack.calls if c in (f"set_config {key}", "up", f"remove_config {key}")]
    assert (order, stack.config) == ([f"set_config {key}", "up", f"remove_config {key}"], {}), stack.calls
