"""A Ray job server as the head pod's job CLI answers through `kubectl exec`, on a fake clock, with faults.

The answers follow Ray 2.58's job CLI, python/ray/dashboard/modules/job/cli.py (the installed package,
.venv/lib/python3.11/site-packages/ray/dashboard/modules/job/cli.py, is Ray 2.58.0 itself), printed through
its cli_logger in "record" style: `<asctime>\\t<LEVEL> cli.py:<line> -- <message>` (LOGGER_FORMAT in
ray/_private/ray_constants.py; WARN and ERR records go to stdout too, cli_logger.py `_print`). The line
numbers are those of that file:
- every command first prints `Job submission server address: <address>` (`_get_sdk_client`, line 42);
- `submit --no-wait`: "Job '<id>' submitted successfully" between two dash lines (`_log_big_success_msg`,
  66-68), then "Next steps" and the three `ray job logs|status|stop <id>` hints (330-341), and returns;
- `status`: `_log_job_status`: "Job '<id>' succeeded" between dashes (SUCC 66-68), "Job '<id>' was stopped"
  (WARN 85), "Job '<id>' failed" between dashes (ERR 74-76) then "Status message: ..." (89), else
  "Status for job '<id>': <STATUS>" (92) and "Status message: ..." (94);
- `logs` (no --follow): the whole log as ONE record (line 569), so only its first line carries the prefix;
  an empty log prints nothing (cli_logger skips a blank record);
- `stop --no-wait`: "Attempting to stop job '<id>'" (449) and returns.
An unknown job id makes the SDK raise "Job <id> does not exist" (a traceback on stderr, exit 1).
tests/automation/test_ray_head.py runs Ray's own click commands over a stand-in SDK client and checks that this
fake prints what they print.

Each exec'd command is parsed once into a `JobRequest` (an action and its arguments), so the fake answers a
request, not a substring of a command line.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from automation.errors import DriverError
from automation.kube import ExecResult
from automation.scaling import JOBS_SNIPPET

Action = Literal["submit", "status", "logs", "stop", "list", "rest-list"]
# Options of `ray job` commands that take a value (cli.py's click options and add_click_logging_options).
VALUE_OPTIONS = frozenset(
    {
        "--address",
        "--job-id",
        "--submission-id",
        "--runtime-env",
        "--runtime-env-json",
        "--working-dir",
        "--metadata-json",
        "--entrypoint-num-cpus",
        "--entrypoint-num-gpus",
        "--entrypoint-memory",
        "--entrypoint-resources",
        "--entrypoint-label-selector",
        "--headers",
        "--log-style",
        "--log-color",
    }
)


@dataclass(frozen=True)
class JobRequest:
    """One `ray job` command, as the job server sees it."""

    action: Action
    job_id: str | None = None
    options: tuple[tuple[str, str], ...] = ()  # (option, value); flags have value ""
    entrypoint: tuple[str, ...] = ()
    first_line: int = 1  # logs: `tail -n +K` over the CLI's output (1: everything, header included)

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)


@functools.lru_cache(maxsize=64)
def _words(script: str) -> str:
    """A shell script's words, one space apart (the driver sends the same script on every poll)."""
    return " ".join(shlex.split(script))


def parse_request(argv: list[str]) -> JobRequest | None:
    """The `ray job` request an exec'd command makes, or None when it is no job request.

    The log read is automation/ray_head.py's LOGS_SCRIPT: `sh -c SCRIPT sh ADDRESS JOB_ID K`; the job list
    before a scale-down is automation/scaling.py's JOBS_SNIPPET (GET /api/jobs/ from the head pod)."""
    if argv == ["python", "-c", JOBS_SNIPPET]:
        return JobRequest("rest-list")
    if argv[:2] == ["sh", "-c"] and len(argv) == 7 and "ray job logs" in _words(argv[2]):
        return JobRequest("logs", argv[5], (("--address", argv[4]),), first_line=int(argv[6]))
    if argv[:2] != ["ray", "job"] or len(argv) < 3:
        return None
    action, rest = cast(Action, argv[2]), argv[3:]  # an unknown action reaches the server, which refuses it
    options: list[tuple[str, str]] = []
    positional: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "--":
            return JobRequest(action, dict(options).get("--submission-id"), tuple(options), tuple(rest[i + 1 :]))
        if word in VALUE_OPTIONS:
            options.append((word, rest[i + 1]))
            i += 2
            continue
        if word.startswith("-"):
            options.append((word, ""))
        else:
            positional.append(word)
        i += 1
    return JobRequest(action, positional[0] if positional else None, tuple(options))


