"""The local target end to end: a real Ray head on 127.0.0.1 whose ports listen on loopback only,
the real training job, the report, and no process or temp directory left behind, also when the run
is interrupted in the middle of training.

Default tier: the shared local run (tests/support/shared_setups.py) and one run interrupted by SIGINT.
Slow tier: the same run interrupted by SIGTERM, and the loopback test (it starts a head of its own)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from _shared_env import STALE_RAY_ADDRESS, driver_env, half_written

from automation.local_ray import LocalRayCluster, client_env, process_tree, processes_naming

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def test_local_run_passes_every_step_in_order(local_run_doc):
    doc = local_run_doc
    got = [(s["step"], s["status"]) for s in doc["steps"]]
    expected = [
        ("preflight", "pass"),
        ("start", "pass"),
        ("verify", "pass"),
        ("gate", "skip"),  # the local target has no GPU nodes to gate
        ("submit", "pass"),
        ("follow", "pass"),
        ("check", "skip"),
    ]
    assert got == expected, f"expected {expected}, got {got}"


def test_local_run_reports_training_metrics(local_run_doc):
    m = local_run_doc["metrics"]
    assert m["world_size"] == 2 and m["steps"] == 20, f"expected 2 workers x 20 steps, got {m}"
    assert m["tokens_per_s"] > 0 and m["loss_first"] is not None and m["loss_last"] is not None, f"got {m}"
    assert m["loss_last"] < m["loss_first"] - 0.5, f"the tiny model should learn the synthetic task: got {m}"
    assert m["mfu"] is None, f"MFU has no meaning on CPU, got {m['mfu']}"


def test_cpu_run_says_nccl_is_not_applicable(local_run_doc):
    doc = local_run_doc
    assert doc["transport"]["verdict"] == "not-applicable", f"got {doc['transport']}"
    assert doc["transport"]["cause"] == "no NCCL on CPU/gloo, EFA not applicable", f"got {doc['transport']['cause']}"


def test_local_run_writes_the_summary_in_its_run_directory(local_run, local_run_doc):
    doc = local_run_doc
    _, cwd = local_run
    summary = cwd / "runs" / doc["job_id"] / "summary.json"
    assert summary.is_file(), f"expected {summary}"
    assert json.loads(summary.read_text())["run_id"] == doc["job_id"]


def test_local_run_leaves_no_ray_process(local_run_doc):
    doc = local_run_doc
    temp_dir = next(s["data"]["temp_dir"] for s in doc["steps"] if s["step"] == "start")
    left = processes_naming(temp_dir)
    assert left == [], f"expected no process naming {temp_dir}, got pids {left}"


def test_inherited_ray_address_is_named_and_not_used(local_run_doc):
    notes = local_run_doc["notes"]
    named = [n for n in notes if f"RAY_ADDRESS={STALE_RAY_ADDRESS}" in n and "not used" in n]
    assert named, f"expected a note naming RAY_ADDRESS={STALE_RAY_ADDRESS} as not used, got notes {notes}"


ACTOR_SCRIPT = """
import sys, ray
ray.init(logging_level="ERROR")
@ray.remote(num_cpus=0)
class Probe:
    def ping(self):
        return 1
