"""The local target end to end: a real Ray head on 127.0.0.1, the real training job, the report,
and no Ray process left behind, also when the run is interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from automation.local_ray import processes_naming

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def driver_env() -> dict[str, str]:
    # Wide lines so a path printed on stderr is never wrapped; the repo on the path whatever the cwd.
    return dict(os.environ, COLUMNS="400", PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """One `python -m automation run --json` (the README's embedded default, as JSON)."""
    cwd = tmp_path_factory.mktemp("local-run")
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "run", "--target", "local", "--json"],
        cwd=cwd,
        env=driver_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, cwd


def doc_of(local_run) -> dict:
    proc, _ = local_run
    assert proc.returncode == 0, f"expected exit 0, got {proc.returncode}; stderr tail: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)  # --json: stdout is one JSON document and nothing else


def test_local_run_passes_every_step_in_order(local_run):
    doc = doc_of(local_run)
    got = [(s["step"], s["status"]) for s in doc["steps"]]
    expected = [("preflight", "pass"), ("start", "pass"), ("verify", "pass"), ("train", "pass"), ("check", "skip")]
    assert got == expected, f"expected {expected}, got {got}"


def test_local_run_reports_training_metrics(local_run):
    m = doc_of(local_run)["metrics"]
    assert m["world_size"] == 2 and m["steps"] == 20, f"expected 2 workers x 20 steps, got {m}"
    assert m["tokens_per_s"] > 0 and m["loss_first"] is not None and m["loss_last"] is not None, f"got {m}"
    assert m["loss_last"] < m["loss_first"] - 0.5, f"the tiny model should learn the synthetic task: got {m}"
    assert m["mfu"] is None, f"MFU has no meaning on CPU, got {m['mfu']}"


def test_cpu_run_says_nccl_is_not_applicable(local_run):
    doc = doc_of(local_run)
    assert doc["transport"]["verdict"] == "not-applicable", f"got {doc['transport']}"
    assert doc["transport"]["cause"] == "no NCCL on CPU/gloo, EFA not applicable", f"got {doc['transport']['cause']}"


def test_local_run_writes_the_summary_in_its_run_directory(local_run):
    doc = doc_of(local_run)
    _, cwd = local_run
    summary = cwd / "runs" / doc["job_id"] / "summary.json"
    assert summary.is_file(), f"expected {summary}"
    assert json.loads(summary.read_text())["run_id"] == doc["job_id"]


def test_local_run_leaves_no_ray_process(local_run):
    doc = doc_of(local_run)
    temp_dir = next(s["data"]["temp_dir"] for s in doc["steps"] if s["step"] == "start")
    left = processes_naming(temp_dir)
    assert left == [], f"expected no process naming {temp_dir}, got pids {left}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_leaves_no_ray_process(tmp_path, sig):
    # Started with SIGINT ignored, as a non-interactive shell starts a background job (CI does):
    # the driver must still take Ctrl-C and SIGTERM as an interrupt.
    proc = subprocess.Popen(
        [sys.executable, "-m", "automation", "run", "--json"],
        cwd=tmp_path,
        env=driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    temp_dir = None
    try:
        # In --json mode the progress goes to stderr; wait until the head is up and training begins.
        for line in proc.stderr:
            if "temp dir " in line:
                temp_dir = line.rsplit("temp dir ", 1)[1].strip()
            if line.lstrip().startswith("pass verify"):
                break
        assert temp_dir, "the start step never reported its temp dir"
        assert processes_naming(temp_dir), "expected Ray processes running before the interrupt"
        proc.send_signal(sig)
        rc = proc.wait(timeout=90)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130, f"expected exit 130 after {sig.name}, got {rc}; stderr after the signal:\n{rest[-3000:]}"
    deadline = time.monotonic() + 10  # the kernel reaps killed processes asynchronously
    while processes_naming(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_naming(temp_dir) == [], f"Ray processes of {temp_dir} survived {sig.name}"
