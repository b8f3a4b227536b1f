"""A Ray head's job server and resources, as both targets reach them.

Both targets submit `python -m workloads.train ...` with `workloads/` as the job's working_dir. On AWS the
driver copies the package into the head pod and runs Ray's job CLI there through the Kubernetes exec API, so
port 8265 never leaves the pod; locally it talks to the job server on 127.0.0.1.

A job is detached (`ray job submit --no-wait`) and `follow_job` asks the job server in short calls each poll,
so a dropped exec stream or an expired token costs one poll, never the job's outcome (docs/long-runs.md).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import shlex
import tarfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from automation import interrupts
from automation.errors import DriverError
from automation.hang import HangBound, HangWatch, RankEvidence, diagnosis
from automation.job import CLUSTER_ROOT, command
from automation.kube import ExecResult, PodExec
from automation.pipeline import SubmittedJob, TrainOutcome
from workloads.config import TrainConfig
from workloads.summary import RunSummary

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
HEAD_JOB_SERVER = "http://127.0.0.1:8265"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_LINE = re.compile(r"\[train\] step \d+/\d+ ")
RESOURCES_MARK = "RAY_CLUSTER_RESOURCES "
_T = TypeVar("_T")
# Run in the head pod: what Ray itself advertises, which is what Ray Train schedules against.
RAY_RESOURCES_SNIPPET = (
    "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
    f"print({RESOURCES_MARK!r} + json.dumps(ray.cluster_resources()))"
)


def parse_ray_resources(output: str) -> dict[str, float]:
    """The resource dict printed by RAY_RESOURCES_SNIPPET; ValueError when it is not in `output`."""
    for line in output.splitlines():
        if line.startswith(RESOURCES_MARK):
            return json.loads(line[len(RESOURCES_MARK) :])
    raise ValueError(f"no line starting with {RESOURCES_MARK.strip()!r} in: {output.strip()[-300:]!r}")


def strip_ansi(line: str) -> str:
    """Ray colours its log prefixes; the driver's own output (and JSON) wants plain text."""
    return _ANSI.sub("", line)


def is_step_line(line: str) -> bool:
    """Rank 0's per-step progress line (workloads/loop.py), which the progress bar also shows."""
    return _STEP_LINE.search(line) is not None


def worth_showing(line: str) -> bool:
    """Lines printed while a job runs: rank 0's progress and errors; the spinner shows the rest."""
    return "[train]" in line or "Error" in line or "Traceback" in line or line.startswith("Job '")


def workloads_tarball(folders: Sequence[Path] = (WORKLOADS_DIR,)) -> bytes:
    """Each folder (default `workloads/`) as a gzipped tar entry of its own name, without caches or run output."""
    buf = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        drop = "__pycache__" in parts or "runs" in parts or info.name.endswith((".pyc", ".pyo"))
        return None if drop else info

    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for folder in folders:
            tar.add(folder, arcname=folder.name, filter=keep)
    return buf.getvalue()


# ---- the job server's answers, as both targets read them ------------------------------------------
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})  # ray.job_submission.JobStatus.is_terminal
UNKNOWN = "UNKNOWN"  # not Ray's: the driver lost the job server and gave up asking


@dataclass(frozen=True)
class JobState:
    """What the job server says of a job: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED, and its message."""

    status: str
    message: str = ""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True)
class LogChunk:
    """The job's complete log lines from a line offset on, and the offset of the next unread line."""

    lines: tuple[str, ...]
    next_offset: int


class JobNotFound(DriverError):
    """The job server has no job of that id (a wrong id for `attach`, or a head pod that restarted)."""


def slice_log(text: str, offset: int, final: bool) -> LogChunk:
    """The lines of `text` (the log from line `offset` on) as a chunk. A last line without its newline is
    still being written: it waits for the next read, unless the job has ended (`final`)."""
    lines = text.split("\n")
    rest = lines.pop()  # "" when text ends with a newline
    if final and rest:
        lines.append(rest)
    return LogChunk(tuple(strip_ansi(s) for s in lines), offset + len(lines))


