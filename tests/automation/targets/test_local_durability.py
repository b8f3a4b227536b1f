"""The local target makes its job durable through the same Durability as the cluster's job."""

from __future__ import annotations

from pathlib import Path

from automation.job import local_job
from automation.storage import MAX_FAILURES
from automation.targets.local import LOCAL_CHECKPOINT_EVERY, LocalPlan, LocalTarget, durable


def _job(tmp_path: Path):
    return local_job("run-1", tmp_path / "runs")


def test_local_job_stores_its_checkpoints_under_its_run_directory(tmp_path):
    job = durable(_job(tmp_path))
    expected = str(tmp_path / "runs" / "run-1" / "ray_results")
    assert job.storage_path == expected, f"expected storage under {expected}, got {job.storage_path}"


def test_local_job_uses_a_storage_path_the_user_gives(tmp_path):
    job = durable(_job(tmp_path), "s3://bucket/prefix")
    assert job.storage_path == "s3://bucket/prefix", f"expected s3://bucket/prefix, got {job.storage_path}"


def test_local_job_checkpoints_at_the_local_interval(tmp_path):
    job = durable(_job(tmp_path))
    assert job.checkpoint_every == LOCAL_CHECKPOINT_EVERY, (
        f"expected a checkpoint every {LOCAL_CHECKPOINT_EVERY} steps, got {job.checkpoint_every}"
    )


def test_local_job_recovers_as_often_as_the_cluster_job(tmp_path):
    job = durable(_job(tmp_path))
    assert job.max_failures == MAX_FAILURES, f"expected max_failures {MAX_FAILURES}, got {job.max_failures}"


def test_local_default_run_checkpoints_before_its_last_step(tmp_path):
    steps = _job(tmp_path).steps
    assert LOCAL_CHECKPOINT_EVERY < steps, (
        f"a checkpoint every {LOCAL_CHECKPOINT_EVERY} steps never saves mid-run in the default {steps}-step run"
    )


def test_local_target_submits_the_durable_job(tmp_path):
    target = LocalTarget(LocalPlan(_job(tmp_path), storage_path=str(tmp_path / "store")))
    job = target.train_args()
    assert (job.storage_path, job.checkpoint_every) == (str(tmp_path / "store"), LOCAL_CHECKPOINT_EVERY), (
        f"expected the job submitted with storage {tmp_path / 'store'} and checkpoints every "
        f"{LOCAL_CHECKPOINT_EVERY}, got {job.storage_path} every {job.checkpoint_every}"
    )


def test_local_job_makes_a_relative_storage_directory_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = durable(_job(tmp_path), "ckpts")
    assert job.storage_path == str(tmp_path / "ckpts"), f"expected {tmp_path / 'ckpts'}, got {job.storage_path}"


def test_run_passes_its_storage_path_to_the_local_target(tmp_path, monkeypatch):
    from automation.cli import build_parser, parse
    from automation.targets.local import from_args
    from automation.ui import Ui

    monkeypatch.chdir(tmp_path)
    # Credentials as moto's docs set them: an s3:// storage path needs some on this machine (automation/storage.py).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    args = parse(build_parser(), ["run", "--storage-path", "s3://bucket/runs"])
    target = from_args(args, Ui(json_mode=True))
    assert target.plan.storage_path == "s3://bucket/runs", f"expected s3://bucket/runs, got {target.plan.storage_path}"
