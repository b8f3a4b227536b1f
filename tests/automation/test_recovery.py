"""automation/recovery.py: a failed job is infrastructure only when the cluster shows a fault; else application."""

from __future__ import annotations

from automation.recovery import APPLICATION, INFRASTRUCTURE, Failure, Recovery, classify


def gpu_node(name: str = "n1", **conditions: str) -> dict:
    """A Node as the API lists it (core/v1 NodeCondition: type, status, reason)."""
    conds = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    conds += [{"type": t, "status": "False", "reason": r} for t, r in conditions.items()]
    return {"metadata": {"name": name}, "status": {"conditions": conds}}


def worker(node: str = "n1", **status: str) -> dict:
    return {"metadata": {"name": f"w-{node}"}, "spec": {"nodeName": node}, "status": {"phase": "Running", **status}}


LOG = ("[train] step 400/1000 loss 7.6 tokens/s 52000", "Traceback (most recent call last):", "KeyError: 'x'")


def test_an_agent_gpu_condition_false_is_infrastructure_naming_node_and_step():
    got = classify([gpu_node(AcceleratedHardwareReady="NvidiaXID79Error")], [worker()], 1, LOG)
    want = Failure(INFRASTRUCTURE, "condition AcceleratedHardwareReady False (NvidiaXID79Error)", "n1", 400)
    assert got == want, got


def test_a_worker_on_a_node_no_longer_listed_is_a_lost_node():
    got = classify([gpu_node("n2")], [worker("n1"), worker("n2")], 2, LOG)
    assert (got.kind, got.cause, got.node) == (INFRASTRUCTURE, "node lost", "n1"), got


def test_an_evicted_worker_is_infrastructure():
    got = classify([gpu_node()], [worker(reason="Evicted", message="The node was low on resource: memory.")], 1, LOG)
    assert got.kind == INFRASTRUCTURE and "evicted" in got.cause, got


def test_a_traceback_on_a_healthy_cluster_is_application():
    assert classify([gpu_node()], [worker()], 1, LOG).kind == APPLICATION


def test_a_failure_nothing_explains_is_application_so_it_is_not_retried():
    got = classify([gpu_node()], [worker()], 1, ("[train] step 3/10 loss 1.0 tokens/s 5",))
    assert (got.kind, got.cause) == (APPLICATION, "no fault of the cluster seen"), got


def test_the_attribution_line_counts_the_steps_lost_from_the_resumed_first_step():
    line = Recovery(Failure(INFRASTRUCTURE, "condition Ready Unknown (x)", "n1", 412), 11.6, 401, "").line()
    assert line == "node n1, condition Ready Unknown (x) at step 412, replaced in 12 min, 12 steps lost", line