# ---- AWS: through the head pod -------------------------------------------------------------------
# Ray's job CLI (ray 2.58, python/ray/dashboard/modules/job/cli.py) prints through its cli_logger, which
# off a terminal writes "record" lines: `<asctime>\t<LEVEL> cli.py:<line> -- <message>` (LOGGER_FORMAT,
# ray/_private/ray_constants.py). `--log-style record` asks for that style on a terminal too, so
# what the driver parses does not depend on whether the exec has a tty.
LOG_STYLE = ("--log-style", "record")
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\t[A-Z]+ \S+:\d+ -- ")
_SUBMITTED = re.compile(r"Job '([^']+)' submitted successfully")
# What the job server answers a submission id it already has (dashboard/modules/job/job_manager.py, submit_job).
_EXISTS = re.compile(r"Job with submission_id \S+ already exists")
_STATUS_FOR = re.compile(r"Status for job '[^']+': (\w+)")
_ENDED = re.compile(r"Job '[^']+' (succeeded|failed|was stopped)$")
_ENDED_STATUS = {"succeeded": "SUCCEEDED", "failed": "FAILED", "was stopped": "STOPPED"}
# Every command first prints the "Job submission server address: ..." line (cli.py `_get_sdk_client`), and
# `ray job logs` then prints the whole log as one record: its first line carries the record prefix.
LOG_HEADER_LINES = 1


def record_text(line: str) -> str:
    """A line of Ray's CLI without its colour and its record prefix."""
    return _RECORD.sub("", strip_ansi(line), count=1)


def upload_command(dest: str, payload_len: int) -> list[str]:
    """Unpack a base64 tarball of exactly `payload_len` characters from stdin into `dest`; `head -c` ends the
    read itself: the exec websocket's v4 protocol cannot signal end of stdin."""
    q = shlex.quote(dest)
    return ["sh", "-c", f"rm -rf {q} && mkdir -p {q} && head -c {payload_len} | base64 -d | tar -xzf - -C {q}"]


def upload(pod_exec: PodExec, pod: str, namespace: str, dest: str, tarball: bytes, what: str) -> None:
    payload = base64.b64encode(tarball).decode()
    up = pod_exec(pod, namespace, upload_command(dest, len(payload)), stdin=payload, timeout_s=300)
    if up.rc != 0:
        raise DriverError(f"copying {what} into {namespace}/{pod} failed (rc {up.rc}): {up.stderr.strip()[-300:]}")


def submit_command(
    job: TrainConfig,
    working_dir: str,
    env_vars: dict[str, str] | None = None,
    submission_id: str | None = None,
    py_modules: Sequence[str] = (),
) -> list[str]:
    """`ray job submit --no-wait` to the head pod's own job server: it returns once the job is queued.

    ``submission_id`` defaults to the run id (a resumed run needs its own: Ray keeps a finished job's id).
    ``py_modules`` are head-pod folders the job needs beyond the image (automation/job_modules.py); the job's
    actors, Ray Train's workers included, inherit them (docs.ray.io, ray-core/handling-dependencies, "Inheritance")."""
    runtime_env: dict[str, object] = {"env_vars": dict(env_vars or {})}
    if py_modules:
        runtime_env["py_modules"] = list(py_modules)
    opts = ["--no-wait", *LOG_STYLE, "--working-dir", working_dir, "--submission-id", submission_id or job.run_id]
    env = ["--runtime-env-json", json.dumps(runtime_env, sort_keys=True)]
    return ["ray", "job", "submit", "--address", HEAD_JOB_SERVER, *opts, *env, "--", "python", *command(job)]


def status_command(job_id: str) -> list[str]:
    return ["ray", "job", "status", "--address", HEAD_JOB_SERVER, *LOG_STYLE, job_id]


def stop_command(job_id: str) -> list[str]:
    """`ray job stop --no-wait`: the follow loop sees the job reach STOPPED by its own polls."""
    return ["ray", "job", "stop", "--address", HEAD_JOB_SERVER, "--no-wait", *LOG_STYLE, job_id]


# `ray job logs` prints the whole log; only the lines from the offset on cross the exec stream, and the
# exit status stays ray's (a pipe would give tail's).
LOGS_SCRIPT = (
    'f=$(mktemp) || exit 1; ray job logs --address "$1" --log-style record "$2" >"$f"; rc=$?; '
    'tail -n +"$3" "$f"; rm -f "$f"; exit $rc'
)


def logs_command(job_id: str, offset: int) -> list[str]:
    """The job's log lines from line `offset` (0-based) on; `tail -n +K` counts from 1, after the header."""
    return ["sh", "-c", LOGS_SCRIPT, "sh", HEAD_JOB_SERVER, job_id, str(offset + LOG_HEADER_LINES + 1)]


