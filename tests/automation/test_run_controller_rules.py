"""automation/run_controller.py's end of a run, one rule at a time, in process: what the logs' copy is given and
when, when the GPU nodes are scaled down or kept, where the end's lines go, the exit status, Ctrl-C's report, and
the recovery loop's bounds (count, minutes, application failures, --timeout), what it says and what it keeps for
the report.

The target stands in for automation/targets/aws.py's ``AwsTarget`` (a subclass, so the controller's "on AWS" checks
hold), with only the methods the controller calls, each recording its call; ``after_run`` (automation/scaling.py)
stands in as a recorder. Job statuses are Ray's (ray.job_submission.JobStatus; TERMINAL in automation/ray_head.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from automation import run_controller, steps
from automation.errors import DriverError
from automation.pipeline import (
    Advice,
    PipelineResult,
    RunState,
    StepInterrupted,
    StepResult,
    SubmittedJob,
    Timed,
    TrainOutcome,
)
from automation.recovery import APPLICATION, INFRASTRUCTURE, Failure, Recovery
from automation.run_controller import RunController, attempt_cost, joined, report_interrupt
from automation.targets import aws
from automation.targets.local import LocalTarget


@dataclasses.dataclass(frozen=True)
class Run:
    """The fields of AwsRun the controller reads."""

    run_id: str = "r1"
    max_recoveries: int = 2
    recovery_minutes: float = 45
    resume: bool = False
    job_timeout_s: float | None = None


class Target(aws.AwsTarget):
    """An AwsTarget that records what the controller asks of it (see the module docstring)."""

    def __init__(self, **run: Any) -> None:  # no super().__init__: nothing of AWS is opened
        self.run = Run(**run)  # type: ignore[assignment]
        self.notes, self.calls, self.now = list[str](), list[tuple](), 1000.0
        self.on_line = lambda text: self.calls.append(("line", text))
        self.failures: list[Failure] = []
        self.waits: list[float | Exception] = []
        self.keep: str | Exception = "logs kept in s3://b/r1/logs/"
        self.usd_per_hour: float | None = 12.0

    def clock(self) -> float:
        return self.now

    def note(self, text: str) -> None:
        self.notes.append(text)

    def keep_logs(self, job_ids, since):
        self.calls.append(("keep_logs", tuple(job_ids), since))
        if isinstance(self.keep, BaseException):
            raise self.keep
        return self.keep

    def attach_command(self, job_id: str) -> str:
        return f"attach {job_id}"

    def failure_of(self, outcome):
        self.calls.append(("failure_of", outcome.job_id))
        return self.failures.pop(0)

    def wait_for_replacement(self, deadline: float) -> float:
        self.calls.append(("wait", deadline))
        waited = self.waits.pop(0)
        if isinstance(waited, Exception):
            raise waited
        self.now += waited
        return waited

    def set_aside_nccl_logs(self, attempt: int) -> None:
        self.calls.append(("set_aside", attempt, self.run.resume))

    def price(self, gpu_nodes=None):
        return aws.CostEstimate(self.usd_per_hour, ())

    def interrupted(self, advice):
        self.calls.append(("interrupted", advice))
        return advice or Advice("nothing", ("destroy",))

    def where(self) -> str:
        return " on stack s"

    def close(self) -> None:
        self.calls.append(("close",))

    def advise(self, failed, prior):
        return Advice("a stack", ())


class Ui:
    """The controller's Ui (automation/ui.py): lines kept in order, the JSON document kept."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode, self.lines, self.docs, self.finished = json_mode, list[str](), list[dict](), list[str]()

    def note(self, text: str) -> None:
        self.lines.append(f"note: {text}")

    def error(self, text: str) -> None:
        self.lines.append(f"error: {text}")

    def emit_json(self, doc: dict) -> None:
        self.docs.append(doc)

    def step_started(self, name: str) -> None:
        self.lines.append(f"started: {name}")

    def step_finished(self, timed) -> None:
        self.finished.append(timed.result.step)


@pytest.fixture
def scaled(monkeypatch) -> list[tuple]:
    """after_run's calls (target, keep_nodes); it says it scaled down."""
    calls: list[tuple] = []

    def after_run(target: object, keep: bool) -> str:
        calls.append((target, keep))
        return "scaled to 0"

    monkeypatch.setattr(run_controller, "after_run", after_run)
    return calls


