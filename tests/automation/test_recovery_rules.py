"""automation/recovery.py's rules, one boundary at a time: which cluster evidence makes a failed job infrastructure
(and so retried), what the recovery's line says, and the bounded wait for the replaced node.

Nodes and pods are shaped as the Kubernetes API lists them (core/v1 Node `status.conditions[]` of type, status,
reason; Pod `spec.nodeName`, `status.phase`, `status.reason`, `status.message`: kubernetes/api core/v1 types.go),
the agent's condition types as aws/eks-node-monitoring-agent v1.7.0's README names them."""

from __future__ import annotations

import pytest

from automation.errors import DriverError
from automation.recovery import (
    AGENT_CONDITIONS,
    APPLICATION,
    INFRASTRUCTURE,
    POLL_S,
    Failure,
    Recovery,
    classify,
    last_step,
    wait_for_nodes,
)


def node(name: str = "n1", ready: str = "True", **conditions: str) -> dict:
    """A GPU node whose Ready condition is ``ready`` and each of ``conditions`` (type=status) set, reason R-type."""
    conds = [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]
    conds += [{"type": t, "status": s, "reason": f"R-{t}"} for t, s in conditions.items()]
    return {"metadata": {"name": name}, "status": {"conditions": conds}}


def pod(on: str | None = "n1", phase: str = "Running", **status: str) -> dict:
    spec = {"nodeName": on} if on is not None else {}
    return {"metadata": {"name": f"w-{on}"}, "spec": spec, "status": {"phase": phase, **status}}


STEP_LOG = ("[train] step 7/10 loss 1.0", "[train] step 8/10 loss 0.9")


@pytest.mark.parametrize("condition", AGENT_CONDITIONS)
@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_every_agent_condition_not_true_is_infrastructure_naming_it(condition, status):
    got = classify([node(**{condition: status})], [pod()], 1, STEP_LOG)
    want = Failure(INFRASTRUCTURE, f"condition {condition} {status} (R-{condition})", "n1", 8)
    assert got == want, f"expected {want}, got {got}"


@pytest.mark.parametrize("ready", ["False", "Unknown"])
def test_a_node_not_ready_is_infrastructure(ready):
    got = classify([node(ready=ready)], [pod()], 1, STEP_LOG)
    want = Failure(INFRASTRUCTURE, f"condition Ready {ready} (KubeletReady)", "n1", 8)
    assert got == want, f"expected {want}, got {got}"


def test_a_condition_without_reason_says_no_reason():
    bare = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "KernelReady", "status": "False"}]}}
    got = classify([bare], [pod()], 1, ()).cause
    assert got == "condition KernelReady False (no reason)", f"expected the condition with 'no reason', got {got!r}"


def test_kubelet_pressure_conditions_false_are_healthy_not_faults():
    # MemoryPressure/DiskPressure/PIDPressure False is the healthy state (core/v1 NodeConditionType)
    got = classify([node(MemoryPressure="False", DiskPressure="False")], [pod()], 1, ())
    assert got.kind == APPLICATION, f"expected a healthy node's pressure conditions to be no fault, got {got}"


def test_the_node_at_fault_is_named_when_it_is_not_the_first():
    got = classify([node("n1"), node("n2", NetworkingReady="False")], [pod("n1"), pod("n2")], 2, ())
    assert (got.kind, got.node) == (INFRASTRUCTURE, "n2"), f"expected n2 named, got {got}"


def test_a_pod_not_yet_placed_is_not_a_lost_node():
    got = classify([node("n1")], [pod("n1"), pod(None, phase="Pending")], 1, ())
    assert got.kind == APPLICATION, f"expected a pod without nodeName to be no fault, got {got}"


def test_a_node_without_status_or_conditions_shows_no_fault_of_its_own():
    got = classify([{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}, "status": {}}], [pod("n1")], 2, ())
    assert got.kind == APPLICATION, f"expected nodes without conditions to show no condition False, got {got}"


def test_a_pod_without_spec_or_status_is_no_fault():
    got = classify([node("n1")], [pod("n1"), {"metadata": {"name": "w-new"}}], 1, ())
    assert got.kind == APPLICATION, f"expected a pod not yet filled in to be no fault, got {got}"


def test_a_lost_node_comes_before_the_other_nodes_conditions():
    got = classify([node("n2", ready="False")], [pod("n1"), pod("n2")], 2, STEP_LOG)
    assert got == Failure(INFRASTRUCTURE, "node lost", "n1", 8), f"expected n1 lost first, got {got}"


def test_fewer_nodes_than_wanted_is_a_lost_node_and_as_many_is_not():
    short = classify([node("n1")], [pod("n1")], 2, STEP_LOG)
    enough = classify([node("n1")], [pod("n1")], 1, STEP_LOG)
    want = Failure(INFRASTRUCTURE, "node lost (1 of 2 GPU nodes)", None, 8)
    assert (short, enough.kind) == (want, APPLICATION), f"expected {want} and no fault at 1 of 1, got {short}, {enough}"


def test_an_evicted_pod_names_its_node_and_the_kubelets_message():
    evicted = pod("n2", reason="Evicted", message="low on memory")
    got = classify([node("n1"), node("n2")], [pod("n1"), evicted], 2, STEP_LOG)
    want = Failure(INFRASTRUCTURE, "pod evicted: low on memory", "n2", 8)
    assert got == want, f"expected {want}, got {got}"


