"""The fault drill's arithmetic and its choice of the worker to kill, without Ray."""

from __future__ import annotations

import pytest

from automation.commands.drill import (
    LOSS_RTOL,
    Recovery,
    failures,
    losses_match,
    recovery,
    snapshot_step,
    worker_pids,
)

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
    args = argparse.Namespace(stack=None, kubeconfig=None, target=None, storage_path=None)
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