def job_state(job_id: str, status: str | None) -> RunState:
    """A state whose job `job_id` was submitted and, unless status is None, followed to `status`."""
    submit = StepResult("submit", "pass", "", data=SubmittedJob(job_id, None))  # type: ignore[arg-type]
    follow = None if status is None else StepResult("follow", "pass", "", data=TrainOutcome(job_id, status, None))
    return RunState(submit=submit, follow=follow)


def result_of(state: RunState, failed: str | None = None) -> PipelineResult:
    return PipelineResult(steps=(), failed_step=failed, state=state)


# ---- the logs ------------------------------------------------------------------------------------------------------
def test_no_logs_are_copied_when_no_job_was_submitted_or_followed(scaled):
    target = Target()
    owner = RunController(target, Ui())
    owner.begun = ["preflight", "up", "scale-up", "gate"]
    line = owner.keep_logs(None)
    assert (line, target.calls) == (None, []), f"expected no copy, got {line}, {target.calls}"


@pytest.mark.parametrize("step", ["submit", "follow"])
def test_a_run_stopped_in_its_first_job_copies_the_logs_of_the_runs_id(step):
    target = Target()
    owner = RunController(target, Ui())
    owner.begun = ["scale-up", step]
    line = owner.keep_logs(KeyboardInterrupt())
    want = [("keep_logs", ("r1",), 1000.0)]
    assert (target.calls, line) == (want, target.keep), f"expected {want}, got {target.calls}"


def test_every_job_of_the_run_is_copied_once_in_order_with_the_one_left_running():
    target = Target()
    owner = RunController(target, Ui())
    target.now = 2000.0  # the controller's start (1000) bounds the Ray logs, not the end's time
    owner.begun = ["submit", "follow"]
    owner.results = [result_of(job_state("j1", "FAILED")), result_of(RunState()), result_of(job_state("j1", "FAILED"))]
    owner.results.append(result_of(job_state("j2", "RUNNING")))
    owner.keep_logs(StepInterrupted("follow", None, "j3"))
    want = [("keep_logs", ("j1", "j2", "j3"), 1000.0)]
    assert target.calls == want, f"expected {want}, got {target.calls}"


@pytest.mark.parametrize(
    "error, line",
    [
        (RuntimeError("bucket gone"), "logs not kept in the run bucket: RuntimeError: bucket gone"),
        (KeyboardInterrupt(), "logs not kept in the run bucket: interrupted while copying them"),
    ],
)
def test_a_copy_that_fails_is_one_line_never_the_runs_error(error, line):
    target = Target()
    target.keep = error
    owner = RunController(target, Ui())
    owner.results = [result_of(job_state("j1", "SUCCEEDED"))]
    got = owner.keep_logs(None)
    assert got == line, f"expected {line!r}, got {got!r}"


def test_the_local_target_copies_no_logs_and_scales_nothing(tmp_path, scaled):
    owner = RunController(LocalTarget(tmp_path), Ui())
    owner.begun = ["up", "submit", "follow"]
    got = (owner.keep_logs(KeyboardInterrupt()), owner.scale_down(None), scaled)
    assert got == (None, None, []), f"expected nothing done on the local target, got {got}"


# ---- the scale-down -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("step", run_controller.NODE_STEPS)
def test_any_node_step_begun_decides_the_scale_down_with_keep_nodes_passed(step, scaled):
    target = Target()
    owner = RunController(target, Ui(), keep_nodes=True)
    owner.begun = ["preflight", step]
    line = owner.scale_down(None)
    assert (line, scaled) == ("scaled to 0", [(target, True)]), f"{step}: expected after_run, got {line}, {scaled}"


def test_no_node_step_begun_leaves_the_nodes_alone(scaled):
    owner = RunController(Target(), Ui())
    owner.begun = ["preflight", "preview", "verify", "gate", "submit"]
    assert (owner.scale_down(None), scaled) == (None, []), f"expected no scale-down, got {scaled}"


