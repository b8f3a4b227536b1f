"""Following a job, call by call (issue 48: automation/ray_head.py's job following under mutation testing): the head
pod's job server reached through short exec calls (`HeadJobs`), what a failed call says, the local SDK client's
answers (`LocalJobs`), and `run_to_end`/`follow_on` over a target's place.

The head pod is tests/support/_ray_jobs.py's job server, which prints what Ray 2.58's job CLI prints
(tests/automation/test_ray_head.py checks it against Ray's own click commands); `Exec` is a `PodExec`
(automation/kube.py) that records where each call went. The local client stands in for
`ray.job_submission.JobSubmissionClient` (Ray 2.58, ray/dashboard/modules/job/sdk.py): ``get_job_info`` returns a
JobInfo whose ``status`` is the JobStatus enum (its ``str`` is ``JobStatus.<NAME>``) and whose ``message`` may be
None; ``get_job_logs`` returns the whole log as one string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from _aws_run import SUMMARY
from _ray_jobs import Clock, FakeRayJobs, JobScript

from automation.errors import DriverError
from automation.kube import ExecResult
from automation.pipeline import SubmittedJob
from automation.ray_head import (
    FollowEnd,
    HeadJobs,
    JobNotFound,
    JobState,
    LocalJobs,
    LogChunk,
    follow_on,
    outcome_of,
    run_to_end,
)
from workloads.config import TrainConfig

JOB = TrainConfig(preset="tiny", run_id="r1", num_workers=2, summary_json="/tmp/ray-efa-eks/runs/r1/summary.json")
LONG_ERROR = "x" * 400 + "the end of Ray's error"  # an error text longer than any cut the messages make


@dataclass
class Exec:
    """A PodExec over the fake job server: each call's (pod, namespace, first words, timeout) kept; ``fail`` answers
    a command whose first words it names with that ExecResult instead."""

    jobs: FakeRayJobs
    calls: list[tuple[str, str, str, float]] = field(default_factory=list)
    fail: dict[str, ExecResult] = field(default_factory=dict)

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        what = "logs" if command[:2] == ["sh", "-c"] and "ray job logs" in command[2] else " ".join(command[:3])
        self.calls.append((pod, namespace, what, timeout_s))
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
    summary = jobs.summary(JOB)
    got = (summary.run_id if summary else None, [c for c in pod_exec.calls if c[2].startswith("cat")])
    want = ("r1", [("ray-efa-head-abcde", "ray", f"cat {JOB.summary_json}", 60)])
    assert got == want, f"expected the summary read by `cat` in the head pod in 60 s: {want}, got {got}"


def test_a_summary_that_cannot_be_read_is_none():
    jobs, _, _ = head(cat=ExecResult(1, "", "cat: no such file"))
    got = jobs.summary(JOB)
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
    """ray.job_submission.JobStatus is a str Enum whose str() is `JobStatus.<NAME>`."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"JobStatus.{self.name}"


@dataclass
class Client:
    status: str = "FAILED"
    message: str | None = None
    log: str = "a\nb\nc\nd"
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
    "offset, final, want", [(0, False, LogChunk(("a", "b", "c"), 3)), (2, True, LogChunk(("c", "d"), 4))]
)
def test_the_local_log_is_read_from_its_line_offset(offset, final, want):
    client = Client()
    got = (LocalJobs(client).job_logs("r7", offset, final=final), client.asked)
    assert got == (want, ["r7"]), f"expected {want} of r7 from line {offset}, got {got}"


# ---- a target's place ----------------------------------------------------------------------------------------
@dataclass
class Place:
    """A FollowPlace (automation/ray_head.py): a job server whose job ends ``ends`` at ``run_s``."""

    ends: str = "SUCCEEDED"
    run_s: float = 100
    job_timeout_s: float | None = None
    t: float = 0
    stops: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    poll_s: float = 5
    hang_bound = None

    def on_line(self, line):
        self.lines.append(line)

    def job_status(self, job_id):
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
        self.t += seconds

    def submit_job(self, job):
        return SubmittedJob("raysubmit_7", job)

    def job_summary(self, job):
        self.summaries.append(job.run_id)
        return None


def test_follow_on_stops_the_job_at_the_targets_timeout():
    place = Place(run_s=1000, job_timeout_s=20)
    end = follow_on(place, "r1")
    got = (end.state.status, end.stopped_for_timeout, place.stops)
    assert got == ("STOPPED", True, ["r1"]), f"expected r1 stopped for --timeout 20, got {got}"


@pytest.mark.parametrize("ends, summaries", [("SUCCEEDED", ["r1"]), ("FAILED", []), ("STOPPED", [])])
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
