"""The local target's pure parts: reading Ray's resources again when a just-started raylet drops the reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from automation.errors import DriverError
from automation.job import local_job
from automation.storage import MAX_FAILURES
from automation.targets.local import LOCAL_CHECKPOINT_EVERY, LocalPlan, LocalTarget, durable, read_resources

DROPPED = "cannot read the local Ray cluster's resources (rc 1): Failed to register worker to Raylet"


def reader(failures: int):
    """A stand-in for ray_resources that fails `failures` times, then answers; `calls` counts the calls."""
    calls = []

    def read(address: str) -> dict[str, float]:
        calls.append(address)
        if len(calls) <= failures:
            raise DriverError(DROPPED)
        return {"CPU": 2.0}

    return read, calls


def test_resources_are_read_again_after_a_dropped_registration():
    read, calls = reader(failures=2)
    got = read_resources("127.0.0.1:1", attempts=3, pause_s=0, read=read)
    assert (got, len(calls)) == ({"CPU": 2.0}, 3), f"expected CPU 2 on the third call, got {got} after {len(calls)}"


def test_resources_that_never_answer_fail_naming_the_attempts():
    read, calls = reader(failures=5)
    with pytest.raises(DriverError) as e:
        read_resources("127.0.0.1:1", attempts=3, pause_s=0, read=read)
    assert len(calls) == 3 and "tried 3 times" in str(e.value), f"got {len(calls)} calls: {e.value}"


def test_rays_uploading_package_line_stays_out_of_the_run_output(capsys):
    import logging

    from automation.targets.local import RAY_SDK_LOGGER, quiet_ray_sdk

    quiet_ray_sdk()
    logger = logging.getLogger(RAY_SDK_LOGGER)
    handler = logging.StreamHandler()  # on the logger itself: Ray's own loggers may not propagate to the root
    logger.addHandler(handler)
    try:
        logger.info("Uploading package gcs://_ray_pkg_0123.zip.")
        logger.warning("a warning still shows")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "Uploading package" not in err and "a warning still shows" in err, f"got {err!r}"


def test_local_dashboard_of_a_stopped_cluster_is_not_offered(capsys):
    # a dashboard process that is exiting still has its command line but no listener
    import argparse
    import socket

    from automation.commands.dashboard import run_local
    from automation.errors import DriverError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        args = argparse.Namespace(json=False)
        with pytest.raises(DriverError) as err:
            run_local(args, None, find=lambda: [dead])
    assert "stops its Ray cluster" in str(err.value) and "report" in str(err.value), str(err.value)


def test_local_dashboard_that_answers_is_printed(capsys):
    import argparse
    import socket

    from automation.commands.dashboard import run_local
    from automation.ui import Ui

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        live = f"http://127.0.0.1:{s.getsockname()[1]}"
        rc = run_local(argparse.Namespace(json=False), Ui(), find=lambda: [live])
    assert rc == 0 and live in capsys.readouterr().out, f"expected {live} printed"


# ---- The local target makes its job durable through the same Durability as the cluster's job.


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
    job = target.train_job()
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