@pytest.mark.parametrize("status", [None, "PENDING", "RUNNING"])
def test_a_job_not_said_ended_keeps_the_nodes_naming_it_and_how_to_follow(status, scaled):
    owner = RunController(Target(), Ui())
    owner.begun = ["scale-up", "submit", "follow"]
    owner.results = [result_of(job_state("j0", "SUCCEEDED")), result_of(job_state("j1", status))]
    line = owner.scale_down(None)
    want = "GPU nodes kept: job j1 may still run on them; `attach j1` follows it and scales them down when it ends"
    assert (line, scaled) == (want, []), f"expected {want!r} and no scale-down, got {line!r}, {scaled}"


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "STOPPED"])
def test_every_ended_job_lets_the_nodes_scale_down(status, scaled):
    target = Target()
    owner = RunController(target, Ui())  # --keep-nodes not given
    owner.begun = ["scale-up", "submit", "follow"]
    owner.results = [result_of(job_state("j1", status)), result_of(RunState())]
    got = (owner.scale_down(None), scaled)
    assert got == ("scaled to 0", [(target, False)]), f"{status}: expected the scale-down without keep, got {got}"


def test_ctrl_c_while_following_keeps_the_nodes_for_the_job_left_running(scaled):
    owner = RunController(Target(), Ui())
    owner.begun = ["scale-up", "follow"]
    line = owner.scale_down(StepInterrupted("follow", None, "j9"))
    assert (line or "").startswith("GPU nodes kept: job j9 may") and scaled == [], f"got {line!r}, {scaled}"


# ---- the end, in order --------------------------------------------------------------------------------------------
def test_a_finished_run_puts_the_ends_lines_in_the_report_and_returns_its_status(scaled):
    target, ui, reported = Target(), Ui(), []
    owner = RunController(target, ui)

    def work(owner: RunController) -> str:
        owner.begun += ["scale-up", "submit"]
        owner.results.append(result_of(job_state("j1", "SUCCEEDED")))
        return "done"

    def report(done: str) -> int:
        reported.append((done, list(target.notes), [c[0] for c in target.calls]))
        return 7

    rc = owner.run(work, report)
    want = [("done", ["logs kept in s3://b/r1/logs/", "scaled to 0"], ["keep_logs"])]
    got = (rc, reported, ui.lines, target.calls[-1], owner.scale_down_line)
    assert got == (7, want, [], ("close",), "scaled to 0"), f"expected exit 7 after {want}, then close; got {got}"


def test_ctrl_c_says_the_ends_lines_now_reports_the_interrupt_and_exits_130(scaled):
    target, ui = Target(), Ui(json_mode=True)
    owner = RunController(target, ui)
    advice = Advice("the stack and 2 GPU nodes", ("resume", "destroy"))

    def work(owner: RunController) -> None:
        owner.begun += ["scale-up", "submit"]
        raise StepInterrupted("submit", advice)

    rc = owner.run(work, lambda done: pytest.fail("no report after Ctrl-C"))
    want = [
        "note: logs kept in s3://b/r1/logs/",
        "note: scaled to 0",
        "error: interrupted during step submit on stack s: the stack and 2 GPU nodes",
        "note:   resume",
        "note:   destroy",
    ]
    doc = {
        "ok": False,
        "error": "interrupted during step submit",
        "interrupted_step": "submit",
        "exists": "the stack and 2 GPU nodes",
        "next": ["resume", "destroy"],
    }
    got = (rc, ui.lines, ui.docs, target.notes, target.calls[-1])
    assert got == (130, want, [doc], [], ("close",)), f"expected 130, {want}, {doc}; got {got}"


def test_a_raised_step_goes_through_the_end_then_propagates(scaled):
    target, ui = Target(), Ui()
    owner = RunController(target, ui)

    def work(owner: RunController) -> None:
        owner.begun.append("up")
        raise DriverError("pulumi up failed")

    with pytest.raises(DriverError, match="pulumi up failed"):
        owner.run(work, lambda done: pytest.fail("no report after a raise"))
    got = (ui.lines, target.calls, len(scaled))
    assert got == (["note: scaled to 0"], [("close",)], 1), f"expected the scale-down said and close; got {got}"


def test_ctrl_c_while_following_keeps_that_jobs_logs_and_its_nodes(scaled):
    target, ui = Target(), Ui()
    owner = RunController(target, ui)

    def work(owner: RunController) -> None:
        owner.begun += ["scale-up", "follow"]
        raise StepInterrupted("follow", None, "j7")

    assert owner.run(work, lambda done: 0) == 130, "expected exit 130 after Ctrl-C"
    got = (target.calls[0], owner.scale_down_line.startswith("GPU nodes kept: job j7 may"), scaled)
    assert got == (("keep_logs", ("j7",), 1000.0), True, []), f"expected j7's logs kept and its nodes kept, got {got}"


