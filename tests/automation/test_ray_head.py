"""Ray's job CLI as the driver reads it: Ray 2.58's own click commands (ray/dashboard/modules/job/cli.py, the
installed package) run in-process over a stand-in SDK client, so the lines parsed here are the lines Ray prints;
and the fake job server of the AWS-world tests (tests/support/_ray_jobs.py) prints the same lines."""

from __future__ import annotations

import re

import pytest
from _ray_jobs import Clock, FakeRayJobs, JobScript, parse_request
from click.testing import CliRunner

from automation.kube import ExecResult
from automation.ray_head import (
    HEAD_JOB_SERVER,
    HeadJobs,
    JobState,
    logs_command,
    parse_status,
    parse_submitted,
    status_command,
    stop_command,
    submit_command,
)
from workloads.config import TrainConfig

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", re.M)
MESSAGES = {"RUNNING": "Job is currently running.", "PENDING": "Job has not started yet.", "FAILED": "boom"}


class Info:
    def __init__(self, status, message):
        self.status, self.message = status, message


def stand_in_client(status: str, logs: str):
    """A JobSubmissionClient answering as a job server whose job r1 is `status` with `logs`."""
    from ray.job_submission import JobStatus

    class Client:
        def __init__(self, address, *args, **kwargs):
            self.address = address

        def get_address(self):
            return self.address

        def get_job_info(self, job_id):
            return Info(JobStatus(status), MESSAGES.get(status))

        def get_job_status(self, job_id):
            return JobStatus(status)

        def submit_job(self, **kwargs):
            return kwargs["submission_id"]

        def get_version(self):
            return "1"

        def get_job_logs(self, job_id):
            return logs

        def stop_job(self, job_id):
            return True

    return Client


def ray_prints(monkeypatch, argv: list[str], status: str = "RUNNING", logs: str = "", blank: bool = True) -> str:
    """What Ray 2.58's `ray job ...` prints on stdout for `argv` (after "ray job"), timestamps blanked or not."""
    from ray.dashboard.modules.job import cli

    monkeypatch.setattr(cli, "JobSubmissionClient", stand_in_client(status, logs))
    result = CliRunner().invoke(cli.job_cli_group, argv)
    assert result.exit_code == 0, f"ray job {argv[0]} failed: {result.output}"
    return STAMP.sub("T", result.stdout) if blank else result.stdout


def fake_prints(argv: list[str], status: str = "RUNNING", log: tuple[str, ...] = ()) -> str:
    """What the fake job server answers to the same exec'd command, timestamps blanked."""
    clock = Clock()
    ends = {"RUNNING": "SUCCEEDED", "PENDING": "SUCCEEDED"}.get(status, status)
    jobs = FakeRayJobs(clock, lambda job_id: JobScript(log, run_s=100, pending_s=10, ends=ends, message="boom"))
    if argv[2] != "submit":
        jobs.answer("head", submit_command(ARGS, "/src"))
        clock.t = {"PENDING": 0, "RUNNING": 50}.get(status, 1000)
    answer = jobs.answer("head", argv)
    assert answer is not None, f"the fake head has no answer to {argv}"
    return STAMP.sub("T", answer.stdout)


ARGS = TrainConfig(preset="tiny", run_id="r1", num_workers=2)


@pytest.mark.parametrize("status", ["PENDING", "RUNNING", "SUCCEEDED", "FAILED"])
def test_the_fake_prints_what_ray_job_status_prints(monkeypatch, status):
    cmd = status_command("r1")
    want = ray_prints(monkeypatch, cmd[2:], status)
    assert fake_prints(cmd, status) == want, f"fake and Ray differ for {status}:\n{fake_prints(cmd, status)}\n{want}"


def test_the_fake_prints_what_ray_job_submit_no_wait_prints(monkeypatch):
    cmd = submit_command(ARGS, "/src")
    want = ray_prints(monkeypatch, cmd[2:])
    assert fake_prints(cmd) == want, f"fake and Ray differ:\n{fake_prints(cmd)}\n{want}"


def test_the_fake_prints_what_ray_job_logs_prints(monkeypatch):
    log = ("first line", "second line")
    want = ray_prints(
        monkeypatch, ["logs", "--address", HEAD_JOB_SERVER, "--log-style", "record", "r1"], logs="\n".join(log) + "\n"
    )
    got = fake_prints(logs_command("r1", 0)[:6] + ["1"], "SUCCEEDED", log)  # `tail -n +1`: all of it
    assert got == want, f"fake and Ray differ:\n{got}\n{want}"


def test_the_fake_prints_what_ray_job_stop_no_wait_prints(monkeypatch):
    cmd = stop_command("r1")
    want = ray_prints(monkeypatch, cmd[2:])
    assert fake_prints(cmd) == want, f"fake and Ray differ:\n{fake_prints(cmd)}\n{want}"


@pytest.mark.parametrize(
    "status, state",
    [
        ("RUNNING", JobState("RUNNING", "Job is currently running.")),
        ("SUCCEEDED", JobState("SUCCEEDED")),
        ("FAILED", JobState("FAILED", "boom")),
        ("STOPPED", JobState("STOPPED")),
    ],
)
def test_job_status_is_read_from_rays_own_output(monkeypatch, status, state):
    got = parse_status(ray_prints(monkeypatch, status_command("r1")[2:], status, blank=False))
    assert got == state, f"expected {state}, got {got}"


def test_the_submitted_job_id_is_read_from_rays_own_output(monkeypatch):
    out = ray_prints(monkeypatch, submit_command(ARGS, "/src", submission_id="r1-resumed-x")[2:], blank=False)
    assert parse_submitted(out) == "r1-resumed-x", out


def test_log_lines_are_read_without_rays_header_and_record_prefix(monkeypatch):
    text = ray_prints(
        monkeypatch, ["logs", "--address", HEAD_JOB_SERVER, "--log-style", "record", "r1"], logs="a\nb\nc", blank=False
    )
    skip_header = "".join(text.splitlines(keepends=True)[1:])  # what `tail -n +2` leaves

    def pod_exec(pod, namespace, command, **kw):
        return ExecResult(0, skip_header, "")

    chunk = HeadJobs(pod_exec, "head", "ray").job_logs("r1", 0)
    assert (chunk.lines, chunk.next_offset) == (("a", "b"), 2), f"the unfinished line c must wait, got {chunk}"


def test_each_request_is_parsed_into_its_action():
    got = [parse_request(c).action for c in (submit_command(ARGS, "/s"), status_command("r1"), logs_command("r1", 3))]
    assert got == ["submit", "status", "logs"], got
