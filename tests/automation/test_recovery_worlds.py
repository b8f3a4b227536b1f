"""Runs that survive a lost GPU node (issue 46 items 4 and 7), on a fake clock: the job fails when a node stops
posting status, the failure is told from what the cluster shows, EKS node repair brings a replacement on the same
clock, and the run resumes from its last checkpoint as a new job of the same run; an application failure and a
fault that repeats stop, saying what they spent; the JSON report carries the failure and the recoveries typed; a
job stopped at --timeout is no failure.

The world is tests/support/_attach_world.py's (moto's EKS node group, the recorded cluster behind the fake
Kubernetes API, the head pod's job server of _ray_jobs.py) with the cluster changing on the clock. What a lost node
looks like: the kubelet stops posting status, so the node lifecycle controller sets Ready Unknown
(_worlds.node_not_ready); the worker pod on it stays as last reported. EKS node auto repair then replaces the
instance: a new node of a new name joins Ready, and KubeRay's worker pod runs on it (EKS user guide, node-health:
"node auto repair"; how long the repair waits before it acts is not stated per condition there: REPAIR_S is
illustrative). A new node's EFA counters start from boot.
"""

from __future__ import annotations

from _recovery_world import FORWARDED, LOST_AT, LostNodeWorld, _run, run_on
from _worlds import GPU_NODE
from _worlds import workers as workers_of

from automation.recovery import INFRASTRUCTURE
from automation.targets.aws import RESUMED


def test_a_node_lost_at_step_400_is_replaced_and_the_run_resumes_to_a_pass(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    rc = _run(world, monkeypatch, capsys)
    resumed = [j for j in world.jobs.jobs if RESUMED in j]
    assert (rc, len(resumed)) == (0, 1), f"expected a pass after one resumed job, got {rc}, {list(world.jobs.jobs)}"


def test_the_replaced_node_passes_the_gate_before_the_resumed_job(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys)
    gates = [(s["step"], s["status"]) for s in world.doc["steps"] if s["step"] == "gate"]
    assert gates == [("gate", "pass"), ("gate", "pass")], f"expected the gate before each job, got {gates}"


def test_the_recovery_says_node_condition_step_minutes_and_steps_lost(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys)
    want = f"node {GPU_NODE}, condition Ready Unknown (NodeStatusUnknown) at step 400, replaced in 12 min, 0 steps lost"
    notes = " ".join(world.notes)
    assert want in notes, f"expected {want!r} in the notes: {notes[-900:]}"


def test_both_efa_witnesses_are_judged_over_the_resumed_attempt(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys)
    check = [s for s in world.doc["steps"] if s["step"] == "check"]
    witness = check[-1]["data"]["counters"]["witnesses"]["outcome"] if check else None
    assert (len(check), check[-1]["status"] if check else None, witness) == (1, "pass", "pass"), check


def test_the_ended_attempts_nccl_logs_are_set_aside_in_every_worker_before_the_resumed_job(
    moto_eks, monkeypatch, capsys
):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys)
    workers = sorted(p["metadata"]["name"] for p in workers_of(world.objects))
    assert sorted(world.set_aside) == [(w, 1) for w in workers], (
        f"expected each worker once after job 1: {world.set_aside}"
    )


def test_repeated_infrastructure_failures_stop_after_the_bound_saying_what_was_spent(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks, losses=5)
    rc = _run(world, monkeypatch, capsys, "--max-recoveries", "2")
    notes = " ".join(world.notes)
    resumed = [j for j in world.jobs.jobs if RESUMED in j]
    assert (rc, len(resumed)) == (1, 2), f"expected exit 1 after 2 resumed jobs, got {rc}, {list(world.jobs.jobs)}"
    assert "stopped after 2 recovery attempt(s)" in notes and "USD/h" in notes, notes[-900:]


def test_an_application_failure_stops_at_once_and_scales_down(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks, app_error=True)
    rc = _run(world, monkeypatch, capsys)
    notes = " ".join(world.notes)
    said = (rc, list(world.jobs.jobs), [size for _, size, _ in world.scaled])
    assert said == (1, ["r1"], [0]), f"expected exit 1, one job, a scale-down to 0: got {said}"
    assert "application failure, a Python exception; not retried" in notes, notes[-600:]


LOST_READY = "condition Ready Unknown (NodeStatusUnknown)"


def test_the_json_report_carries_the_recovered_failure_typed_with_its_recovery(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys)
    got = [
        (r["failure"]["kind"], r["failure"]["cause"], r["failure"]["node"], r["resumed_at"])
        for r in world.doc["recoveries"]
    ]
    want = [(INFRASTRUCTURE, LOST_READY, GPU_NODE, LOST_AT + 1)]
    assert got == want, f"expected the recovery from the lost node {want}, got {world.doc['recoveries']}"


def test_the_json_report_of_a_run_stopped_by_a_lost_node_carries_its_failure_typed(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks)
    _run(world, monkeypatch, capsys, "--max-recoveries", "0")
    failure = world.doc["failure"] or {}
    got = (failure.get("kind"), failure.get("cause"), failure.get("node"), failure.get("step"))
    want = (INFRASTRUCTURE, LOST_READY, GPU_NODE, LOST_AT)
    assert got == want, f"expected the lost node's failure {want}, got {world.doc['failure']}"


def test_the_json_report_of_a_run_with_no_failure_has_no_attribution(moto_eks, monkeypatch, capsys):
    world = LostNodeWorld(moto_eks, losses=0)
    _run(world, monkeypatch, capsys)
    got = (world.doc["ok"], world.doc["failure"], world.doc["recoveries"])
    assert got == (True, None, []), f"expected a pass with no failure and no recovery, got {got}"


def test_a_job_stopped_at_its_timeout_on_a_healthy_cluster_is_no_failure_and_not_retried(moto_eks, monkeypatch):
    world = LostNodeWorld(moto_eks, losses=0)
    run_on(
        world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--timeout", "3600"], (*FORWARDED, "job_timeout_s")
    )
    said = (list(world.jobs.jobs), [n for n in world.notes if "failure" in n or "--timeout" in n])
    want = (
        ["r1"],
        [
            "job r1 has run 3600 s, past --timeout 3600: `ray job stop`",
            "job r1 stopped at --timeout 3600 s: not retried",
        ],
    )
    assert said == want, f"expected one job, no failure, the stop said as --timeout's: got {said}"