def test_steps_run_in_order_on_the_given_target_each_said_and_recorded(monkeypatch):
    ran: list[tuple[str, object]] = []
    for name in ("verify", "gate"):
        monkeypatch.setitem(
            steps.STEPS, name, lambda t, prior, name=name: ran.append((name, t)) or StepResult(name, "pass", "")
        )
    target, other, ui = Target(), Target(), Ui()
    owner = RunController(target, ui)
    result = owner.steps(["verify", "gate"], other)
    got = (ran, owner.begun, ui.lines, ui.finished, owner.results)
    want = (
        [("verify", other), ("gate", other)],
        ["verify", "gate"],
        ["started: verify", "started: gate"],
        ["verify", "gate"],
        [result],
    )
    assert got == want, f"expected {want}, got {got}"


def test_steps_run_on_the_runs_own_target_by_default(monkeypatch):
    ran: list[object] = []
    monkeypatch.setitem(steps.STEPS, "verify", lambda t, prior: ran.append(t) or StepResult("verify", "pass", ""))
    target = Target()
    RunController(target, Ui()).steps(["verify"])
    assert ran == [target], f"expected verify on the run's target, got {ran}"


def test_the_target_is_closed_even_when_the_report_raises(scaled):
    target = Target()

    def report(done: object) -> int:
        raise DriverError("report failed")

    with pytest.raises(DriverError):
        RunController(target, Ui()).run(lambda owner: None, report)
    assert target.calls == [("close",)], f"expected close after the failed report, got {target.calls}"


def test_ctrl_c_outside_any_step_says_so_and_asks_the_target_with_no_advice():
    target, ui = Target(), Ui()
    report_interrupt(KeyboardInterrupt(), target, ui)
    got = (ui.lines, ui.docs, target.calls)
    want = (["error: interrupted outside any step on stack s: nothing", "note:   destroy"], [], [("interrupted", None)])
    assert got == want, f"expected {want}, got {got}"


# ---- the recoveries -----------------------------------------------------------------------------------------------
def failed_follow(job_id: str = "j1", status: str = "FAILED") -> PipelineResult:
    return result_of(job_state(job_id, status), failed="follow")


def resumed(monkeypatch, outcomes: list[tuple[str, str, tuple[str, ...]]]) -> list[tuple]:
    """RESUMED_STEPS stand in: `follow` shows each attempt's lines through target.on_line and ends as its status."""
    seen: list[tuple] = []

    def step(name, target, prior):
        if name != "follow":
            return StepResult(name, "pass", "")
        job_id, status, lines = outcomes.pop(0)
        for line in lines:
            target.on_line(line)
        seen.append((job_id, target.run.resume))
        data = TrainOutcome(job_id, status, None)
        return StepResult("follow", "pass" if status == "SUCCEEDED" else "fail", status, data=data)

    for name in run_controller.RESUMED_STEPS:
        monkeypatch.setitem(steps.STEPS, name, lambda target, prior, name=name: step(name, target, prior))
    return seen


LOST = Failure(INFRASTRUCTURE, "condition Ready Unknown (NodeStatusUnknown)", "n1", 400)


def test_an_infrastructure_failure_is_resumed_once_and_said_with_its_cost(monkeypatch):
    target = Target()
    target.failures, target.waits = [LOST], [720.0]
    seen = resumed(monkeypatch, [("j1-r1", "SUCCEEDED", ("x", "[train] step 401/1000", "[train] step 402/1000"))])
    owner = RunController(target, Ui())
    got = owner.recovering(failed_follow())
    rec = Recovery(LOST, 12.0, 401, "12 min, $2.40 at 12.00 USD/h")
    notes = [
        "job j1 ended FAILED: infrastructure failure, condition Ready Unknown (NodeStatusUnknown) on node n1: waiting "
        "for its replacement, then resuming",
        f"recovered: {rec.line()} (12 min, $2.40 at 12.00 USD/h)",
    ]
    assert owner.recoveries == [rec], f"expected {rec}, got {owner.recoveries}"
    assert target.notes == notes, f"expected {notes}, got {target.notes}"
    assert (got.ok, got.state.follow.data.job_id, seen) == (True, "j1-r1", [("j1-r1", True)]), got
    calls = [c for c in target.calls if c[0] in ("wait", "set_aside")]
    assert calls == [("wait", 1000.0 + 45 * 60), ("set_aside", 1, False)], f"got {calls}"