def parse_submitted(output: str) -> str | None:
    """The job id `ray job submit` names in its "Job '<id>' submitted successfully" line, else None."""
    found = _SUBMITTED.search(strip_ansi(output))
    return found.group(1) if found else None


def parse_status(output: str) -> JobState | None:
    """The job's state from `ray job status` (cli.py `_log_job_status`), else None."""
    status, message = None, ""
    for line in map(record_text, output.splitlines()):
        if m := _STATUS_FOR.search(line):
            status = m.group(1)
        elif m := _ENDED.search(line):
            status = _ENDED_STATUS[m.group(1)]
        elif line.startswith("Status message: "):
            message = line[len("Status message: ") :]
    return JobState(status, message) if status else None


def _exec_failed(what: str, job_id: str, res: ExecResult) -> DriverError:
    text = (res.stderr or res.stdout).strip()
    if "does not exist" in text:
        return JobNotFound(f"the Ray job server has no job {job_id!r}: {text[-200:]}", exit_code=2)
    return DriverError(f"`ray job {what} {job_id}` in the head pod failed (rc {res.rc}): {text[-300:]}")


@dataclass(frozen=True)
class HeadJobs:
    """The head pod's job server, reached through short exec calls (automation.kube.PodExec)."""

    pod_exec: PodExec
    pod: str
    namespace: str
    call_s: float = 120  # one call; a stuck one costs a poll, not the job

    def submit(
        self, job: TrainConfig, env_vars: dict[str, str], submission_id: str, modules: Sequence[Path] = ()
    ) -> str:
        """Copy `workloads/` into the head pod as `src/<submission id>` (and ``modules``, the job's py_modules
        folders, as `deps/<submission id>/<folder>`) and submit the job; its id.

        A dropped exec stream says nothing of the job: the job server is asked for ``submission_id`` (it may have
        accepted the job before the drop) and, only when it has no such job, the same id is submitted once more,
        which Ray would refuse beside a job of that id (job_manager.py, ``submit_job``): one submit, one job."""
        src_dir = f"{CLUSTER_ROOT}/src/{submission_id}"
        upload(self.pod_exec, self.pod, self.namespace, src_dir, workloads_tarball(), "workloads/")
        deps_dir = f"{CLUSTER_ROOT}/deps/{submission_id}"
        if modules:
            what = ", ".join(f"{m.name}/" for m in modules)
            upload(self.pod_exec, self.pod, self.namespace, deps_dir, workloads_tarball(modules), what)
        cmd = submit_command(job, src_dir, env_vars, submission_id, [f"{deps_dir}/{m.name}" for m in modules])
        try:
            res = self.pod_exec(self.pod, self.namespace, cmd, timeout_s=self.call_s)
        except DriverError:
            if self._has_job(submission_id):
                return submission_id
            try:
                res = self.pod_exec(self.pod, self.namespace, cmd, timeout_s=self.call_s)
            except DriverError as again:
                raise self._unsure(submission_id, f"`ray job submit` lost its exec stream twice: {again}") from None
            if _EXISTS.search(res.stderr):  # the first submit reached the server after the status was asked
                return submission_id
        job_id = parse_submitted(res.stdout)
        if res.rc != 0 or job_id is None:
            why = (res.stderr or res.stdout).strip()[-300:]
            raise DriverError(f"`ray job submit` in {self.namespace}/{self.pod} did not submit (rc {res.rc}): {why}")
        return job_id

    def _has_job(self, submission_id: str) -> bool:
        """Whether the job server has the job whose `ray job submit` lost its stream; no answer fails the step."""
        try:
            self.job_status(submission_id)
        except JobNotFound:
            return False
        except DriverError as e:
            why = f"`ray job submit` lost its exec stream, then `ray job status` got no answer: {e}"
            raise self._unsure(submission_id, why) from None
        return True

    def _unsure(self, submission_id: str, why: str) -> DriverError:
        check = f"kubectl -n {self.namespace} exec {self.pod} -- {shlex.join(status_command(submission_id))}"
        return DriverError(f"job {submission_id} may be queued or not ({why}); check before submitting again: {check}")

    def job_status(self, job_id: str) -> JobState:
        res = self.pod_exec(self.pod, self.namespace, status_command(job_id), timeout_s=self.call_s)
        state = parse_status(res.stdout) if res.rc == 0 else None
        if state is None:
            raise _exec_failed("status", job_id, res)
        return state

    def job_logs(self, job_id: str, offset: int, final: bool = False) -> LogChunk:
        res = self.pod_exec(self.pod, self.namespace, logs_command(job_id, offset), timeout_s=self.call_s)
        if res.rc != 0:
            raise _exec_failed("logs", job_id, res)
        text = record_text(res.stdout) if offset == 0 else res.stdout  # the first log line carries the record prefix
        return slice_log(text, offset, final)

    def stop_job(self, job_id: str) -> None:
        res = self.pod_exec(self.pod, self.namespace, stop_command(job_id), timeout_s=self.call_s)
        if res.rc != 0:
            raise _exec_failed("stop", job_id, res)

    def summary(self, path: str) -> RunSummary | None:
        """The training summary; the entrypoint (rank 0's driver) runs in the head pod and writes it there."""
        cat = self.pod_exec(self.pod, self.namespace, ["cat", path], timeout_s=60)
        return RunSummary.parse(cat.stdout) if cat.rc == 0 else None

    def newest_job(self) -> str:
        """The newest job submitted from this driver: the newest `src/<submission id>` in the head pod."""
        ls = ["sh", "-c", f"ls -1t {CLUSTER_ROOT}/src 2>/dev/null | head -n 1"]
        res = self.pod_exec(self.pod, self.namespace, ls, timeout_s=60)
        if res.rc != 0 or not res.stdout.strip():
            where = f"{self.namespace}/{self.pod} (no {CLUSTER_ROOT}/src/*)"
            raise DriverError(f"no job was submitted to {where}: pass the job id", exit_code=2)
        return res.stdout.strip()


