"""Following a job, call by call (issue 48: automation/ray_head.py's job following under mutation testing): the head
pod's job server reached through short exec calls (`HeadJobs`), what a failed call says, the local SDK client's
answers (`LocalJobs`), and `run_to_end`/`follow_job` over a target's place.

The head pod is tests/support/_ray_jobs.py's job server, which prints what Ray 2.58's job CLI prints
(tests/automation/test_ray_head.py checks it against Ray's own click commands); `Exec` is a `PodExec`
(automation/kube.py) that records where each call went. The local client stands in for
`ray.job_submission.JobSubmissionClient` (Ray 2.58, ray/dashboard/modules/job/sdk.py): ``get_job_info`` returns a
JobInfo whose ``status`` is the JobStatus enum (a str Enum whose ``__str__`` is its value, e.g. "FAILED":
ray/dashboard/modules/job/common.py, as installed) and whose ``message`` may be None; ``get_job_logs`` returns the
whole log as one string.
"""

from __future__ import annotations

import json
import signal
import sys
import weakref
from dataclasses import dataclass, field

import pytest
from _aws_run import SUMMARY
from _ray_jobs import Clock, FakeRayJobs, JobScript

from automation import interrupts, ray_head
from automation.errors import DriverError
from automation.hang import HangBound
from automation.kube import ExecResult
from automation.pipeline import SubmittedJob
from automation.ray_head import (
    FollowEnd,
    HeadJobs,
    JobNotFound,
    JobState,
    LocalJobs,
    LogChunk,
    follow_job,
    outcome_of,
    run_to_end,
    upload_command,
)
from workloads.config import TrainConfig
from workloads.summary import RunSummary

JOB = TrainConfig(preset="tiny", run_id="r1", num_workers=2, summary_json="/tmp/ray-efa-eks/runs/r1/summary.json")
LONG_ERROR = "x" * 400 + "the end of Ray's error"  # an error text longer than any cut the messages make


@dataclass
class Exec:
    """A PodExec over the fake job server: each call's (pod, namespace, first words, timeout) kept; ``fail`` answers
    a command whose first words it names with that ExecResult instead."""

    jobs: FakeRayJobs
    calls: list[tuple[str, str, str, float]] = field(default_factory=list)
    fail: dict[str, ExecResult] = field(default_factory=dict)
    uploads: list[tuple[list[str], int]] = field(default_factory=list)  # (command, characters on stdin)

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        what = "logs" if command[:2] == ["sh", "-c"] and "ray job logs" in command[2] else " ".join(command[:3])
        self.calls.append((pod, namespace, what, timeout_s))
        if stdin is not None:
            self.uploads.append((list(command), len(stdin)))
        if failed := next((r for words, r in self.fail.items() if what.startswith(words)), None):
            return failed
        if command[0] == "cat":
            return ExecResult(0, json.dumps(SUMMARY), "")
        answer = self.jobs.answer(pod, list(command))
        return answer if answer is not None else ExecResult(0, "", "")  # the upload's `sh -c ... tar`


def head(ends: str = "SUCCEEDED", **fail: ExecResult) -> tuple[HeadJobs, Exec, Clock]:
    clock = Clock()
    jobs = FakeRayJobs(clock, lambda job_id: JobScript(("[train] step 1/1 loss 7.9",), run_s=10, ends=ends))
    pod_exec = Exec(jobs, fail={k.replace("_", " "): v for k, v in fail.items()})
    return HeadJobs(pod_exec, "ray-efa-head-abcde", "ray", call_s=45), pod_exec, clock


# ---- where each call goes ------------------------------------------------------------------------------------
def test_every_job_server_call_goes_to_the_head_pod_with_the_call_limit():
    jobs, pod_exec, clock = head()
    jobs.submit(JOB, {}, "r1")
    clock.t = 1000
    jobs.job_status("r1"), jobs.job_logs("r1", 0), jobs.stop_job("r1")
    got = sorted({(pod, ns, t) for pod, ns, what, t in pod_exec.calls if what.startswith(("ray job", "logs"))})
    assert got == [("ray-efa-head-abcde", "ray", 45)], f"expected every call to the head pod in 45 s, got {got}"


def test_the_summary_is_read_in_the_head_pod_within_a_minute():
    jobs, pod_exec, _ = head()
    summary = jobs.summary(JOB.summary_json)
    got = (summary.run_id if summary else None, [c for c in pod_exec.calls if c[2].startswith("cat")])
    want = ("r1", [("ray-efa-head-abcde", "ray", f"cat {JOB.summary_json}", 60)])
    assert got == want, f"expected the summary read by `cat` in the head pod in 60 s: {want}, got {got}"


