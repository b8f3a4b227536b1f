"""Under torchrun the run id is stable across restarts of the worker group: --run-id, else
torchrun's TORCHELASTIC_RUN_ID; the run's directories follow it."""

from __future__ import annotations

from workloads.train import parse_config

TORCHRUN = ["--launcher", "torchrun", "--preset", "tiny"]


def test_torchrun_run_takes_torchelastic_run_id_and_its_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = parse_config(TORCHRUN, environ={"TORCHELASTIC_RUN_ID": "job-42"})
    got = (cfg.run_id, cfg.run_dir, cfg.storage_path)
    want = ("job-42", str(tmp_path / "runs" / "job-42"), str(tmp_path / "runs" / "job-42" / "ray_results"))
    assert got == want, f"expected {want}, got {got}"


def test_explicit_run_id_wins_over_torchelastic_run_id():
    cfg = parse_config([*TORCHRUN, "--run-id", "mine"], environ={"TORCHELASTIC_RUN_ID": "job-42"})
    assert cfg.run_id == "mine", f"--run-id mine gave run id {cfg.run_id!r}"


def test_torchrun_default_rdzv_id_none_is_not_a_run_id():
    cfg = parse_config(TORCHRUN, environ={"TORCHELASTIC_RUN_ID": "none"})
    assert cfg.run_id != "none" and cfg.run_id, f"'none' (torchrun's default --rdzv-id) became run id {cfg.run_id!r}"


def test_ray_launcher_ignores_torchelastic_run_id():
    cfg = parse_config(["--preset", "tiny"], environ={"TORCHELASTIC_RUN_ID": "job-42"})
    assert cfg.run_id != "job-42", "a Ray launch must not take torchrun's run id"
