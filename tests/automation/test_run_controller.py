"""automation/run_controller.py: every command that works on the GPU nodes scales them up in its `scale-up` step,
holds the idle guard's lease while it works, and leaves them as `run` does, whatever way it ends. The node group is
moto's EKS, the cluster the recorded one (tests/fixtures/k8s/) with the guard's record; every step but `scale-up`
and each command's own work stand in, noting the node group's size and the lease when they run."""

from __future__ import annotations

import json
from pathlib import Path

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _cloud_fakes import job
from _scale_world import cluster_with_record, target_for
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP

from automation import cli, steps
from automation.collectives_pods import WorkerPod
from automation.commands import bench, drill
from automation.errors import DriverError
from automation.job import local_job
from automation.pipeline import StepResult
from automation.scaling import NodeGroupRef, set_desired, sizes
from automation.targets import aws
from infra.idle_guard_script import LEASE_KEY

REF = NodeGroupRef(MOTO_CLUSTER, MOTO_NODEGROUP)
COMMANDS = {
    "run": ["run", "--stack", "us-west-2"],
    "train": ["train", "--stack", "us-west-2"],
    "bench": ["bench", "--stack", "us-west-2"],
    "bench --collectives": ["bench", "--collectives", "--stack", "us-west-2"],
    "drill": ["drill", "--stack", "us-west-2"],
}
BEFORE_THE_NODES = ("preflight", "preview", "up")  # `run`'s steps before its scale-up


class World:
    """The command's work standing in: each step but `scale-up`, the collectives' sweep and the drill's two runs
    note (what ran, the node group's desired size, whether the lease is in the guard's record), or raise
    ``outcome`` in the first piece of work after the scale-up."""

    def __init__(self, eks, objects: dict, outcome: BaseException | None) -> None:
        self.eks, self.objects, self.outcome = eks, objects, outcome
        self.seen: list[tuple[str, int, bool]] = []

    def lease_held(self) -> bool:
        return LEASE_KEY in (self.objects["configmaps"]["items"][0].get("data") or {})

    def work(self, what: str) -> None:
        if what in BEFORE_THE_NODES:
            return
        self.seen.append((what, sizes(self.eks, REF)["desiredSize"], self.lease_held()))
        if self.outcome is not None:
            raise self.outcome

    def step(self, name: str) -> StepResult:
        self.work(name)
        return StepResult(name, "pass", "stood in")


def run_command(monkeypatch, tmp_path: Path, eks, command: str, outcome=None, jobs=()) -> tuple[int, World]:
    set_desired(eks, REF, 0)  # the last run left the GPU nodes at gpuIdleNodes
    objects = cluster_with_record()
    world = World(eks, objects, outcome)
    for name in steps.STEPS:
        if name != "scale-up":
            monkeypatch.setitem(steps.STEPS, name, lambda target, prior, name=name: world.step(name))
    # bench --collectives: the sweep over two worker pods (automation/collectives_pods.py) stands in
    pods = [WorkerPod("w0", "10.0.0.1", "node-0"), WorkerPod("w1", "10.0.0.2", "node-1")]
    monkeypatch.setattr(bench.cluster_bench, "worker_pods", lambda cluster: pods)
    monkeypatch.setattr(bench.cluster_bench, "copy_workloads", lambda *a: None)

    def sweep_on(*args: object) -> dict:
        world.work("sweep")
        return {"rows": []}

    def run_and_kill(*args: object) -> dict:
        world.work("drill")
        return {"ok": True, "failures": [], "run_id": "r1"}

    monkeypatch.setattr(bench.cluster_bench, "sweep_on", sweep_on)
    # drill --stack: the reference run and the killed run stand in, and so the document of their metrics
    monkeypatch.setattr(drill, "run_and_kill", run_and_kill)
    with helpers.FakeKubeApi(objects) as api:
        made = target_for(api, jobs=list(jobs))
        monkeypatch.setattr(made, "train_job", lambda: local_job("r1", tmp_path, steps=20))
        monkeypatch.setattr(aws, "open_stack", lambda stack, **options: made)
        monkeypatch.setattr(aws.AwsTarget, "price", lambda self, n=None: aws.CostEstimate(None, (), "not priced"))
        where = ["--runs-root", str(tmp_path)] if command.startswith("bench") else []
        rc = cli.main([*COMMANDS[command], *where, "--json"])
    return rc, world


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_scales_up_holds_the_lease_while_it_works_and_scales_down_after(
    moto_eks, monkeypatch, tmp_path, capsys, command
):
    rc, world = run_command(monkeypatch, tmp_path, moto_eks, command)
    during = {(size, held) for _, size, held in world.seen}
    after = (sizes(moto_eks, REF)["desiredSize"], world.lease_held())
    assert (rc, during, after) == (0, {(2, True)}, (0, False)), (
        f"{command}: expected exit 0, 2 nodes and the lease during the work, 0 and none after; got {rc}, "
        f"{world.seen}, {after}"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_job_left_running_keeps_the_nodes_for_every_command(moto_eks, monkeypatch, tmp_path, capsys, command):
    rc, _ = run_command(monkeypatch, tmp_path, moto_eks, command, jobs=[job("r1", "RUNNING")])
    said = " ".join("".join(capsys.readouterr()).split())
    assert (rc, sizes(moto_eks, REF)["desiredSize"]) == (0, 2), f"{command}: a RUNNING job lost its nodes"
    assert "GPU nodes kept at 2: Ray job r1 is RUNNING" in said, said[-600:]


@pytest.mark.parametrize("outcome, rc", [(KeyboardInterrupt(), 130), (DriverError("the work failed"), 1)])
@pytest.mark.parametrize("command", COMMANDS)
def test_ctrl_c_or_a_raised_step_goes_through_the_same_end(
    moto_eks, monkeypatch, tmp_path, capsys, command, outcome, rc
):
    got, world = run_command(monkeypatch, tmp_path, moto_eks, command, outcome=outcome)
    said = " ".join("".join(capsys.readouterr()).split())
    after = (got, sizes(moto_eks, REF)["desiredSize"], world.lease_held())
    assert after == (rc, 0, False), f"{command} after {outcome!r}: expected exit {rc}, 0 nodes, no lease; got {after}"
    assert "scaled from 2 to 0 node(s)" in said, said[-600:]


def test_a_declined_scale_up_changes_nothing(moto_eks, monkeypatch, tmp_path, capsys):
    set_desired(moto_eks, REF, 0)
    with helpers.FakeKubeApi(cluster_with_record()) as api:
        made = target_for(api, yes=False)
        made.deps.confirm = lambda question: False
        monkeypatch.setattr(aws, "open_stack", lambda stack, **options: made)
        rc = cli.main(["train", "--stack", "us-west-2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (rc, sizes(moto_eks, REF)["desiredSize"]) == (1, 0), f"got exit {rc}: {doc['reason']}"
    assert doc["failed_step"] == "scale-up" and "not confirmed" in doc["reason"], doc