def test_a_summary_that_cannot_be_read_is_none():
    jobs, _, _ = head(cat=ExecResult(1, "", "cat: no such file"))
    got = jobs.summary(JOB.summary_json)
    assert got is None, f"expected no summary when `cat` exits 1, got {got}"


# ---- what a failed call says ---------------------------------------------------------------------------------
def test_a_job_the_server_does_not_know_is_job_not_found_with_exit_2_and_the_end_of_rays_error():
    jobs, _, _ = head()
    with pytest.raises(JobNotFound) as e:
        jobs.job_status("nope")
    said = str(e.value)
    got = (e.value.exit_code, "'nope'" in said, said.endswith("does not exist."), len(said) < 300)
    assert got == (2, True, True, True), f"expected exit 2 naming the job and Ray's last words, got {got}: {said}"


def test_a_failed_stop_names_the_command_the_job_the_exit_status_and_the_last_300_characters():
    jobs, _, _ = head(ray_job_stop=ExecResult(7, "", LONG_ERROR))
    with pytest.raises(DriverError) as e:
        jobs.stop_job("r1")
    want = f"`ray job stop r1` in the head pod failed (rc 7): {LONG_ERROR[-300:]}"
    assert (str(e.value), e.value.exit_code) == (want, 1), f"expected {want!r} (exit 1), got {e.value!r}"


def test_an_unknown_job_keeps_the_last_200_characters_of_rays_error():
    jobs, _, _ = head(ray_job_status=ExecResult(1, "", LONG_ERROR + " Job x does not exist."))
    with pytest.raises(JobNotFound) as e:
        jobs.job_status("x")
    want = f"the Ray job server has no job 'x': {(LONG_ERROR + ' Job x does not exist.')[-200:]}"
    assert str(e.value) == want, f"expected {want!r}, got {str(e.value)!r}"


def test_a_submit_whose_status_cannot_be_asked_says_why_and_the_check_for_that_submission_id():
    dropped = DriverError("the exec stream dropped")
    jobs, pod_exec, _ = head()

    def exec_(pod, namespace, command, **kw):
        if command[:3] in (["ray", "job", "submit"], ["ray", "job", "status"]):
            raise dropped
        return pod_exec(pod, namespace, command, **kw)

    jobs = HeadJobs(exec_, jobs.pod, jobs.namespace)
    with pytest.raises(DriverError) as e:
        jobs.submit(JOB, {}, "r1-resumed-x")
    said = str(e.value)
    want = [
        "job r1-resumed-x may be queued or not",
        "`ray job submit` lost its exec stream, then `ray job status` got no answer: the exec stream dropped",
        "kubectl -n ray exec ray-efa-head-abcde -- ray job status --address http://127.0.0.1:8265 --log-style record "
        "r1-resumed-x",
    ]
    assert [w in said for w in want] == [True] * 3, f"expected {want} in: {said}"


def test_a_submit_answer_without_the_submitted_line_is_no_submit():
    jobs, _, _ = head(ray_job_submit=ExecResult(0, "Job submission server address: x\n", ""))
    with pytest.raises(DriverError) as e:
        jobs.submit(JOB, {}, "r1")
    assert "did not submit (rc 0)" in str(e.value), f"expected a submit without its line refused, got {e.value}"


# ---- `attach` without a job id -----------------------------------------------------------------------------
def test_the_newest_job_is_the_newest_source_folder_in_the_head_pod():
    calls = []

    def exec_(pod, namespace, command, **kw):
        calls.append((pod, namespace, command, kw.get("timeout_s")))
        return ExecResult(0, "r1-resumed-b\n", "")

    got = HeadJobs(exec_, "ray-efa-head-abcde", "ray").newest_job()
    ls = ["sh", "-c", "ls -1t /tmp/ray-efa-eks/src 2>/dev/null | head -n 1"]
    assert (got, calls) == ("r1-resumed-b", [("ray-efa-head-abcde", "ray", ls, 60)]), (got, calls)


@pytest.mark.parametrize("answer", [ExecResult(0, " \n", ""), ExecResult(2, "r1\n", "ls: error")], ids=["none", "rc2"])
def test_no_source_folder_in_the_head_pod_asks_for_the_job_id_with_exit_2(answer):
    jobs = HeadJobs(lambda pod, ns, cmd, **kw: answer, "ray-efa-head-abcde", "ray")
    with pytest.raises(DriverError) as e:
        jobs.newest_job()
    want = "no job was submitted to ray/ray-efa-head-abcde (no /tmp/ray-efa-eks/src/*): pass the job id"
    assert (str(e.value), e.value.exit_code) == (want, 2), f"expected {want!r} (exit 2), got {e.value!r}"


