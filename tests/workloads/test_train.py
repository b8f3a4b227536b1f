"""Under torchrun the run id is stable across restarts of the worker group: --run-id, else
torchrun's TORCHELASTIC_RUN_ID; the run's directories follow it."""

from __future__ import annotations

import subprocess
import sys

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


# ---- A torchrun worker ends without the interpreter's finalization, its output intact
# (workloads.train.exit_without_finalizing says why).

# The C stream stands for NCCL's debug file: a FILE* that os._exit alone would not flush.
SCRIPT = """
import atexit, ctypes, sys
from workloads.train import exit_without_finalizing
atexit.register(lambda: print("finalized", flush=True))
sys.stdout.write("python line")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fputs(b"c line", ctypes.c_void_p(libc.fopen(sys.argv[1].encode(), b"w")))
exit_without_finalizing(3)
"""


def _run(repo_root, c_file) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", SCRIPT, str(c_file)]
    return subprocess.run(cmd, cwd=repo_root, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)


def test_worker_exit_keeps_the_status_and_the_unflushed_output(repo_root, tmp_path):
    r = _run(repo_root, tmp_path / "c.log")
    assert r.returncode == 3, f"expected exit status 3, got {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout == "python line", f"expected the unflushed Python line alone, got {r.stdout!r}"
    c_text = (tmp_path / "c.log").read_text()
    assert c_text == "c line", f"expected the C stream's unflushed line in its file, got {c_text!r}"


def test_worker_exit_skips_finalization(repo_root, tmp_path):
    r = _run(repo_root, tmp_path / "c.log")
    assert "finalized" not in r.stdout, f"expected no atexit handler to run, got {r.stdout!r}"