probe = Probe.remote()
ray.get(probe.ping.remote())
print("ready", flush=True)
sys.stdin.read()
"""


def listening_addresses(procs: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of `procs`."""
    found = []
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp")
            name = p.name()
        except psutil.NoSuchProcess:
            continue
        found += [(name, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


@pytest.mark.slow  # tests/automation/test_local_ray.py holds the fast test of the same promise
def test_every_ray_port_of_the_local_cluster_listens_on_loopback_only():
    cluster = LocalRayCluster(num_cpus=1)  # stopped in `finally`, as the local target's close() stops it
    try:
        cluster.start()
        # A driver with an actor, so a worker's own gRPC server is among the listeners.
        env = client_env(driver_env(), cluster.gcs_address)
        driver = subprocess.Popen(
            [sys.executable, "-c", ACTOR_SCRIPT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            ready, _, _ = select.select([driver.stdout], [], [], 120)
            line = driver.stdout.readline().strip() if ready else "(nothing within 120 s)"
            assert line == "ready", f"expected the probe driver to print ready once its actor runs, got {line!r}"
            listening = listening_addresses(process_tree(cluster._proc.pid))
        finally:
            driver.stdin.close()  # ends the probe's wait on stdin
            try:
                driver.wait(timeout=30)
            except subprocess.TimeoutExpired:
                driver.kill()
    finally:
        cluster.stop()
    names = {name for name, _, _ in listening}
    assert {"gcs_server", "raylet"} <= names, f"expected the GCS and the raylet among the listeners, got {listening}"
    exposed = [entry for entry in listening if entry[1] not in LOOPBACK]
    assert exposed == [], f"expected every listening socket on loopback, these listen beyond it: {exposed}"


def training_process(run_id: str, timeout_s: float = 180) -> psutil.Process:
    """The job's entrypoint, `python -m workloads.train ... --run-id run_id`, once it runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or ())
            if "workloads.train" in cmd and run_id in cmd:
                return p
        time.sleep(0.5)
    raise AssertionError(f"no training process of run {run_id} within {timeout_s:.0f} s")


# SIGINT started ignored is the harder case and stays in the default tier; SIGTERM's real run is in the
# slow tier (tests/automation/test_cli.py proves in-process that it takes Ctrl-C's path).
@pytest.fixture(
    scope="module",
    params=[pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGINT],
    ids=["SIGTERM", "SIGINT"],
)
def interrupted_run(request, tmp_path_factory):
    """`python -m automation run --json`, sent `request.param` while its training job runs."""
    sig = request.param
    run_id = f"interrupt-{sig.name.lower()}-{os.getpid()}"
    # Started with SIGINT ignored, as a non-interactive shell starts a background job (CI does):
    # the driver must still take Ctrl-C and SIGTERM as an interrupt.
    cwd = tmp_path_factory.mktemp("interrupted")
    proc = subprocess.Popen(
        [sys.executable, "-m", "automation", "run", "--json", "--run-id", run_id],
        cwd=cwd,
        env=driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    temp_dir = None
    try:
        # In --json mode the progress goes to stderr; the start step names the temp dir.
        for line in proc.stderr:
            if "temp dir " in line:
                temp_dir = line.rsplit("temp dir ", 1)[1].strip()
                break
        assert temp_dir, "the start step never reported its temp dir"
        training = training_process(run_id)
        started = process_tree(proc.pid)[1:]
        assert training in started, f"expected the training process {training.pid} among the driver's descendants"
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=90)
        seconds = time.monotonic() - t0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(started, timeout=10)  # the kernel reaps killed processes asynchronously
    survivors = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return {
        "sig": sig.name, "rc": rc, "seconds": seconds, "stderr": rest, "temp_dir": temp_dir, "alive": survivors,
        "run_dir": cwd / "runs" / run_id,
    }  # fmt: skip


def test_interrupted_run_exits_130(interrupted_run):
    r = interrupted_run
    assert r["rc"] == 130, f"expected exit 130 after {r['sig']}, got {r['rc']}; stderr after it:\n{r['stderr'][-3000:]}"


def test_interrupted_run_leaves_no_process_it_started(interrupted_run):
    r = interrupted_run
    alive = [(p.pid, p.name()) for p in r["alive"]]
    assert alive == [], f"expected every process the run started gone after {r['sig']}, alive: {alive}"


def test_interrupted_run_removes_its_temp_dir(interrupted_run):
    r = interrupted_run
    assert not Path(r["temp_dir"]).exists(), f"expected {r['temp_dir']} removed after {r['sig']}"


def test_interrupted_run_returns_within_seconds(interrupted_run):
    r = interrupted_run
    assert r["seconds"] < 15, f"expected the driver back within 15 s of {r['sig']}, it took {r['seconds']:.1f} s"


def test_interrupted_run_names_the_follow_step(interrupted_run):
    r = interrupted_run
    expected = "interrupted during step follow"
    assert expected in r["stderr"], f"expected {expected!r} on stderr after {r['sig']}, got: {r['stderr'][-2000:]}"


def test_interrupted_run_leaves_no_half_written_run_file(interrupted_run):
    r = interrupted_run
    bad = half_written(r["run_dir"]) if r["run_dir"].exists() else []
    assert bad == [], f"expected every file of {r['run_dir']} whole after {r['sig']}, got {bad}"