@dataclass(frozen=True)
class JobScript:
    """How a fake job goes: PENDING for `pending_s`, then `lines` spread over `run_s`, then `ends`."""

    lines: tuple[str, ...]
    run_s: float
    pending_s: float = 20.0
    ends: str = "SUCCEEDED"
    message: str = "Job finished successfully."
    stalls_at_s: float | None = None  # a hung collective: no line after this much running time, RUNNING till run_s


@dataclass
class FakeJob:
    job_id: str
    script: JobScript
    submitted_at: float
    request: JobRequest
    stopped_at: float | None = None

    def _running_for(self, now: float) -> float:
        end = now if self.stopped_at is None else min(now, self.stopped_at)
        return end - self.submitted_at - self.script.pending_s

    def status(self, now: float) -> str:
        if self.stopped_at is not None and now >= self.stopped_at:
            return "STOPPED"
        ran = self._running_for(now)
        if ran < 0:
            return "PENDING"
        return self.script.ends if ran >= self.script.run_s else "RUNNING"

    def lines(self, now: float) -> tuple[str, ...]:
        """The lines written by `now`: line i at (i + 1) / n of the running time."""
        ran, n = self._running_for(now), len(self.script.lines)
        if ran < 0:
            return ()
        ran = ran if self.script.stalls_at_s is None else min(ran, self.script.stalls_at_s)
        done = n if ran >= self.script.run_s else int(ran / self.script.run_s * n)
        return self.script.lines[:done]

    @property
    def ended_at(self) -> float:
        if self.stopped_at is not None:
            return self.stopped_at
        return self.submitted_at + self.script.pending_s + self.script.run_s


class Clock:
    """A fake monotonic clock; `sleep` moves it on at once."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass(frozen=True)
class Fault:
    """The first job request of `action` (any when None) at or after `at_s` fails: "drop" as a cut exec
    websocket after `after_lines` lines, "expired-token" as the API server refusing the exec's credentials.
    `reached`: whether the request reached the job server before the stream dropped (a `submit` then queued
    its job) or was lost on the way."""

    at_s: float
    kind: Literal["drop", "expired-token"]
    action: Action | None = None
    after_lines: int = 0
    reached: bool = True


def record(line_no: int, message: str, level: str = "INFO") -> str:
    """One record line of Ray's cli_logger (LOGGER_FORMAT), at a fixed illustrative time."""
    return f"2026-12-06 05:21:51,924\t{level} cli.py:{line_no} -- {message}"


def boxed(message: str, level: str, first_line: int) -> list[str]:
    """`_log_big_success_msg` / `_log_big_error_msg`: the message between two dash lines."""
    dashes = "-" * len(message)
    return [record(first_line + i, text, level) for i, text in enumerate((dashes, message, dashes))]