# ---- local: the job server on loopback -----------------------------------------------------------
@dataclass(frozen=True)
class LocalJobs:
    """A `ray.job_submission.JobSubmissionClient` of the local head (Ray 2.58, ray/dashboard/modules/job/sdk.py),
    with the same questions as HeadJobs."""

    client: JobSubmissionClient

    def submit(self, job: TrainConfig, working_dir: Path, python: str) -> str:
        # The SDK logs each package upload at INFO on stderr; the driver reports the job itself.
        logging.getLogger("ray").setLevel(logging.WARNING)
        entry, env = shlex.join([python, *command(job)]), {"working_dir": str(working_dir)}
        return self.client.submit_job(entrypoint=entry, submission_id=job.run_id, runtime_env=env)

    def job_status(self, job_id: str) -> JobState:
        info = self.client.get_job_info(
            job_id
        )  # str() of its JobStatus is the state (ray/dashboard/modules/job/common.py)
        return JobState(str(info.status), info.message or "")

    def job_logs(self, job_id: str, offset: int, final: bool = False) -> LogChunk:
        lines = self.client.get_job_logs(job_id).split("\n")
        return slice_log("\n".join(lines[offset:]), offset, final)

    def stop_job(self, job_id: str) -> None:
        self.client.stop_job(job_id)

    @staticmethod
    def summary(path: str) -> RunSummary | None:
        return RunSummary.parse(Path(path).read_text()) if Path(path).is_file() else None


# ---- following a job to its end ------------------------------------------------------------------
POLL_S = 5.0  # status and new log lines every few seconds
RETRY_FIRST_S, RETRY_MAX_S = 2.0, 60.0
GIVE_UP_S = 1800.0  # 30 min without one answer: the driver stops asking (the job goes on)


@dataclass(frozen=True)
class FollowEnd:
    """How following a job ended: the job server's last word, the log tail, and what the driver did."""

    state: JobState
    tail: tuple[str, ...]
    stopped_for_timeout: bool = False
    hang: dict[str, object] | None = None  # automation/hang.py `diagnosis`, when the job was stopped as hung