def test_the_resumed_attempt_restores_the_line_sink_and_forwards_every_line(monkeypatch):
    target = Target()
    sink = target.on_line
    target.failures, target.waits = [LOST], [60.0]
    resumed(monkeypatch, [("j1-r1", "SUCCEEDED", ("a", "[train] step 5/9"))])
    RunController(target, Ui()).recovering(failed_follow())
    lines = [c[1] for c in target.calls if c[0] == "line"]
    assert (target.on_line is sink, lines) == (True, ["a", "[train] step 5/9"]), f"got {lines}"


def test_a_failure_on_no_named_node_says_so_and_the_attempt_is_priced_by_the_hour(monkeypatch):
    target = Target()
    target.failures, target.waits, target.usd_per_hour = (
        [Failure(INFRASTRUCTURE, "node lost (1 of 2)")],
        [3600.0],
        1000.0,
    )
    resumed(monkeypatch, [("j1-r1", "SUCCEEDED", ())])
    owner = RunController(target, Ui())
    owner.recovering(failed_follow())
    said = "job j1 ended FAILED: infrastructure failure, node lost (1 of 2) on node ?: waiting for its replacement"
    got = (target.notes[0].startswith(said), owner.recoveries[0].cost)
    assert got == (True, "60 min, $1000.00 at 1000.00 USD/h"), (
        f"expected {said!r} and an hour's cost, got {target.notes}"
    )


def test_a_resumed_job_that_shows_no_step_leaves_the_steps_lost_unknown(monkeypatch):
    target = Target()
    target.failures, target.waits = [LOST], [60.0]
    resumed(monkeypatch, [("j1-r1", "SUCCEEDED", ("no steps here",))])
    owner = RunController(target, Ui())
    owner.recovering(failed_follow())
    assert owner.recoveries[0].resumed_at is None, f"expected None, got {owner.recoveries[0]}"


def test_recoveries_stop_at_max_recoveries_saying_what_was_spent(monkeypatch):
    target = Target(max_recoveries=2)
    target.failures, target.waits = [LOST, LOST, LOST], [600.0, 1200.0]
    resumed(monkeypatch, [("j1-r1", "FAILED", ()), ("j1-r2", "FAILED", ())])
    target.usd_per_hour = None
    owner = RunController(target, Ui())
    got = owner.recovering(failed_follow())
    want = (
        "job j1-r2 ended FAILED: infrastructure failure, condition Ready Unknown (NodeStatusUnknown); stopped after 2 "
        "recovery attempt(s), 30 min waiting for nodes (10 min, cost unknown; 20 min, cost unknown) "
        "(--max-recoveries 2)"
    )
    attempts = [c[1] for c in target.calls if c[0] == "set_aside"]
    assert (target.notes[-1], attempts, got.ok) == (want, [1, 2], False), f"expected {want!r}, got {target.notes}"


def test_zero_max_recoveries_retries_nothing_and_says_no_cost(monkeypatch):
    target = Target(max_recoveries=0)
    target.failures = [LOST]
    owner = RunController(target, Ui())
    owner.recovering(failed_follow())
    want = "stopped after 0 recovery attempt(s), 0 min waiting for nodes (no cost) (--max-recoveries 0)"
    assert target.notes[-1].endswith(want), f"expected …{want!r}, got {target.notes}"


def test_recovery_minutes_running_out_stops_saying_so(monkeypatch):
    target = Target(recovery_minutes=1.5)
    target.failures, target.waits = [LOST], [DriverError("1 of 2 GPU nodes healthy")]
    owner = RunController(target, Ui())
    got = owner.recovering(failed_follow())
    want = "1 of 2 GPU nodes healthy; stopped after 0 recovery attempt(s), 0 min waiting for nodes (no cost) "
    assert (target.notes[-1], got.ok) == (want + "(--recovery-minutes 1.5)", False), target.notes


