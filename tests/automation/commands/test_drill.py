"""The fault drill's arithmetic and its choice of the worker to kill, without Ray."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from automation.commands import drill
from automation.commands.drill import (
    LOSS_RTOL,
    Recovery,
    failures,
    losses_match,
    recovery,
    snapshot_step,
    worker_pids,
)
from automation.errors import DriverError
from automation.pipeline import TrainOutcome
from workloads.metrics import ECHO_PREFIX, SCHEMA_VERSION
from workloads.summary import RunSummary

# Shaped like the job log of drill run 20261204-180403-fcf28a (2-core machine, 2026-12-04) as follow_job passes it
# on, ANSI colour stripped; its rank 0 was pid 7036.
JOB_LOG = [
    "(TrainController pid=5607) Started training worker group of size 2: ",
    "(RayTrainWorker pid=7036) ray-efa-eks nccl-run run_id=run-a rank=0",
    "(RayTrainWorker pid=7040) ray-efa-eks nccl-run run_id=run-a rank=1",
    "(RayTrainWorker pid=9001) ray-efa-eks nccl-run run_id=other rank=1",
]


def _records(steps_and_times):
    return [{"step": s, "time": t, "loss": 6.0 - s / 10} for s, t in steps_and_times]


def test_worker_pids_maps_each_rank_of_the_run_to_its_process():
    assert worker_pids(JOB_LOG, "run-a") == {0: 7036, 1: 7040}, f"got {worker_pids(JOB_LOG, 'run-a')}"


def test_worker_pids_ignores_another_runs_workers():
    assert worker_pids(JOB_LOG, "run") == {}, f"expected no worker of run 'run', got {worker_pids(JOB_LOG, 'run')}"


def test_worker_pids_keeps_the_newest_pid_of_a_restarted_rank():
    lines = [*JOB_LOG, "(RayTrainWorker pid=7100) ray-efa-eks nccl-run run_id=run-a rank=1"]
    assert worker_pids(lines, "run-a")[1] == 7100, f"expected the restarted pid 7100, got {worker_pids(lines, 'run-a')}"


def test_snapshot_step_reads_the_latest_registered_checkpoints_step():
    snap = {"latest_checkpoint_result": {"metrics": {"step": 20, "run_id": "r"}}}
    assert snapshot_step(snap) == 20, f"expected 20, got {snapshot_step(snap)}"


@pytest.mark.parametrize(
    "snap", [{}, {"latest_checkpoint_result": None}, {"latest_checkpoint_result": {"metrics": {"steps": 40}}}]
)
def test_snapshot_step_is_none_without_a_mid_run_checkpoint(snap):
    assert snapshot_step(snap) is None, f"expected None for {snap}, got {snapshot_step(snap)}"


# Steps 1-13 before the kill at t=13.5, a restart from the step-10 checkpoint, steps 11-20 again from t=20.
KILLED = _records([(s, float(s)) for s in range(1, 14)] + [(s, 20.0 + s) for s in range(11, 21)])


def test_recovery_resumes_after_the_first_step_recorded_after_the_kill():
    assert recovery(KILLED, 13.5).resumed_from_step == 10, f"got {recovery(KILLED, 13.5)}"


def test_recovery_counts_the_steps_redone_as_lost():
    assert recovery(KILLED, 13.5).steps_lost == 3, f"expected steps 11-13 lost, got {recovery(KILLED, 13.5)}"


def test_recovery_times_the_kill_to_the_first_step_after_it():
    assert recovery(KILLED, 13.5).recovery_seconds == 17.5, f"expected 31 - 13.5 s, got {recovery(KILLED, 13.5)}"


def test_recovery_reads_the_final_step_from_the_last_line():
    assert recovery(KILLED, 13.5).final_step == 20, f"got {recovery(KILLED, 13.5)}"


def test_recovery_of_a_run_that_never_resumed_is_an_error():
    with pytest.raises(ValueError, match="after the kill"):
        recovery(KILLED[:13], 13.5)


def test_recovery_of_a_kill_before_training_is_an_error():
    with pytest.raises(ValueError, match="before the kill"):
        recovery(KILLED, 0.5)


GOOD = Recovery(step_at_kill=13, resumed_from_step=10, steps_lost=3, final_step=20, recovery_seconds=7.0)


def test_drill_passes_a_full_resume_from_the_registered_checkpoint():
    assert failures(GOOD, 20, 10, 10, True) == [], f"got {failures(GOOD, 20, 10, 10, True)}"


def test_drill_fails_a_run_that_lost_more_than_the_checkpoint_interval():
    rec = Recovery(step_at_kill=13, resumed_from_step=0, steps_lost=13, final_step=20, recovery_seconds=7.0)
    why = failures(rec, 20, 10, None, True)
    assert why == ["steps_lost 13 exceeds the checkpoint interval 10"], f"got {why}"


def test_drill_fails_a_resume_from_an_older_checkpoint_than_the_registered_one():
    rec = Recovery(step_at_kill=13, resumed_from_step=5, steps_lost=8, final_step=20, recovery_seconds=7.0)
    why = failures(rec, 20, 10, 10, True)
    assert why == ["resumed_from_step 5, older than the registered checkpoint 10"], f"got {why}"


def test_drill_passes_a_resume_from_a_checkpoint_registered_after_the_kill():
    rec = Recovery(step_at_kill=20, resumed_from_step=20, steps_lost=0, final_step=40, recovery_seconds=7.0)
    assert failures(rec, 40, 10, 10, True) == [], f"got {failures(rec, 40, 10, 10, True)}"


def test_drill_fails_a_run_that_stopped_short_of_its_steps():
    rec = Recovery(step_at_kill=13, resumed_from_step=10, steps_lost=3, final_step=15, recovery_seconds=7.0)
    assert failures(rec, 20, 10, 10, True) == ["final_step 15, expected 20"], f"got {failures(rec, 20, 10, 10, True)}"


def test_drill_fails_a_final_loss_unlike_the_references():
    why = failures(GOOD, 20, 10, 10, False)
    assert why == ["the final loss differs from the uninterrupted run's"], f"got {why}"


def test_final_losses_equal_to_float32_rounding_match():
    assert losses_match(2.9451310634613037, 2.9451310634613037 * (1 + LOSS_RTOL / 2)), "expected a match"


def test_a_resume_one_scheduler_step_off_does_not_match():
    # The losses of a resume that stepped the scheduler once too few (commit b568b05).
    assert not losses_match(5.9572, 5.9530), "expected 5.9572 and 5.9530 to differ"


def test_a_missing_final_loss_does_not_match():
    assert not losses_match(None, 5.9530), "expected a missing loss not to match"


def test_drill_refuses_too_few_steps_for_two_checkpoints_naming_the_flag():
    import argparse

    from automation.commands.drill import drill_steps

    with pytest.raises(argparse.ArgumentTypeError, match="pass --steps 20 or more"):
        drill_steps("5")


def test_drill_prints_step_at_kill_as_the_readme_promises(monkeypatch, capsys):
    import argparse

    from automation.commands import drill
    from automation.ui import Ui

    doc = {
        "ok": True, "failures": [], "run_id": "r1", "step_at_kill": 10, "resumed_from_step": 10, "steps_lost": 0,
        "final_step": 40, "recovery_seconds": 12.5, "final_loss_matches": True,
    }  # fmt: skip
    monkeypatch.setattr(drill, "drill_local", lambda args, ui: doc)
    args = argparse.Namespace(command="drill", stack=None, kubeconfig=None, target=None, storage_path=None)
    rc = drill.run(args, Ui())
    out = capsys.readouterr().out
    assert rc == 0 and "step_at_kill: 10" in out, f"expected step_at_kill in the output, got rc {rc}: {out!r}"


def test_progress_off_a_terminal_is_printed_not_hidden_in_a_spinner():
    import io

    from rich.console import Console

    from automation.ui import Ui

    ui, out = Ui(), io.StringIO()
    ui.console = Console(file=out, force_terminal=False, width=200)
    ui.step_started("drill")
    ui.milestone("reference run r1-reference: 40 steps, uninterrupted")
    ui.close()
    assert "reference run r1-reference" in out.getvalue(), f"expected the progress line printed, got {out.getvalue()!r}"


# ---- The AWS drill without AWS: which worker pod it deletes, and its whole flow over a fake target and cluster.

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
    on_line: Callable[[str], None] = lambda s: None  # the drill sets its own before the run it reads
    on_progress: Callable[[str], None] = lambda s: None

    def run_job_to_end(self, job) -> TrainOutcome:
        if job.run_id.endswith("-reference"):
            for step in range(1, 21):
                self.on_line(_echo(step, 6.0 - step / 10))
            return TrainOutcome(job.run_id, "SUCCEEDED", RunSummary(), (), job)
        for step in range(1, 14):
            self.on_line(_echo(step, 6.0 - step / 10))
        for line in GROUP:  # last, so the drill kills after step 13
            self.on_line(line)
        assert self.kube.gone.wait(10), "the drill deleted no pod"
        time.sleep(0.01)
        for step in range(11, 21):
            self.on_line(_echo(step, 6.0 - step / 10))
        return TrainOutcome(job.run_id, "SUCCEEDED", RunSummary(), (), job)


@pytest.fixture
def aws_drill(monkeypatch):
    from automation.job import local_job

    monkeypatch.setattr(drill, "read_registered", lambda storage, name: 10)
    job = local_job("run-a", Path("/tmp/unused"), steps=20)
    job = dataclasses.replace(job, checkpoint_every=10, storage_path="s3://bucket/us-west-2/runs")
    reference = dataclasses.replace(job, run_id="run-a-reference")
    kube = FakeKube(PODS)
    kill_for = drill.aws_kill_for(kube, "ray", "ray.io/node-type=worker")
    return kube, drill.run_and_kill(FakeTarget(kube), job, reference, 30, kill_for)


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