class FollowPlace(Protocol):
    """What following a job needs of a target (automation.targets.Target has all of it)."""

    def jobs(self) -> HeadJobs | LocalJobs: ...
    @property
    def on_line(self) -> Callable[[str], None]: ...
    @property
    def poll_s(self) -> float: ...
    @property
    def job_timeout_s(self) -> float | None: ...
    @property
    def hang_bound(self) -> HangBound | None: ...
    def hang_evidence(self) -> list[RankEvidence]: ...
    def note(self, text: str) -> None: ...
    def clock(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def submit_job(self, job: TrainConfig) -> SubmittedJob: ...


@dataclass
class _Patient:
    """Calls that may fail for a while (a dropped exec stream, an expired token, a restarting API server):
    retried with backoff, said once, given up after GIVE_UP_S without an answer."""

    place: FollowPlace
    said: bool = False
    lost_since: float | None = None

    def call(self, fn: Callable[[], _T]) -> _T:
        delay = RETRY_FIRST_S
        while True:
            try:
                got = fn()
            except JobNotFound:
                raise
            except DriverError as e:
                now = self.place.clock()
                self.lost_since = now if self.lost_since is None else self.lost_since
                if now - self.lost_since >= GIVE_UP_S:
                    raise DriverError(
                        f"no answer from the Ray job server for {now - self.lost_since:.0f} s ({e}); "
                        "the job itself may still run"
                    ) from None
                if not self.said:
                    self.said = True
                    self.place.note(
                        f"lost the connection to the job server ({e}): the job goes on; asking again with backoff "
                        f"(this is said once; only the output waits)"
                    )
                self.place.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            self.lost_since = None
            return got


def follow_job(place: FollowPlace, job_id: str, on_line: Callable[[str], None] | None = None) -> FollowEnd:
    """Follow `job_id` on the target's job server until it says the job ended: each log line passed to `on_line`
    (else the target's) once, in order.

    No limit on how long the job runs; with the target's --timeout the job is stopped (`ray job stop`) once this
    follow has lasted that long, and followed until the server says STOPPED. With its hang bound, a job with no step
    line past it (automation/hang.py) is diagnosed first (while it still hangs), then stopped alike. DriverError
    when the server gives no answer for GIVE_UP_S (the job goes on), JobNotFound when it does not know the job.
    """
    api, clock, note, patient = place.jobs(), place.clock, place.note, _Patient(place)
    start, offset, stopped, say, timeout_s = clock(), 0, False, on_line or place.on_line, place.job_timeout_s
    tail: deque[str] = deque(maxlen=200)
    watch, hung, seen = (HangWatch(place.hang_bound) if place.hang_bound else None), None, interrupts.received()
    while True:
        interrupts.raise_if_new(seen)  # a Ctrl-C a finalizer swallowed since the follow began
        state = patient.call(lambda: api.job_status(job_id))
        chunk = patient.call(partial(api.job_logs, job_id, offset, final=state.terminal))
        if watch and state.status == "RUNNING":
            watch.running(clock())
        for line in chunk.lines:
            tail.append(line)
            say(line)
            if watch:
                watch.line(line, clock())
        offset = chunk.next_offset
        if state.terminal:
            return FollowEnd(state, tuple(tail), stopped and hung is None, hung)
        late = watch.overdue(clock()) if watch and not stopped else None
        if late:
            note(f"job {job_id} looks hung: {late}; reading the workers' stacks and NCCL logs, then `ray job stop`")
            hung = diagnosis(late, place.hang_evidence())
            patient.call(lambda: api.stop_job(job_id))
            stopped = True
        if timeout_s is not None and not stopped and clock() - start >= timeout_s:
            note(f"job {job_id} has run {clock() - start:.0f} s, past --timeout {timeout_s:g}: `ray job stop`")
            patient.call(lambda: api.stop_job(job_id))
            stopped = True
        place.sleep(place.poll_s)


def outcome_of(end: FollowEnd, job: TrainConfig, summary: RunSummary | None) -> TrainOutcome:
    """The step's outcome: what the job server said of the job, never how a stream ended."""
    return TrainOutcome(
        job.run_id, end.state.status, summary, end.tail, job, hang=end.hang, stopped_for_timeout=end.stopped_for_timeout
    )


def job_summary(jobs: HeadJobs | LocalJobs, job: TrainConfig) -> RunSummary | None:
    return None if job.summary_json is None else jobs.summary(job.summary_json)


def run_to_end(place: FollowPlace, job: TrainConfig) -> TrainOutcome:
    """Submit `job` on a target and follow the job to its end (bench and drill wait for each job they start)."""
    submitted = place.submit_job(job)
    end = follow_job(place, submitted.job_id)
    return outcome_of(end, job, job_summary(place.jobs(), job) if end.state.status == "SUCCEEDED" else None)
