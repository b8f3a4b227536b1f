"""The AWS drill without AWS: which worker pod it deletes, and its whole flow over a fake target and cluster."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from automation.commands import drill
from automation.errors import DriverError
from automation.pipeline import TrainOutcome
from workloads.metrics import ECHO_PREFIX, SCHEMA_VERSION

# Shaped like the TrainController's lines in a job log (local run ck, 2-core machine, 2026-12-04), with the
# node IPs of two worker pods in place of the local node's.
GROUP = [
    "(TrainController pid=5607) Started training worker group of size 4: ",
    "(TrainController pid=5607) - (ip=10.30.1.61, pid=212) world_rank=0, local_rank=0, node_rank=0",
    "(TrainController pid=5607) - (ip=10.30.1.61, pid=213) world_rank=1, local_rank=1, node_rank=0",
    "(TrainController pid=5607) - (ip=10.30.1.62, pid=301) world_rank=2, local_rank=0, node_rank=1",
    "(TrainController pid=5607) - (ip=10.30.1.62, pid=302) world_rank=3, local_rank=1, node_rank=1",
]


def _pod(name: str, ip: str, phase: str = "Running", deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": "ray", **({"deletionTimestamp": "2026-12-04T18:00:00Z"} if deleting else {})}
    return {"metadata": meta, "status": {"podIP": ip, "phase": phase}}


PODS = [_pod("ray-efa-gpu-workers-worker-a", "10.30.1.61"), _pod("ray-efa-gpu-workers-worker-b", "10.30.1.62")]


def test_worker_ips_maps_each_rank_to_its_node():
    assert drill.worker_ips(GROUP) == {0: "10.30.1.61", 1: "10.30.1.61", 2: "10.30.1.62", 3: "10.30.1.62"}, (
        f"got {drill.worker_ips(GROUP)}"
    )


def test_worker_ips_keeps_the_newest_worker_group():
    restarted = [*GROUP, "(TrainController pid=5607) - (ip=10.30.1.63, pid=401) world_rank=3, local_rank=1"]
    assert drill.worker_ips(restarted)[3] == "10.30.1.63", f"got {drill.worker_ips(restarted)}"


def test_pod_to_delete_holds_the_highest_rank_and_not_rank_0():
    chosen = drill.worker_pod_to_delete(PODS, drill.worker_ips(GROUP))
    assert chosen == ("ray-efa-gpu-workers-worker-b", 3), f"expected worker-b (rank 3), got {chosen}"


def test_pod_to_delete_skips_a_pod_already_being_deleted():
    pods = [PODS[0], _pod("ray-efa-gpu-workers-worker-b", "10.30.1.62", deleting=True)]
    with pytest.raises(DriverError, match="num_workers"):
        drill.worker_pod_to_delete(pods, drill.worker_ips(GROUP))


def test_pod_to_delete_is_refused_when_every_rank_shares_rank_0s_pod():
    ips = {0: "10.30.1.61", 1: "10.30.1.61"}
    with pytest.raises(DriverError, match="needs workers on two pods"):
        drill.worker_pod_to_delete(PODS, ips)


# ---- the flow -----------------------------------------------------------------------------------
def _echo(step: int, loss: float) -> str:
    rec = {"schema": SCHEMA_VERSION, "run_id": "r", "time": time.time(), "step": step, "total_steps": 20, "loss": loss}
    return f"(RayTrainWorker pid=212, ip=10.30.1.61) {ECHO_PREFIX}{json.dumps(rec)}"


@dataclass
class FakeKube:
    pods: list[dict]
    deleted: list[str] = field(default_factory=list)
    gone: threading.Event = field(default_factory=threading.Event)

    def list_pods(self, namespace: str, selector: str) -> list[dict]:
        return self.pods

    def delete_pod(self, namespace: str, name: str) -> dict:
        self.deleted.append(name)
        self.gone.set()
        return {}


@dataclass
class FakeTarget:
    """Trains 20 steps; the drill run loses a pod after step 13 and resumes from the step-10 checkpoint."""

    kube: FakeKube
    on_line: object = None
    on_progress: object = lambda s: None

    def submit(self, job) -> TrainOutcome:
        if job.run_id.endswith("-reference"):
            for step in range(1, 21):
                self.on_line(_echo(step, 6.0 - step / 10))
            return TrainOutcome(job.run_id, "SUCCEEDED", {}, (), job)
        for step in range(1, 14):
            self.on_line(_echo(step, 6.0 - step / 10))
        for line in GROUP:  # last, so the drill kills after step 13
            self.on_line(line)
        assert self.kube.gone.wait(10), "the drill deleted no pod"
        time.sleep(0.01)
        for step in range(11, 21):
            self.on_line(_echo(step, 6.0 - step / 10))
        return TrainOutcome(job.run_id, "SUCCEEDED", {}, (), job)


@pytest.fixture
def aws_drill(monkeypatch):
    from automation.job import local_job

    monkeypatch.setattr(drill, "read_registered", lambda storage, name: 10)
    job = local_job("run-a", Path("/tmp/unused"), steps=20)
    job = dataclasses.replace(job, checkpoint_every=10, storage_path="s3://bucket/us-west-2/runs")
    reference = dataclasses.replace(job, run_id="run-a-reference")
    kube = FakeKube(PODS)
    target = FakeTarget(kube)
    target.on_line = lambda s: None
    kill, lines = drill.run_and_kill(
        target, job, reference, 30, drill.aws_kill_for(job, kube, "ray", "ray.io/node-type=worker")
    )
    ref_lines = [_echo(s, 6.0 - s / 10) for s in range(1, 21)]
    return kube, drill.document(job, reference, kill, drill.echoed_records(lines), drill.echoed_records(ref_lines))


def test_aws_drill_deletes_the_pod_of_the_highest_rank(aws_drill):
    kube, _ = aws_drill
    assert kube.deleted == ["ray-efa-gpu-workers-worker-b"], f"expected worker-b deleted, got {kube.deleted}"


def test_aws_drill_reports_the_resume_from_the_echoed_metrics(aws_drill):
    _, doc = aws_drill
    got = {k: doc[k] for k in ("step_at_kill", "resumed_from_step", "steps_lost", "final_step")}
    assert got == {"step_at_kill": 13, "resumed_from_step": 10, "steps_lost": 3, "final_step": 20}, f"got {got}"


def test_aws_drill_passes_a_resume_that_ends_at_the_references_loss(aws_drill):
    _, doc = aws_drill
    assert (doc["ok"], doc["final_loss_matches"]) == (True, True), f"expected a pass, got {doc['failures']}"


def test_drill_refuses_a_stack_with_the_local_target_before_anything_starts():
    from automation.cli import build_parser, parse
    from automation.ui import Ui

    argv = ["drill", "--target", "local", "--stack", "us-west-2"]
    with pytest.raises(DriverError, match="--stack us-west-2 is an AWS stack") as e:
        drill.run(parse(build_parser(), argv), Ui(json_mode=True))
    assert e.value.exit_code == 2, f"expected exit 2 for bad input, got {e.value.exit_code}"
