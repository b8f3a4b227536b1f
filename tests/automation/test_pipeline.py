"""The pipeline runs typed steps in order and stops at the first failure with advice."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from automation.errors import DriverError
from automation.pipeline import (
    Advice,
    Expectations,
    Finding,
    Scaled,
    Step,
    StepInterrupted,
    StepResult,
    expectations_from,
    run_pipeline,
    verdict,
)

ADVICE = Advice("nothing", ("python -m automation run",))


def recording_steps(outcomes: dict[str, object], log: list[str]) -> list[Step]:
    def make(name, outcome):
        def run(prior):
            log.append(name)
            if isinstance(outcome, BaseException):
                raise outcome
            return StepResult(name, outcome, f"{name} said {outcome}")

        return Step(name, run)

    return [make(n, o) for n, o in outcomes.items()]


def test_steps_run_in_the_given_order():
    log: list[str] = []
    result = run_pipeline(recording_steps({"a": "pass", "b": "skip", "c": "pass"}, log), lambda n, p: ADVICE)
    assert (log, result.ok) == (["a", "b", "c"], True), f"expected a, b, c and success, got {log}, ok={result.ok}"


def test_first_failure_stops_the_run_and_names_the_rest():
    log: list[str] = []
    result = run_pipeline(recording_steps({"a": "pass", "b": "fail", "c": "pass"}, log), lambda n, p: ADVICE)
    assert log == ["a", "b"], f"expected c not to run, got {log}"
    assert (result.failed_step, result.not_run) == ("b", ("c",)), f"got {result.failed_step}, {result.not_run}"


def test_failure_advice_is_asked_for_the_failed_step():
    asked = []

    def advise(name, state):
        asked.append((name, state.preflight.status, state.preview.status))
        return ADVICE

    run_pipeline(recording_steps({"preflight": "pass", "preview": "fail"}, []), advise)
    assert asked == [("preview", "pass", "fail")], f"expected advice for preview with both results, got {asked}"


def test_unexpected_exception_becomes_a_failed_step_without_traceback():
    result = run_pipeline(recording_steps({"a": ValueError("bad value")}, []), lambda n, p: ADVICE)
    assert (result.failed_step, result.reason) == ("a", "ValueError: bad value"), (
        f"got {result.failed_step}, {result.reason!r}"
    )


def test_driver_error_keeps_its_message():
    result = run_pipeline(recording_steps({"a": DriverError("quota too low")}, []), lambda n, p: ADVICE)
    assert result.reason == "quota too low", f"got {result.reason!r}"


def test_bad_input_error_propagates_to_the_cli():
    with pytest.raises(DriverError) as err:
        run_pipeline(recording_steps({"a": DriverError("no kubeconfig", exit_code=2)}, []), lambda n, p: ADVICE)
    assert err.value.exit_code == 2


def test_keyboard_interrupt_passes_through():
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(recording_steps({"a": KeyboardInterrupt()}, []), lambda n, p: ADVICE)


def test_later_steps_read_earlier_results_as_the_run_states_attributes():
    seen = []

    def verify(prior):
        seen.append(prior.scale_up.data)
        return StepResult("verify", "pass", "")

    scaled = Scaled("gpu-ng", 0, 2)
    up = Step("scale-up", lambda p: StepResult("scale-up", "pass", "", data=scaled))
    result = run_pipeline([up, Step("verify", verify)], lambda n, p: ADVICE)
    assert (seen, result.state.verify.status) == ([scaled], "pass"), f"got {seen}, {result.state}"


def test_verdict_fails_when_any_finding_fails():
    r = verdict(
        "x", [Finding("a", "pass", ""), Finding("b", "fail", "too small", "grow it"), Finding("c", "skip", "n/a")]
    )
    assert (r.status, r.summary) == ("fail", "b: too small"), f"got {r.status}, {r.summary!r}"


def test_verdict_passes_with_skips():
    r = verdict("x", [Finding("a", "pass", ""), Finding("c", "skip", "n/a")])
    assert r.status == "pass", f"got {r.status}"


def test_bad_input_error_after_a_completed_step_fails_that_step_with_advice():
    """Once a step has run (e.g. `up`), an exit-2 DriverError must not drop the what-exists advice."""
    asked = []
    steps = recording_steps(
        {"up": "pass", "verify": DriverError("stack has no kubeconfig output", exit_code=2), "follow": "pass"}, []
    )
    result = run_pipeline(steps, lambda n, p: asked.append(n) or ADVICE)
    got = (result.failed_step, result.reason, result.advice, result.not_run, asked)
    assert got == ("verify", "stack has no kubeconfig output", ADVICE, ("follow",), ["verify"]), f"got {got}"


def test_interrupt_names_the_step_and_carries_its_advice():
    with pytest.raises(StepInterrupted) as err:
        run_pipeline(
            recording_steps({"up": "pass", "verify": KeyboardInterrupt()}, []), lambda n, p: Advice(f"after {n}", ())
        )
    assert (err.value.step, err.value.advice) == ("verify", Advice("after verify", ())), (
        f"got {err.value.step}, {err.value.advice}"
    )


# --------------------------------------------------------------------------- expectations


CFG = SimpleNamespace(
    gpu_nodes=SimpleNamespace(node_count=2, availability_zone="us-west-2b", gpus_per_node=4, efa_interfaces=1),
    ray=SimpleNamespace(namespace="ray", cluster_name="ray-efa", worker=SimpleNamespace(replicas=2)),
)


def test_expectations_come_from_the_stack_config_without_outputs():
    got = expectations_from(CFG, {})
    expected = Expectations(2, "us-west-2b", 4, 1, "ray", "ray-efa", 2)
    assert got == expected, f"expected {expected}, got {got}"


def test_stack_outputs_take_precedence_over_the_config():
    outputs = {"gpu_az": "us-west-2a", "raycluster_namespace": "ray2", "raycluster_name": "rc2"}
    got = expectations_from(CFG, outputs)
    expected = Expectations(2, "us-west-2a", 4, 1, "ray2", "rc2", 2)
    assert got == expected, f"expected {expected}, got {got}"


def test_expectations_serialise_every_field():
    got = Expectations(2, "us-west-2b", 4, 1, "ray", "ray-efa", 2).to_dict()
    assert got == {
        "node_count": 2,
        "gpu_az": "us-west-2b",
        "gpus_per_node": 4,
        "efa_per_node": 1,
        "namespace": "ray",
        "raycluster": "ray-efa",
        "worker_replicas": 2,
    }, f"got {got}"