def test_an_evicted_pod_without_message_is_still_infrastructure():
    got = classify([node()], [pod(reason="Evicted")], 1, ())
    assert (got.kind, got.cause) == (INFRASTRUCTURE, "pod evicted: "), f"expected an eviction, got {got}"


def test_another_pod_reason_is_not_an_eviction_and_nothing_explained_keeps_the_step():
    got = classify([node()], [pod(reason="OOMKilled")], 1, STEP_LOG)
    want = Failure(APPLICATION, "no fault of the cluster seen", None, 8)
    assert got == want, f"expected OOMKilled at the pod's own limit to be {want}, got {got}"


@pytest.mark.parametrize(
    "line, cause",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory"),
        ("torch.cuda.OutOfMemoryError: boom", "CUDA out of memory"),
        ("Traceback (most recent call last):", "a Python exception"),
    ],
)
def test_the_application_cause_is_named_from_the_log(line, cause):
    got = classify([node()], [pod()], 1, ("[train] step 3/10 loss 1.0", line))
    assert got == Failure(APPLICATION, cause, None, 3), f"expected {cause!r} at step 3, got {got}"


def test_a_quoted_traceback_mid_line_is_not_a_python_exception():
    got = classify([node()], [pod()], 1, ("said: Traceback (most recent call last):",))
    assert got.cause == "no fault of the cluster seen", f"expected only a line-leading traceback to count, got {got}"


def test_last_step_reads_the_last_or_the_first_step_line():
    lines = ("x", "[train] step 4/9 loss", "[train] step 5/9 loss", "y")
    got = (last_step(lines), last_step(lines, first=True), last_step(("x",)), last_step((), first=True))
    assert got == (5, 4, None, None), f"expected (5, 4, None, None), got {got}"


def test_the_recovery_line_says_unknown_step_and_unknown_loss_without_steps():
    got = Recovery(Failure(INFRASTRUCTURE, "node lost", None, None), 3.4, 5, "c").line()
    assert got == "node ?, node lost at an unknown step, replaced in 3 min, steps lost unknown", got


def test_steps_lost_is_unknown_when_the_resumed_job_showed_no_step():
    got = Recovery(Failure(INFRASTRUCTURE, "node lost", "n1", 40), 1.0, None, "c").line()
    assert got.endswith("at step 40, replaced in 1 min, steps lost unknown"), got


class Clock:
    """A fake clock the wait's sleeps advance."""

    def __init__(self) -> None:
        self.now, self.slept, self.said = 100.0, list[float](), list[str]()

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def wait(reads: list[tuple[list, list]], clock: Clock, deadline: float, want: tuple[int, int] = (2, 2)) -> float:
    it = iter(reads)
    return wait_for_nodes(lambda: next(it), *want, deadline, lambda: clock.now, clock.sleep, clock.said.append)


HEALTHY = ([node("n1"), node("n2")], [pod("n1"), pod("n2")])


def test_the_wait_returns_the_seconds_until_every_node_is_healthy_and_every_worker_running():
    clock = Clock()
    sick = ([node("n1"), node("n2", AcceleratedHardwareReady="False")], [pod("n1"), pod("n2")])
    pending = ([node("n1"), node("n2")], [pod("n1"), pod("n2", phase="Pending")])
    waited = wait([sick, pending, HEALTHY], clock, 1000.0)
    assert (waited, clock.slept) == (2 * POLL_S, [POLL_S, POLL_S]), f"expected 2 polls, got {waited}, {clock.slept}"


def test_the_wait_says_what_it_waits_for():
    clock = Clock()
    wait([([node("n1"), node("n2", ready="False")], [pod("n1")]), HEALTHY], clock, 1000.0)
    want = ["waiting for the replaced node: 1 of 2 GPU nodes healthy, 1 of 2 worker pods Running after 0 s"]
    assert clock.said == want, f"expected {want}, got {clock.said}"


def test_a_node_or_pod_whose_status_is_not_filled_yet_is_not_counted():
    clock = Clock()  # a node that just registered, a pod just created: the API returns them without status
    nodes, pods = [node("n1"), {"metadata": {"name": "n2"}}], [pod("n1"), {"metadata": {"name": "w2"}, "spec": {}}]
    with pytest.raises(DriverError, match="1 of 2 GPU nodes healthy, 1 of 2 worker pods Running"):
        wait([(nodes, pods)], clock, 100.0)


def test_more_than_wanted_ends_the_wait_at_once():
    clock = Clock()
    extra = ([node("n1"), node("n2"), node("n3")], [pod("n1"), pod("n2"), pod("n3")])
    assert wait([extra], clock, 100.0) == 0.0 and clock.slept == [], f"expected no wait, slept {clock.slept}"


def test_the_wait_stops_at_its_deadline_saying_what_was_missing():
    clock = Clock()
    short = ([node("n1")], [pod("n1")])
    with pytest.raises(DriverError) as e:
        wait([short] * 10, clock, 100.0 + 2 * POLL_S)
    want = f"1 of 2 GPU nodes healthy, 1 of 2 worker pods Running after {2 * POLL_S:.0f} s: the recovery's time ran out"
    got = (str(e.value), len(clock.slept))
    assert got == (want, 2), f"expected {want!r} (2 polls), got {e.value}, {clock.slept}"