def test_an_application_failure_is_not_retried():
    target = Target()
    target.failures = [Failure(APPLICATION, "a Python exception")]
    owner = RunController(target, Ui())
    failed = failed_follow()
    got = owner.recovering(failed)
    want = "job j1 ended FAILED: application failure, a Python exception; not retried (an application failure "
    assert (got, target.notes) == (failed, [want + "repeats on any node)"]), f"got {target.notes}"


def test_a_job_stopped_at_its_timeout_is_said_so_neither_classified_nor_retried():
    target = Target(job_timeout_s=3600)
    target.failures = [Failure(APPLICATION, "no fault of the cluster seen")]  # what a healthy cluster would tell
    stopped = TrainOutcome("j1", "STOPPED", None, stopped_for_timeout=True)
    failed = result_of(RunState(follow=StepResult("follow", "fail", "", data=stopped)), failed="follow")
    got = RunController(target, Ui()).recovering(failed)
    want = (failed, ["job j1 stopped at --timeout 3600 s: not retried"], [])
    assert (got, target.notes, target.calls) == want, f"expected {want[1]} and nothing asked, got {target.notes}"


def test_a_failure_not_recovered_from_is_kept_as_the_runs_failure():
    target = Target()
    target.failures = [Failure(APPLICATION, "a Python exception", None, 12)]
    owner = RunController(target, Ui())
    owner.recovering(failed_follow())
    assert owner.failure == Failure(APPLICATION, "a Python exception", None, 12), f"got {owner.failure}"


def test_a_failure_recovered_from_is_kept_in_its_recovery_not_as_the_runs_failure(monkeypatch):
    target = Target()
    target.failures, target.waits = [LOST], [60.0]
    resumed(monkeypatch, [("j1-r1", "SUCCEEDED", ("[train] step 401/1000",))])
    owner = RunController(target, Ui())
    owner.recovering(failed_follow())
    got = (owner.failure, [r.failure for r in owner.recoveries])
    assert got == (None, [LOST]), f"expected no run failure and LOST in the recovery, got {got}"


@pytest.mark.parametrize("status", ["RUNNING", "PENDING"])
def test_a_job_the_server_has_not_said_ended_is_not_classified(status):
    target = Target()
    failed = failed_follow(status=status)
    got = RunController(target, Ui()).recovering(failed)
    assert (got, target.calls) == (failed, []), f"expected nothing asked, got {target.calls}"


def test_a_failure_of_another_step_is_not_recovered():
    target = Target()
    failed = result_of(job_state("j1", "FAILED"), failed="check")
    assert RunController(target, Ui()).recovering(failed) is failed and target.calls == [], target.calls


def test_the_local_target_never_recovers(tmp_path):
    failed = failed_follow()
    assert RunController(LocalTarget(tmp_path), Ui()).recovering(failed) is failed, "expected the result as it was"


def test_an_attempts_cost_is_its_hours_at_the_clusters_price():
    priced, unpriced = Target(), Target()
    unpriced.usd_per_hour = None
    got = (attempt_cost(priced, 1.0), attempt_cost(unpriced, 0.25))
    assert got == ("60 min, $12.00 at 12.00 USD/h", "15 min, cost unknown"), f"got {got}"


def test_two_joined_pipelines_keep_every_step_and_the_later_state_over_the_earlier():
    first_gate = StepResult("gate", "pass", "first")
    first = PipelineResult(
        steps=(Timed(first_gate, 1.0),),
        failed_step="follow",
        state=RunState(gate=first_gate, submit=StepResult("submit", "pass", "s1")),
    )
    then_gate = StepResult("gate", "pass", "then")
    then = PipelineResult(steps=(Timed(then_gate, 2.0),), state=RunState(gate=then_gate))
    got = joined(first, then)
    want = ([1.0, 2.0], None, "then", "s1")
    summary = ([t.seconds for t in got.steps], got.failed_step, got.state.gate.summary, got.state.submit.summary)
    assert summary == want, f"expected {want}, got {summary}"


def test_the_json_document_is_emitted_only_in_json_mode():
    ui = Ui(json_mode=False)
    report_interrupt(StepInterrupted("gate", Advice("x", ())), Target(), ui)
    assert ui.docs == [], f"expected no document, got {ui.docs}"