@dataclass
class FakeRayJobs:
    """The head pod's job server on a fake clock: `answer(pod, command, stdin, on_line)` is its exec."""

    clock: Clock
    script: Callable[[str], JobScript]  # the job that a submission id runs
    faults: list[Fault] = field(default_factory=list)
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    requests: list[JobRequest] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # the faults raised, as said
    gone_at: float | None = None  # from then on every request fails as a cut stream (the API server is gone)

    def answer(self, pod: str, command: list[str], on_line: Callable[[str], None] | None = None) -> ExecResult | None:
        """The job server's answer to `command`, None when it is no job request; raises a due fault."""
        request = parse_request(command)
        if request is None:
            return None
        self.requests.append(request)
        fault = self._fault_due(request)
        result = self._answer(request) if fault is None or fault.reached else ExecResult(1, "", "")
        if fault is not None:
            self._fail(fault, request, pod, result, on_line)
        return result

    def _fault_due(self, request: JobRequest) -> Fault | None:
        """The fault this request meets, taken off the list, or None."""
        if self.gone_at is not None and self.clock() >= self.gone_at:
            self.faults.append(Fault(self.gone_at, "drop", request.action))
        for fault in self.faults:
            if self.clock() >= fault.at_s and fault.action in (None, request.action):
                self.faults.remove(fault)
                return fault
        return None

    def _fail(self, fault: Fault, request: JobRequest, pod: str, result: ExecResult, on_line) -> None:
        if fault.kind == "drop":
            for line in result.stdout.splitlines()[: fault.after_lines]:
                if on_line:
                    on_line(line)
            # automation/kube.py's KubeApi.exec: a cut websocket is one DriverError
            said = (
                f"the exec stream of `{' '.join(['ray', 'job', request.action])} …` in pod ray/{pod} dropped: "
                "WebSocketConnectionClosedException: Connection to remote host was lost."
            )
        else:
            # KubeApi.exec: the kubernetes client's websocket_call turns the refused handshake into
            # ApiException(status=0, reason=str(WebSocketBadStatusException)) (kubernetes/stream/ws_client.py)
            said = (
                f"cannot exec into pod ray/{pod} at https://EKS.example: ApiException: (0)\n"
                "Reason: Handshake status 401 Unauthorized -+-+- {} -+-+- None"
            )
        self.failures.append(said)
        raise DriverError(said)

    def _answer(self, req: JobRequest) -> ExecResult:
        header = [record(42, f"Job submission server address: {req.option('--address')}")]
        if req.action == "submit":
            return self._submit(req, header)
        if req.action == "rest-list":  # JSON of JobDetails (ray/dashboard/modules/job/common.py): the fields read
            now = self.clock()
            listed = [{"submission_id": j.job_id, "status": j.status(now)} for j in self.jobs.values()]
            return ExecResult(0, json.dumps(listed) + "\n", "")
        job = self.jobs.get(req.job_id or "")
        if job is None:
            return ExecResult(1, "\n".join(header) + "\n", f"RuntimeError: Job {req.job_id} does not exist.\n")
        now = self.clock()
        if req.action == "status":
            return ExecResult(0, "\n".join(header + status_lines(job.job_id, job.status(now), job.script)) + "\n", "")
        if req.action == "logs":
            return ExecResult(0, logs_output(header, job.lines(now), req.first_line), "")
        if req.action == "stop":
            if job.status(now) in ("PENDING", "RUNNING"):
                job.stopped_at = now
            return ExecResult(0, "\n".join([*header, record(449, f"Attempting to stop job '{job.job_id}'")]) + "\n", "")
        raise AssertionError(f"the fake job server does not answer {req}")

    def _submit(self, req: JobRequest, header: list[str]) -> ExecResult:
        job_id = req.job_id or "raysubmit_fake"
        if job_id in self.jobs:  # the SDK refuses a submission id it already has
            # dashboard/modules/job/job_manager.py `submit_job`'s ValueError, through the SDK's `_raise_error`
            refused = f"Job with submission_id {job_id} already exists. Please use a different submission_id."
            return ExecResult(
                1, "\n".join(header) + "\n", f"RuntimeError: Request failed with status code 400: {refused}\n"
            )
        self.jobs[job_id] = FakeJob(job_id, self.script(job_id), self.clock(), req)
        hints = [
            record(330, "Next steps"),
            record(331, "Query the logs of the job:"),
            record(333, f"ray job logs {job_id}"),
            record(335, "Query the status of the job:"),
            record(337, f"ray job status {job_id}"),
            record(339, "Request the job to be stopped:"),
            record(341, f"ray job stop {job_id}"),
        ]
        lines = [*header, *boxed(f"Job '{job_id}' submitted successfully", "SUCC", 66), *hints]
        return ExecResult(0, "\n".join(lines) + "\n", "")

    def runtime_env(self, job_id: str) -> dict:
        return json.loads(self.jobs[job_id].request.option("--runtime-env-json") or "{}")


def status_lines(job_id: str, status: str, script: JobScript) -> list[str]:
    """What `ray job status` prints after its header (cli.py `_log_job_status`)."""
    if status == "SUCCEEDED":
        return boxed(f"Job '{job_id}' succeeded", "SUCC", 66)
    if status == "STOPPED":
        return [record(85, f"Job '{job_id}' was stopped", "WARN")]
    if status == "FAILED":
        return [*boxed(f"Job '{job_id}' failed", "ERR", 74), record(89, f"Status message: {script.message}")]
    message = "Job is currently running." if status == "RUNNING" else "Job has not started yet."
    return [record(92, f"Status for job '{job_id}': {status}"), record(94, f"Status message: {message}")]


def logs_output(header: list[str], lines: tuple[str, ...], first_line: int) -> str:
    """`ray job logs` (the header, then the log as one record) through `tail -n +first_line`."""
    out = list(header)
    if lines:
        out += [record(569, lines[0]), *lines[1:]]
    text = "\n".join(out) + "\n"
    return "".join(text.splitlines(keepends=True)[first_line - 1 :])


def train_lines(steps: int, run_id: str = "r1") -> tuple[str, ...]:
    """Rank 0's lines of a job of `steps` steps (workloads/loop.py prints `[train] step i/N ...`), with
    other output of the job between them, as Ray's job log holds them."""
    out: list[str] = []
    for i in range(1, steps + 1):
        out.append(f"[train] step {i}/{steps} loss {8.0 - i / steps:.4f} tokens/s 52000")
        out.append(f"(RayTrainWorker pid=417) heartbeat {i} of {run_id}")
    return tuple(out)
