"""Ctrl-C (SIGINT) at each step of the local `python -m automation run` before and after training: the driver exits
130 and leaves no Ray process, no temp directory and no half-written run file; afterwards a rerun in
the same directory succeeds.

The signal is sent by the driver's own process from inside the step (a wrapper around the step's
function in automation.steps.STEPS, or around the local target's submit_job for follow), so it lands in
that step every time, whatever the machine's load: after preflight's checks, after the Ray head
started, after verify read Ray's resources, and after the NCCL check. test_local_run.py sends SIGINT and
SIGTERM from outside, mid-training."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from _shared_env import driver_env, half_written

from automation.local_ray import processes_naming

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow
STEPS = "2"  # training steps per run: enough to reach the first step's log line, little else

# Runs `python -m automation run ...` with the local target's method for STEP wrapped so that the
# process sends itself SIG while that step runs (python -c WRAPPER STEP SIG ARGV...).
WRAPPER = r"""
import os, signal, sys, time
from automation.targets.local import LocalTarget
from automation.steps import STEPS
from automation.cli import main

step, sig, argv = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3:]

def interrupt():
    os.kill(os.getpid(), sig)
    time.sleep(60)  # the handler raises KeyboardInterrupt here, inside the step

def after(name):
    original = STEPS[name]
    def wrapped(*a, **k):
        result = original(*a, **k)
        interrupt()
        return result
    STEPS[name] = wrapped

def at_first_training_step():
    original = LocalTarget.submit_job
    def wrapped(self, *a, **k):
        on_line = self.on_line
        def watch(line):
            on_line(line)
            if "[train] step 1/" in line:
                interrupt()
        self.on_line = watch
        return original(self, *a, **k)
    LocalTarget.submit_job = wrapped

if step == "follow":
    at_first_training_step()
else:
    after(step)
sys.exit(main(argv))
"""


def interrupt_at(step: str, sig: signal.Signals, cwd: Path) -> dict:
    run_id = f"halfway-{step}-{sig.name.lower()}"
    argv = ["run", "--json", "--steps", STEPS, "--run-id", run_id]
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, step, sig.name, *argv],
        cwd=cwd,
        env=driver_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    temp_dirs = [line.rsplit("temp dir ", 1)[1].strip() for line in proc.stderr.splitlines() if "temp dir " in line]
    return {"rc": proc.returncode, "stderr": proc.stderr, "temp_dirs": temp_dirs, "run_id": run_id, "cwd": cwd}


# Ctrl-C in every step but follow: test_local_run.py sends SIGINT (default tier) and SIGTERM (slow tier)
# during training and asserts the same of both; SIGTERM takes Ctrl-C's path (automation/cli.py, main).
CASES = [(s, signal.SIGINT) for s in ("preflight", "start", "verify", "check")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """One directory for every interrupted run and the rerun, as a user would have."""
    return tmp_path_factory.mktemp("halfway-interrupts")


@pytest.fixture(scope="module", params=CASES, ids=[f"{sig.name}-{step}" for step, sig in CASES])
def interrupted(request, workdir) -> dict:
    step, sig = request.param
    return {"step": step, "sig": sig.name, **interrupt_at(step, sig, workdir)}


def test_interrupted_step_exits_130(interrupted):
    r = interrupted
    assert r["rc"] == 130, f"expected exit 130 after {r['sig']} in {r['step']}, got {r['rc']}: {r['stderr'][-2000:]}"


def test_interrupted_step_is_named(interrupted):
    r = interrupted
    expected = f"interrupted during step {r['step']}"
    assert expected in r["stderr"], f"expected {expected!r} on stderr, got: {r['stderr'][-2000:]}"


def test_interrupted_step_leaves_no_ray_process(interrupted):
    r = interrupted
    left = {d: processes_naming(d) for d in r["temp_dirs"]}
    training = [p.pid for p in psutil.process_iter(["cmdline"]) if r["run_id"] in " ".join(p.info["cmdline"] or ())]
    assert (left, training) == ({d: [] for d in r["temp_dirs"]}, []), (
        f"expected no process after {r['sig']} in {r['step']}: naming the temp dir {left}, of the run {training}"
    )


def test_interrupted_step_leaves_no_temp_dir(interrupted):
    r = interrupted
    left = [d for d in r["temp_dirs"] if Path(d).exists()]
    assert left == [], f"expected the temp dir removed after {r['sig']} in {r['step']}, still there: {left}"


def test_interrupted_step_leaves_no_half_written_run_file(interrupted):
    r = interrupted
    run_dir = r["cwd"] / "runs" / r["run_id"]
    bad = half_written(run_dir) if run_dir.exists() else []
    assert bad == [], f"expected every file of {run_dir} whole after {r['sig']} in {r['step']}, got {bad}"


def test_rerun_after_an_interrupt_succeeds(workdir):
    # In the directory of the interrupted runs; if none ran yet (a test selection), interrupt one first.
    if not any((workdir / "runs").glob("halfway-*")):
        interrupt_at("follow", signal.SIGINT, workdir)
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "run", "--json", "--steps", STEPS],
        cwd=workdir,
        env=driver_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"expected the rerun to pass, got exit {proc.returncode}: {proc.stderr[-2000:]}"