# ---- the local job server, through Ray's SDK client --------------------------------------------------------
class Status:
    """ray.job_submission.JobStatus: a str Enum whose str() is its value (the module docstring's source)."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


@dataclass
class Client:
    status: str = "FAILED"
    message: str | None = None
    log: str = "step a 1\nstep b 2\nstep c 3\nstep d 4"
    asked: list[str] = field(default_factory=list)

    def get_job_info(self, job_id):
        self.asked.append(job_id)
        return type("Info", (), {"status": Status(self.status), "message": self.message})()

    def get_job_logs(self, job_id):
        self.asked.append(job_id)
        return self.log


@pytest.mark.parametrize("message, said", [(None, ""), ("boom", "boom")])
def test_the_local_job_state_is_the_enums_name_and_its_message(message, said):
    client = Client(message=message)
    got = (LocalJobs(client).job_status("r7"), client.asked)
    assert got == (JobState("FAILED", said), ["r7"]), f"expected FAILED {said!r} of r7, got {got}"


@pytest.mark.parametrize(
    "offset, final, want",
    [(0, False, LogChunk(("step a 1", "step b 2", "step c 3"), 3)), (2, True, LogChunk(("step c 3", "step d 4"), 4))],
)
def test_the_local_log_is_read_from_its_line_offset(offset, final, want):
    client = Client()
    got = (LocalJobs(client).job_logs("r7", offset, final=final), client.asked)
    assert got == (want, ["r7"]), f"expected {want} of r7 from line {offset}, got {got}"


# ---- a target's place ----------------------------------------------------------------------------------------
@dataclass
class Place:
    """A FollowPlace (automation/ray_head.py) that is its own job server, whose job ends ``ends`` at ``run_s``."""

    ends: str = "SUCCEEDED"
    run_s: float = 100
    job_timeout_s: float | None = None
    t: float = 0
    stops: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    submitted: list[TrainConfig] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    poll_s: float = 5
    hang_bound: HangBound | None = None
    sleeps: list[float] = field(default_factory=list)

    def on_line(self, line):
        self.lines.append(line)

    def jobs(self):
        return self

    def job_status(self, job_id):
        self.asked.append(job_id)
        if self.stops:
            return JobState("STOPPED")
        return JobState(self.ends if self.t >= self.run_s else "RUNNING")

    def job_logs(self, job_id, offset, final=False):
        return LogChunk((f"line at {self.t:g}",), offset + 1)

    def stop_job(self, job_id):
        self.stops.append(job_id)

    def hang_evidence(self):
        return []

    def note(self, text):
        self.notes.append(text)

    def clock(self):
        return self.t

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.t += seconds

    def submit_job(self, job):
        self.submitted.append(job)
        return SubmittedJob("raysubmit_7", job)

    def summary(self, path):
        self.summaries.append(path)
        return None


def test_follow_job_stops_the_job_at_the_targets_timeout():
    place = Place(run_s=1000, job_timeout_s=20)
    end = follow_job(place, "r1")
    got = (end.state.status, end.stopped_for_timeout, place.stops)
    assert got == ("STOPPED", True, ["r1"]), f"expected r1 stopped for --timeout 20, got {got}"


@pytest.mark.parametrize("ends, summaries", [("SUCCEEDED", [JOB.summary_json]), ("FAILED", []), ("STOPPED", [])])
def test_run_to_end_follows_the_submitted_job_and_reads_a_summary_only_after_success(ends, summaries):
    place = Place(ends=ends)
    out = run_to_end(place, JOB)
    got = (out.job_id, out.status, place.summaries, place.lines[-1], place.t)
    want = ("r1", ends, summaries, "line at 100", 100)
    assert got == want, f"expected the job followed to {ends} at 100 s: {want}, got {got}"


def test_the_outcome_keeps_the_hang_diagnosis():
    hang = {"late": "no step line for 600 s", "ranks": []}
    out = outcome_of(FollowEnd(JobState("STOPPED"), ("x",), hang=hang), JOB, None)
    assert (out.status, out.hang, out.log_tail) == ("STOPPED", hang, ("x",)), out


def test_the_outcome_says_the_job_was_stopped_at_its_timeout():
    out = outcome_of(FollowEnd(JobState("STOPPED"), (), stopped_for_timeout=True), JOB, None)
    assert out.stopped_for_timeout, f"expected the outcome to say --timeout stopped it, got {out}"


def test_follow_job_says_its_notes_through_the_target():
    place = Place(run_s=1000, job_timeout_s=20)
    follow_job(place, "r1")
    assert place.notes == ["job r1 has run 20 s, past --timeout 20: `ray job stop`"], place.notes


def test_follow_job_polls_at_the_targets_interval():
    place = Place(run_s=21, poll_s=7)
    follow_job(place, "r1")
    assert place.sleeps == [7, 7, 7], f"expected 3 polls 7 s apart before the end at 21 s, got {place.sleeps}"


def test_follow_job_passes_the_lines_to_the_callers_callback_instead_of_the_targets():
    place, mine = Place(run_s=10), []
    follow_job(place, "r1", on_line=mine.append)
    assert (mine, place.lines) == (["line at 0", "line at 5", "line at 10"], []), (mine, place.lines)


def test_follow_job_diagnoses_a_hung_job_with_why_it_is_late():
    place = Place(run_s=100_000, hang_bound=HangBound())  # no step line ever: past the first step's bound
    end = follow_job(place, "r1")
    late = str((end.hang or {}).get("late"))
    assert late.startswith("no first step line 3600 s after the job began RUNNING"), f"got {end.hang}"


# ---- following a job to its end, on a fake clock ------------------------------------------------------------------
@dataclass
class Server:
    """A job server (the place's ``jobs()``) whose job writes line i at second i + 1 for ``lines`` lines and then
    ends ``ends``; every call between ``down_from`` and ``down_to`` (and from ``gone_at`` on) fails as a dropped exec
    stream."""

    lines: int = 30
    ends: str = "SUCCEEDED"
    down: list[tuple[float, float]] = field(default_factory=list)
    t: float = 0.0
    stop_takes_s: float = 0.0  # `ray job stop --no-wait` returns at once; the job reaches STOPPED this much later
    stopped_at: float | None = None
    calls: list[tuple[str, float, object]] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def _answering(self, what, arg):
        self.calls.append((what, self.t, arg))
        if any(a <= self.t < b for a, b in self.down):
            raise DriverError(f"the exec stream of `ray job {what}` dropped")

    def job_status(self, job_id):
        self._answering("status", job_id)
        if self.stopped_at is not None and self.t >= self.stopped_at + self.stop_takes_s:
            return JobState("STOPPED")
        return JobState(self.ends if self.t >= self.lines else "RUNNING")

    def job_logs(self, job_id, offset, final=False):
        self._answering("logs", (offset, final))
        assert job_id == "r1", f"logs of {job_id!r}"
        written = [f"[train] line {i}" for i in range(min(self.lines, int(self.t)))]
        return LogChunk(tuple(written[offset:]), len(written))

    def stop_job(self, job_id):
        self._answering("stop", job_id)
        self.stopped_at = self.t if self.stopped_at is None else self.stopped_at

    def clock(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


@dataclass
class OnServer:
    """A FollowPlace (automation/ray_head.py) whose job server is ``server``, on its clock; reading the workers'
    evidence of a hang is recorded among the server's calls."""

    server: Server
    poll_s: float
    job_timeout_s: float | None = None
    hang_bound: HangBound | None = None
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def jobs(self):
        return self.server

    def on_line(self, line):
        self.lines.append(line)

    def note(self, text):
        self.notes.append(text)

    def clock(self):
        return self.server.t

    def sleep(self, s):
        self.server.sleep(s)

    def hang_evidence(self):
        self.server.calls.append(("evidence", self.server.t, None))
        return []

    def submit_job(self, job):
        raise AssertionError("following a job submits none")


def follow(server: Server, poll_s: float, timeout_s=None, hang=None) -> tuple[FollowEnd, list[str], list[str]]:
    place = OnServer(server, poll_s, timeout_s, hang)
    return follow_job(place, "r1"), place.lines, place.notes


def test_each_line_is_passed_once_in_order_and_only_the_read_after_the_end_is_final():
    server = Server(lines=30)
    end, lines, _ = follow(server, poll_s=5)
    reads = [arg for what, _, arg in server.calls if what == "logs"]
    got = (end.state, lines, reads)
    want = (
        JobState("SUCCEEDED"),
        [f"[train] line {i}" for i in range(30)],
        [(0, False)] + [(5 * i, False) for i in range(5)] + [(25, True)],
    )
    assert got == want, f"expected every line once, offsets 0, 0, 5, ... and the last read final: {want}, got {got}"


def test_the_server_is_asked_every_poll_interval():
    server = Server(lines=30)
    follow(server, poll_s=7)
    assert server.sleeps == [7] * 5, f"expected 5 sleeps of 7 s before the end at 35 s, got {server.sleeps}"


def test_the_tail_is_the_last_200_lines():
    server = Server(lines=250)
    end, lines, _ = follow(server, poll_s=50)
    assert list(end.tail) == lines[-200:] and len(lines) == 250, f"expected the last 200 of 250, got {len(end.tail)}"


@pytest.mark.parametrize("timeout_s, stops", [(20, [20.0]), (29.9, [30.0]), (40, [])])
def test_the_timeout_stops_the_job_once_when_the_follow_has_lasted_that_long(timeout_s, stops):
    server = Server(lines=40)
    end, _, notes = follow(server, poll_s=5, timeout_s=timeout_s)
    got = ([t for what, t, _ in server.calls if what == "stop"], end.state.status, end.stopped_for_timeout)
    want = (stops, "STOPPED" if stops else "SUCCEEDED", bool(stops))
    assert got == want, f"--timeout {timeout_s} on a 40 s job: expected (stop times, end, stopped) {want}, got {got}"


def test_a_lost_job_server_is_asked_again_with_doubling_waits_up_to_a_minute_and_said_once():
    server = Server(lines=600, down=[(10, 250)])
    end, lines, notes = follow(server, poll_s=5)
    waits = [s for s in server.sleeps if s != 5]
    said = [n for n in notes if "lost the connection" in n]
    got = (waits, len(said), end.state.status, len(lines))
    assert got == ([2, 4, 8, 16, 32, 60, 60, 60], 1, "SUCCEEDED", 600), f"expected backoff 2..60, one note: {got}"


def test_the_follow_gives_up_after_the_give_up_time_without_an_answer_and_says_the_job_may_run(monkeypatch):
    monkeypatch.setattr(ray_head, "GIVE_UP_S", 300)
    server = Server(lines=10_000, down=[(100, 10_000)])
    with pytest.raises(DriverError) as e:
        follow(server, poll_s=5)
    got = (server.t, str(e.value))
    want = (100 + 2 + 4 + 8 + 16 + 32 + 60 + 60 + 60 + 60, "no answer from the Ray job server for 302 s")
    assert (got[0], got[1].startswith(want[1]), got[1].endswith("the job itself may still run")) == (
        want[0],
        True,
        True,
    ), got


def test_a_second_outage_is_timed_from_its_own_start(monkeypatch):
    monkeypatch.setattr(ray_head, "GIVE_UP_S", 300)
    server = Server(lines=2000, down=[(100, 350), (500, 750)])
    end, _, _ = follow(server, poll_s=5)
    assert end.state.status == "SUCCEEDED", f"expected two outages of 250 s each under a 300 s limit to pass: {end}"


def test_a_job_the_server_does_not_know_ends_the_follow_at_once():
    class Unknown(Server):
        def job_status(self, job_id):
            raise JobNotFound("no job r1")

    server = Unknown()
    with pytest.raises(JobNotFound):
        follow(server, poll_s=5)
    assert server.sleeps == [], f"expected no retry of an unknown job, got sleeps {server.sleeps}"


def test_a_hung_job_is_diagnosed_then_stopped_once_and_ends_with_its_diagnosis_not_as_a_timeout():
    server = Server(lines=5_000)
    server.job_logs = lambda job_id, offset, final=False: LogChunk(  # one step line, then nothing
        ("[train] step 1/100 loss 9 step_time 1000 ms",) if offset == 0 else (), 1
    )
    end, _, notes = follow(server, poll_s=60, timeout_s=100_000, hang=HangBound(10, 600))
    read, stops = ([t for what, t, _ in server.calls if what == w] for w in ("evidence", "stop"))
    late = str((end.hang or {}).get("late"))
    got = (read, stops, end.state.status, late[:33], end.stopped_for_timeout)
    want = ([600.0], [600.0], "STOPPED", "no step line for 600 s after step", False)
    assert got == want, f"expected one diagnosis and stop at 600 s, got {got}"


# ---- the survivors of the second mutmut run -------------------------------------------------------------------
def test_the_upload_reads_exactly_the_payload_in_five_minutes():
    jobs, pod_exec, _ = head()
    jobs.submit(JOB, {}, "r1")
    (command, sent), *_ = pod_exec.uploads
    got = (command, [t for _, _, what, t in pod_exec.calls if what.startswith("sh -c rm")])
    want = (upload_command("/tmp/ray-efa-eks/src/r1", sent), [300])
    assert got == want, f"expected the upload of {sent} characters within 300 s: {want}, got {got}"


def test_the_upload_goes_into_the_head_pod():
    jobs, pod_exec, _ = head()
    jobs.submit(JOB, {}, "r1")
    got = {(pod, ns) for pod, ns, what, _ in pod_exec.calls if what.startswith("sh -c rm")}
    assert got == {("ray-efa-head-abcde", "ray")}, f"expected every upload into ray/ray-efa-head-abcde, got {got}"


def test_a_failed_upload_names_what_where_the_exit_status_and_the_last_300_characters(tmp_path):
    jobs, pod_exec, _ = head()
    pod_exec.fail["sh -c rm"] = ExecResult(3, "", LONG_ERROR)  # the upload's `sh -c "rm -rf ... && tar ..."`
    with pytest.raises(DriverError) as e:
        jobs.submit(JOB, {}, "r1")
    want = f"copying workloads/ into ray/ray-efa-head-abcde failed (rc 3): {LONG_ERROR[-300:]}"
    assert str(e.value) == want, f"expected {want!r}, got {str(e.value)!r}"


def test_a_failed_upload_of_the_jobs_modules_names_each_folder(tmp_path):
    folders = [tmp_path / "torchao", tmp_path / "extra"]
    for f in folders:
        f.mkdir()
        (f / "__init__.py").write_text("")
    jobs, pod_exec, _ = head()
    uploads = iter([ExecResult(0, "", ""), ExecResult(1, "", "disk full")])
    jobs = HeadJobs(
        lambda pod, ns, cmd, **kw: next(uploads) if kw.get("stdin") else pod_exec(pod, ns, cmd, **kw), jobs.pod, "ray"
    )
    with pytest.raises(DriverError) as e:
        jobs.submit(JOB, {}, "r1", folders)
    want = "copying torchao/, extra/ into ray/ray-efa-head-abcde failed (rc 1): disk full"
    assert str(e.value) == want, f"expected {want!r}, got {str(e.value)!r}"


@pytest.mark.parametrize(
    "what, call", [("logs", lambda j: j.job_logs("r1", 0)), ("status", lambda j: j.job_status("r1"))]
)
def test_a_failed_read_names_the_command_the_job_the_exit_status_and_the_last_300_characters(what, call):
    failed = ExecResult(5, "", LONG_ERROR)
    jobs, _, _ = head(**{"logs" if what == "logs" else "ray_job_status": failed})
    with pytest.raises(DriverError) as e:
        call(jobs)
    want = f"`ray job {what} r1` in the head pod failed (rc 5): {LONG_ERROR[-300:]}"
    assert str(e.value) == want, f"expected {want!r}, got {str(e.value)!r}"


@pytest.mark.parametrize(
    "answer",
    [ExecResult(0, "Job submission server address: x\n", ""), ExecResult(1, "Status for job 'r1': RUNNING\n", "")],
    ids=["no-status-line", "failed-exit"],
)
def test_a_status_call_without_a_status_line_or_with_a_failed_exit_is_no_answer(answer):
    jobs, _, _ = head(ray_job_status=answer)
    with pytest.raises(DriverError) as e:
        jobs.job_status("r1")
    assert "`ray job status r1` in the head pod failed" in str(e.value), f"expected no answer, got {e.value!r}"


def test_a_later_log_line_that_looks_like_a_ray_record_is_kept_whole():
    line = "2026-12-06 05:21:51,924\tINFO cli.py:1 -- printed by the job"
    jobs, _, _ = head(logs=ExecResult(0, line + "\n", ""))
    got = jobs.job_logs("r1", 3)
    assert got == LogChunk((line,), 4), f"expected the job's own line kept from offset 3, got {got}"


def test_the_final_read_keeps_a_last_line_without_its_newline():
    jobs, _, _ = head(logs=ExecResult(0, "a\nthe last line", ""))
    got = jobs.job_logs("r1", 2, final=True)
    assert got == LogChunk(("a", "the last line"), 4), f"expected both lines of the ended job, got {got}"


def test_a_submit_answer_without_the_submitted_line_says_rays_last_300_characters():
    jobs, _, _ = head(ray_job_submit=ExecResult(0, LONG_ERROR, ""))
    with pytest.raises(DriverError) as e:
        jobs.submit(JOB, {}, "r1")
    want = f"`ray job submit` in ray/ray-efa-head-abcde did not submit (rc 0): {LONG_ERROR[-300:]}"
    assert str(e.value) == want, f"expected {want!r}, got {str(e.value)!r}"


def test_a_submit_that_loses_its_stream_twice_names_the_submission_id_and_says_so():
    jobs, pod_exec, _ = head()

    def exec_(pod, namespace, command, **kw):
        if command[:3] == ["ray", "job", "submit"]:
            raise DriverError("dropped")
        return pod_exec(pod, namespace, command, **kw)

    with pytest.raises(DriverError) as e:
        HeadJobs(exec_, jobs.pod, jobs.namespace).submit(JOB, {}, "r1-resumed-x")
    said = str(e.value)
    want = [
        "job r1-resumed-x may be queued or not (`ray job submit` lost its exec stream twice: dropped)",
        "status --address http://127.0.0.1:8265 --log-style record r1-resumed-x",
    ]
    assert [w in said for w in want] == [True, True], f"expected {want} in: {said}"


def test_a_job_without_a_hang_bound_is_never_stopped_for_silence():
    server = Server(lines=5)
    server.job_logs = lambda job_id, offset, final=False: LogChunk(
        ("[train] step 1/9 loss 9 step_time 10 ms",) if offset == 0 else (), 1
    )
    server.job_status = lambda job_id: JobState("SUCCEEDED" if server.t >= 8000 else "RUNNING")
    end, _, _ = follow(server, poll_s=100)
    assert (end.state.status, end.hang) == ("SUCCEEDED", None), f"expected no hang without a bound, got {end}"


def test_every_call_of_the_follow_names_the_followed_job():
    server = Server(lines=40, down=[(3, 4)], t=1.0)
    follow(server, poll_s=5, timeout_s=10)
    asked = {(what, arg if what != "logs" else "r1") for what, _, arg in server.calls}
    assert {job for _, job in asked} == {"r1"}, f"expected every call about r1, got {sorted(asked)}"


def test_a_hung_job_is_said_with_why_it_is_late():
    server = Server(lines=5_000)
    server.job_logs = lambda job_id, offset, final=False: LogChunk(
        ("[train] step 1/100 loss 9 step_time 1000 ms",) if offset == 0 else (), 1
    )
    _, _, notes = follow(server, poll_s=60, hang=HangBound(10, 600))
    assert notes[:1] == [
        "job r1 looks hung: no step line for 600 s after step 1, past max(10 × 1.0 s × 1 steps a line, 600 s) = 600 s; "
        "reading the workers' stacks and NCCL logs, then `ray job stop`"
    ], notes


def test_a_hung_job_whose_stop_takes_several_polls_is_diagnosed_and_stopped_once():
    server = Server(lines=5_000, stop_takes_s=30)
    server.job_logs = lambda job_id, offset, final=False: LogChunk(
        ("[train] step 1/100 loss 9 step_time 1000 ms",) if offset == 0 else (), 1
    )
    end, _, _ = follow(server, poll_s=5, hang=HangBound(10, 600))
    read, stops = ([t for what, t, _ in server.calls if what == w] for w in ("evidence", "stop"))
    assert (read, stops, end.state.status) == ([600.0], [600.0], "STOPPED"), (read, stops, end)


def test_the_timeout_is_counted_from_the_start_of_the_follow_not_from_zero():
    server = Server(lines=2_000, t=1000.0)
    _, _, notes = follow(server, poll_s=5, timeout_s=20)
    stops = [t for what, t, _ in server.calls if what == "stop"]
    assert (stops, notes) == ([1020.0], ["job r1 has run 20 s, past --timeout 20: `ray job stop`"]), (stops, notes)


def test_the_follow_gives_up_exactly_at_the_give_up_time(monkeypatch):
    monkeypatch.setattr(ray_head, "GIVE_UP_S", 302)
    server = Server(lines=10_000, down=[(100, 10_000)])
    with pytest.raises(DriverError):
        follow(server, poll_s=5)
    assert server.t == 402, f"expected to give up at 402 s, 302 s after the outage began at 100 s, at {server.t}"


def test_the_outcome_carries_the_summary_and_the_job():
    summary = RunSummary.parse(json.dumps(SUMMARY))
    out = outcome_of(FollowEnd(JobState("SUCCEEDED"), ()), JOB, summary)
    assert (out.summary, out.job) == (summary, JOB), out


def test_run_to_end_submits_the_job_and_follows_the_job_id_the_target_gave():
    place = Place()
    run_to_end(place, JOB)
    assert (place.submitted, set(place.asked)) == ([JOB], {"raysubmit_7"}), (place.submitted, place.asked)


def test_a_local_read_without_final_waits_for_the_last_lines_newline():
    got = LocalJobs(Client(log="done 1\nbeing written")).job_logs("r7", 0)
    assert got == LogChunk(("done 1",), 1), f"expected the line still being written held back, got {got}"


def test_the_head_pods_log_is_read_in_pieces_each_line_once_without_rays_header():
    jobs, _, clock = head()
    script = JobScript(tuple(f"[train] line {i}" for i in range(6)), run_s=60, pending_s=0)
    jobs.pod_exec.jobs.script = lambda job_id: script
    jobs.submit(JOB, {}, "r1")
    seen, offset = [], 0
    for t in (25, 45, 70):
        clock.t = t
        chunk = jobs.job_logs("r1", offset, final=t >= 60)
        seen, offset = seen + list(chunk.lines), chunk.next_offset
    assert (seen, offset) == (list(script.lines), 6), f"expected the 6 lines once each in order, got {seen}"


def test_the_submit_sends_the_uploaded_folder_the_env_and_the_submission_id():
    jobs, pod_exec, _ = head()
    jobs.submit(JOB, {"NCCL_DEBUG": "INFO"}, "r1-resumed-x")
    request = pod_exec.jobs.jobs["r1-resumed-x"].request
    got = (
        request.option("--working-dir"),
        request.option("--submission-id"),
        pod_exec.jobs.runtime_env("r1-resumed-x"),
    )
    want = ("/tmp/ray-efa-eks/src/r1-resumed-x", "r1-resumed-x", {"env_vars": {"NCCL_DEBUG": "INFO"}})
    assert got == want, f"expected {want}, got {got}"


def test_a_resubmit_after_a_dropped_stream_goes_to_the_head_pod_with_the_call_limit():
    jobs, pod_exec, _ = head()
    drops = iter([True])

    def exec_(pod, namespace, command, **kw):
        if command[:3] == ["ray", "job", "submit"] and next(drops, False):
            raise DriverError("dropped before the server had it")
        return pod_exec(pod, namespace, command, **kw)

    got = HeadJobs(exec_, jobs.pod, jobs.namespace, call_s=45).submit(JOB, {}, "r1")
    submits = [c for c in pod_exec.calls if c[2] == "ray job submit"]
    assert (got, submits) == ("r1", [("ray-efa-head-abcde", "ray", "ray job submit", 45)]), (got, submits)


# ---- a Ctrl-C that a finalizer swallowed -------------------------------------------------------------------------
# CPython runs a weakref.finalize callback from the garbage collector and reports an exception raised in it through
# sys.unraisablehook instead of raising it ("Exception ignored in: <finalize object>"; the weakref docs). A SIGINT
# whose handler runs there, as one did while urllib3's pool finalizer ran, is lost unless the follow notices.
@dataclass
class SwallowsCtrlC(Place):
    """A Place on which a SIGINT arrives inside a finalizer when the server is asked at ``at_s``."""

    at_s: float = 10

    def job_status(self, job_id):
        if self.t == self.at_s:
            weakref.finalize(type("Pool", (), {})(), signal.raise_signal, signal.SIGINT)  # collected at once
        return super().job_status(job_id)


@pytest.fixture
def counted_sigint(monkeypatch):
    """SIGINT through the driver's handler (automation/cli.py installs it), and what the finalizers swallowed."""
    swallowed: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_value))
    previous = signal.signal(signal.SIGINT, interrupts.on_signal)
    yield swallowed
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_a_finalizer_swallowed_ends_the_follow_at_the_next_poll(counted_sigint):
    place = SwallowsCtrlC(run_s=100, at_s=10)
    with pytest.raises(KeyboardInterrupt):
        follow_job(place, "r1")
    assert [type(e) for e in counted_sigint] == [KeyboardInterrupt], f"no Ctrl-C was swallowed: {counted_sigint}"
    assert place.t == 15, f"the follow went on to {place.t} s instead of stopping at the poll after 10 s"


def test_a_ctrl_c_that_was_raised_before_the_follow_does_not_end_it(counted_sigint):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)  # reached its caller: the count moved on before this follow began
    end = follow_job(Place(run_s=20), "r1")
    assert end.state.status == "SUCCEEDED", end


def test_a_hung_job_is_stopped_by_its_own_id():
    server = Server(lines=5_000)
    server.job_logs = lambda job_id, offset, final=False: LogChunk(
        ("[train] step 1/100 loss 9 step_time 1000 ms",) if offset == 0 else (), 1
    )
    follow(server, poll_s=60, hang=HangBound(10, 600))
    stops = [job for what, _, job in server.calls if what == "stop"]
    assert stops == ["r1"], f"expected one `ray job stop r1`, got {stops}"
