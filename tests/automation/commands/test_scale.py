"""Scale-to-zero between runs (automation/scaling.py, automation/commands/scale.py): the GPU node group's
desired size against moto's EKS, the nodes' readiness against the recorded cluster (tests/fixtures/k8s/),
and `run`'s end through the CLI."""

from __future__ import annotations

import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _cloud_fakes import FakeClock
from _scale_world import run_with_steps, scale_args, target_for
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from botocore.stub import Stubber

from automation import cli, pipeline
from automation.commands import scale
from automation.commands.status import aws_status
from automation.errors import DriverError
from automation.scaling import (
    NodeGroupRef,
    Scaled,
    after_run,
    guard_record,
    scale_up,
    scale_up_for_run,
    set_desired,
    sizes,
    wait_ready,
)
from automation.ui import Ui

REGION, CLUSTER, NODEGROUP = MOTO_REGION, MOTO_CLUSTER, MOTO_NODEGROUP
REF = NodeGroupRef(CLUSTER, NODEGROUP)


@pytest.fixture
def eks(moto_eks):
    return moto_eks


def test_scaling_to_zero_sets_the_desired_size(eks):
    scaled = set_desired(eks, REF, 0)
    assert (scaled.before, scaled.after, sizes(eks, REF)["desiredSize"]) == (2, 0, 0), (
        f"got {scaled}, {sizes(eks, REF)}"
    )


def test_scaling_to_the_size_it_has_makes_no_update_call(eks):
    stub = Stubber(eks)
    stub.add_response(
        "describe_nodegroup", {"nodegroup": {"scalingConfig": {"desiredSize": 0, "minSize": 0, "maxSize": 2}}}
    )
    with stub:  # a second call (update_nodegroup_config) would fail: the stub has no answer for it
        scaled = set_desired(eks, REF, 0)
    assert not scaled.changed, f"expected no change, got {scaled}"


def test_a_size_above_the_node_groups_maximum_is_refused_before_any_update(eks):
    with pytest.raises(DriverError, match=r"--gpu-nodes 3 is outside node group .*0\.\.2") as e:
        set_desired(eks, REF, 3)
    assert (e.value.exit_code, sizes(eks, REF)["desiredSize"]) == (2, 2)


def test_eks_refusal_is_one_error_naming_the_code(eks):
    stub = Stubber(eks)
    stub.add_response(
        "describe_nodegroup", {"nodegroup": {"scalingConfig": {"desiredSize": 2, "minSize": 0, "maxSize": 2}}}
    )
    stub.add_client_error("update_nodegroup_config", "AccessDeniedException", "not authorized")
    with stub, pytest.raises(DriverError, match="AccessDeniedException"):
        set_desired(eks, REF, 0)


def ready_nodes(n: int) -> list[dict]:
    nodes = helpers.load_k8s()["nodes"]["items"]
    return [n for n in nodes if n["metadata"]["labels"].get("role") == "gpu-worker"][:n]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_wait_ready_reports_how_long_the_nodes_took():
    clock = Clock()
    seen = iter([[], ready_nodes(1), ready_nodes(2)])
    seconds = wait_ready(lambda: next(seen), 2, clock=pipeline.Clock(clock, clock.sleep))
    assert seconds == 20.0, f"expected two 10 s polls, got {seconds}"


def test_wait_ready_gives_up_after_its_timeout_naming_what_is_ready():
    clock = Clock()
    with pytest.raises(DriverError, match="1 of 2 GPU nodes Ready after 30 s"):
        wait_ready(lambda: ready_nodes(1), 2, timeout_s=30, clock=pipeline.Clock(clock, clock.sleep))


def test_scale_up_restores_the_node_count_and_times_it(eks):
    set_desired(eks, REF, 0)
    clock = FakeClock()
    seen = iter([[], ready_nodes(2)])
    # The recorded nodes turned Ready in 2026-12 before this test's clock: none counts as come up for it.
    listed = lambda: next(seen, ready_nodes(2))  # noqa: E731
    scaled = scale_up_for_run(eks, REF, 2, listed, lambda s: None, clock.clock())
    assert (scaled, sizes(eks, REF)["desiredSize"]) == (Scaled(NODEGROUP, 0, 2, 10.0), 2), f"got {scaled}"


