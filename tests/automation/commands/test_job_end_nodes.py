"""Where the GPU nodes end for every way a followed job can end (issue 48, item 2): the job server's three terminal
states (SUCCEEDED, FAILED, STOPPED: ray.job_submission.JobStatus.is_terminal) and a job the driver loses while it
follows it, each through `run` and through `run --detach` then `attach`, then the idle guard
(infra/idle_guard_script.py ``run_once``) on the same node group one idle window after the command, and again one
idle window after the job ended.

The world is tests/support/_attach_world.py's (moto's EKS node group, the recorded cluster, the head pod's job server
of _ray_jobs.py on the driver's fake clock). The guard runs in the cluster, so it sees what a pod there sees: Ray's
job list (GET /api/jobs/, JobDetails with ``status`` and ``end_time`` in ms,
https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html) answers it even while the
driver, outside, has lost the job server. Its clock is the world's fake one, so the node group's ``modifiedAt`` it
reads is the fake time of the world's last UpdateNodegroupConfig (moto stamps wall time); the recorded cluster has
no record ConfigMap, so no lease is written (automation/scaling.py ``Lease._write``) and the guard reads none.
"""

from __future__ import annotations

from datetime import UTC, datetime

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _attach_world import HOURS, REF, STEPS, RecordingEks, World, cli_on
from _ray_jobs import FakeRayJobs, JobScript, train_lines
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP

from automation.ray_head import TERMINAL
from automation.scaling import sizes
from infra.idle_guard_script import run_once

LOST = "lost"  # the job runs on to SUCCEEDED, but the driver's job server stops answering an hour in
ENDS = ["SUCCEEDED", "FAILED", "STOPPED", LOST]
LOST_AT_S = 3600.0


class GuardsView:
    """What the idle guard's pod sees of the world: the node group (EKS DescribeNodegroup, its ``modifiedAt`` on the
    world's clock), the Ray job list, and a Kubernetes API that records the guard's decisions."""

    def __init__(self, world: World):
        self.world = world
        self.records: list[dict] = []

    def describe_nodegroup(self, **kwargs):
        group = dict(self.world.eks.describe_nodegroup(**kwargs)["nodegroup"])
        # boto3 gives a datetime; the world's clock starts at 0 after the group's last change before the run
        changed = max([0.0, *(at for at, _, _ in self.world.scaled)])
        group["modifiedAt"] = datetime.fromtimestamp(changed, UTC)
        return {"nodegroup": group}

    def update_nodegroup_config(self, **kwargs):
        return RecordingEks(self.world).update_nodegroup_config(**kwargs)

    def jobs(self, url: str) -> list[dict]:
        now = self.world.clock()
        return [
            {
                "submission_id": j.job_id,
                "status": (s := j.status(now)),
                "end_time": j.ended_at * 1000 if s in TERMINAL else None,
            }
            for j in self.world.jobs.jobs.values()
        ]

    def lease(self, name):
        return None

    def event(self, kind, message, pod):
        pass

    def record(self, name, doc):
        self.records.append(f"{doc['action']}: {doc['reason']}")


def guard(world: World, view: GuardsView, after_s: float) -> int:
    """The guard's run `after_s` from now on the world's clock; the node group's desired size after it."""
    world.clock.sleep(after_s)
    cfg = helpers.stack_config()
    env = {
        "CLUSTER_NAME": MOTO_CLUSTER,
        "NODEGROUP_NAME": MOTO_NODEGROUP,
        "IDLE_MINUTES": str(cfg.gpu_nodes.idle_minutes),
        "IDLE_NODES": str(cfg.gpu_nodes.idle_nodes),
        "RAY_JOBS_URL": "http://ray-efa-head-svc.ray.svc:8265/api/jobs/",
        "RECORD_NAME": "idle-guard-record",
    }
    assert run_once(env, view, view, jobs_of=view.jobs, clock=world.clock) == 0, view.records
    return sizes(world.eks, REF)["desiredSize"]


def ending(moto_eks, end: str) -> World:
    """A world whose 3-hour job ends ``end`` (STOPPED: stopped by someone else, e.g. the Ray dashboard, at its end)."""
    world = World(moto_eks)
    script = JobScript(train_lines(STEPS), run_s=HOURS * 3600, ends="SUCCEEDED" if end == LOST else end, message="boom")
    world.jobs = FakeRayJobs(world.clock, lambda job_id: script)
    return world


@pytest.mark.parametrize("command", ["run", "attach"])
@pytest.mark.parametrize("end", ENDS)
def test_the_gpu_nodes_go_down_once_the_job_ended_and_stay_while_it_may_still_run(
    moto_eks, capsys, monkeypatch, end, command
):
    world, cfg = ending(moto_eks, end), helpers.stack_config()
    idle, up = cfg.gpu_nodes.idle_nodes, sizes(moto_eks, REF)["desiredSize"]
    assert up > idle, f"the world starts with {up} GPU nodes, the stack keeps {idle}: nothing to scale down"
    base = ["--stack", "us-west-2", "--yes"]
    if command == "attach":
        cli_on(world, monkeypatch, ["run", *base, "--detach"])
    if end == LOST:
        world.jobs.gone_at = world.clock() + LOST_AT_S
    cli_on(world, monkeypatch, ["run", *base] if command == "run" else ["attach", *base[:2], "r1"])
    capsys.readouterr()
    job = world.jobs.jobs["r1"]
    status_then = job.status(world.clock())
    after_command = sizes(moto_eks, REF)["desiredSize"]
    view, window_s = GuardsView(world), cfg.gpu_nodes.idle_minutes * 60 + 60
    after_window = guard(world, view, window_s)
    after_job = guard(world, view, max(0.0, job.ended_at - world.clock()) + window_s)
    lost = end == LOST
    got = {
        "status at the command's end": status_then,
        "nodes after the command": after_command,
        "nodes an idle window later": after_window,
        "nodes an idle window after the job ended": after_job,
    }
    want = {
        "status at the command's end": "RUNNING" if lost else end,
        "nodes after the command": up if lost else idle,
        "nodes an idle window later": up if lost else idle,
        "nodes an idle window after the job ended": idle,
    }
    assert got == want, (
        f"{command}, job {end}: expected {want}, got {got} (guard: {view.records}, scaled: {world.scaled})"
    )