def test_run_end_scales_the_gpu_nodes_to_idle_and_says_so(eks):
    with helpers.FakeKubeApi() as api:
        line = after_run(target_for(api), keep_nodes=False)
    assert sizes(eks, REF)["desiredSize"] == 0, f"expected 0 after the run, got {sizes(eks, REF)}"
    assert "scaled from 2 to 0 node(s) (gpuIdleNodes 0)" in line and "running now: 0 x g6.12xlarge" in line, line


def test_keep_nodes_leaves_them_and_names_the_cost(eks):
    with helpers.FakeKubeApi() as api:
        line = after_run(target_for(api), keep_nodes=True)
    assert sizes(eks, REF)["desiredSize"] == 2, f"--keep-nodes must not scale, got {sizes(eks, REF)}"
    assert "--keep-nodes" in line and "cost money" in line, line


def test_a_failed_scale_down_is_said_with_the_command_that_fixes_it(eks):
    eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName=NODEGROUP)
    with helpers.FakeKubeApi() as api:
        line = after_run(target_for(api), keep_nodes=False)
    assert "NOT scaled down" in line and "scale --stack us-west-2 --gpu-nodes 0" in line, line


def test_cli_run_ends_with_the_gpu_nodes_at_zero(eks, capsys, monkeypatch):
    """`run --stack`: the steps stand in (each passes), the end of the run is the real one against moto."""
    rc = run_with_steps(monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (rc, sizes(eks, REF)["desiredSize"]) == (0, 0), f"expected exit 0 and 0 nodes, got {rc}, {sizes(eks, REF)}"
    assert any("scaled from 2 to 0" in n for n in doc["notes"]), f"expected the scale-down in the notes: {doc['notes']}"


def test_scale_command_sets_the_size_and_prints_it(eks, capsys):
    with helpers.FakeKubeApi() as api:
        rc = scale.run(scale_args(1), Ui(json_mode=True), deps=target_for(api).deps)
    doc = json.loads(capsys.readouterr().out)
    assert (rc, doc["before"], doc["after"], sizes(eks, REF)["desiredSize"]) == (0, 2, 1, 1), doc


def test_scale_command_refuses_more_than_gpu_node_count_before_any_call(capsys):
    rc = cli.main(["scale", "--stack", "us-west-2", "--gpu-nodes", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "--gpu-nodes 3 is more than stack us-west-2's gpuNodeCount 2" in err, err


def test_scale_command_refuses_a_negative_count(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["scale", "--stack", "us-west-2", "--gpu-nodes", "-1"])
    assert e.value.code == 2 and "-1 is below 0" in capsys.readouterr().err


def test_the_scale_up_step_brings_the_nodes_back_to_the_node_count(eks):
    set_desired(eks, REF, 0)
    with helpers.FakeKubeApi() as api:  # the recorded cluster: its two GPU nodes Ready at once
        scaled = scale_up(target_for(api), {}).data
    assert (scaled.before, scaled.after, sizes(eks, REF)["desiredSize"]) == (0, 2, 2), f"got {scaled}"


def test_status_shows_what_runs_now_and_the_guards_last_decision(eks):
    set_desired(eks, REF, 0)
    with helpers.FakeKubeApi() as api:  # the recorded cluster has no guard record: a 404
        doc = aws_status(target_for(api), kubeconfig_given=False)
    assert doc["now"]["gpu_nodes"] == 0 and "running now: 0 x g6.12xlarge" in doc["now"]["text"], doc["now"]
    assert doc["idle_guard"].startswith("no record"), doc["idle_guard"]


def test_the_guards_record_is_read_as_its_last_decision_with_where_it_went_in_s3():
    where = "s3://ray-efa-eks-us-west-2-runs/us-west-2/idle-guard/20261205T174000Z.json"
    last = {"action": "scale-down", "reason": "no Ray job for 31 minutes", "s3": where}

    class Kube:
        def get_configmap(self, namespace, name):
            assert (namespace, name) == ("ray", "idle-guard-record")
            return {"data": {"last": json.dumps(last)}}

    got = guard_record(Kube(), "ray")
    assert (got["action"], got["s3"]) == ("scale-down", where), got


@pytest.mark.parametrize(
    "outcome, rc", [(KeyboardInterrupt(), 130), (DriverError("verify failed: 1 of 2 GPU nodes Ready"), 1)]
)
def test_a_run_interrupted_or_failed_after_up_still_scales_to_zero(eks, capsys, monkeypatch, outcome, rc):
    got = run_with_steps(monkeypatch, ["run", "--stack", "us-west-2", "--yes"], failing={"verify": outcome})
    text = " ".join("".join(capsys.readouterr()).split())
    assert (got, sizes(eks, REF)["desiredSize"]) == (rc, 0), f"expected exit {rc} and 0 nodes, got {got}"
    assert "scaled from 2 to 0 node(s)" in text, text


def test_each_node_that_came_up_is_timed_from_the_scale_up():
    from datetime import UTC, datetime

    from automation.scaling import ready_after

    nodes = ready_nodes(2)
    ready = next(c for c in nodes[0]["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
    expected = (datetime.fromisoformat(ready.replace("Z", "+00:00")) - datetime(2026, 12, 2, 10, tzinfo=UTC)).seconds
    nodes[1]["status"]["conditions"] = [
        {**c, "lastTransitionTime": "2026-12-02T09:00:00Z"} if c["type"] == "Ready" else c
        for c in nodes[1]["status"]["conditions"]
    ]
    got = ready_after(nodes, datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC))
    assert got == ((nodes[0]["metadata"]["name"], float(expected)),), f"only the node Ready after the scale-up: {got}"


# Every step a `run --stack` can fail or be interrupted in (automation/targets/aws.py, PIPELINE), and where the
# GPU nodes must be when it ends: a run that ends before `up` began changed nothing (the node group stays at the
# 2 nodes moto's fixture created); from `up` on, the run scaled them, so it leaves them at the stack's
# gpuIdleNodes (0, Pulumi.yaml's default), or as they were with --keep-nodes.
RUN_ENDS = [
    (step, how, outcome, rc)
    for step in ("preflight", "preview", "up", "verify", "follow", "check")
    for how, outcome, rc in (("fails", DriverError(f"{step} failed"), 1), ("interrupted", KeyboardInterrupt(), 130))
]


def _ended(monkeypatch, capsys, step: str, outcome: BaseException, keep: bool) -> tuple[int, str]:
    argv = ["run", "--stack", "us-west-2", "--yes"] + (["--keep-nodes"] if keep else [])
    got = run_with_steps(monkeypatch, argv, failing={step: outcome})
    return got, " ".join("".join(capsys.readouterr()).split())


@pytest.mark.slow  # the whole table; the default tier keeps the interrupted-or-failed-after-up test above
@pytest.mark.parametrize(("step", "how", "outcome", "rc"), RUN_ENDS, ids=[f"{s}-{h}" for s, h, _, _ in RUN_ENDS])
def test_every_way_a_run_ends_leaves_the_gpu_nodes_where_the_stack_says(
    eks, capsys, monkeypatch, step, how, outcome, rc
):
    got, _ = _ended(monkeypatch, capsys, step, outcome, keep=False)
    expected = 2 if step in ("preflight", "preview") else 0
    now = sizes(eks, REF)["desiredSize"]
    assert (got, now) == (rc, expected), (
        f"run {how} in {step}: expected exit {rc} and {expected} nodes, got {got}, {now}"
    )


@pytest.mark.parametrize("step", ["up", "check"])
def test_a_failed_run_with_keep_nodes_leaves_them_and_names_them(eks, capsys, monkeypatch, step):
    got, text = _ended(monkeypatch, capsys, step, DriverError(f"{step} failed"), keep=True)
    assert (got, sizes(eks, REF)["desiredSize"]) == (1, 2), f"run failed in {step} with --keep-nodes: got {got}"
    assert "GPU nodes kept (--keep-nodes)" in text and "--gpu-nodes 0" in text, f"not named: {text[-400:]}"
