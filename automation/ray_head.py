"""A Ray head's job server and resources, as both targets reach them.

Both targets submit the same command, `python -m workloads.train ...`, with the `workloads/` package
as the job's working_dir (Ray uploads it to the GCS and unpacks it in every worker). On AWS the
driver copies the package into the head pod and runs `ray job submit` there through the Kubernetes
exec API, so the job server's port 8265 never leaves the pod; locally it talks to the job server on
127.0.0.1. `RAY_RESOURCES_SNIPPET` reads what Ray advertises, in the head pod or beside the local head.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import shlex
import tarfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from automation.errors import DriverError
from automation.job import CLUSTER_ROOT, command
from automation.kube import PodExec
from automation.pipeline import TrainOutcome
from workloads.config import TrainConfig

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
HEAD_JOB_SERVER = "http://127.0.0.1:8265"
_JOB_END = re.compile(r"Job '([^']+)' (succeeded|failed|was stopped)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STATUS_WORD = {"succeeded": "SUCCEEDED", "failed": "FAILED", "was stopped": "STOPPED"}
RESOURCES_MARK = "RAY_CLUSTER_RESOURCES "
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


_STEP_LINE = re.compile(r"\[train\] step \d+/\d+ ")


def is_step_line(line: str) -> bool:
    """Rank 0's per-step progress line (workloads/loop.py), which the progress bar also shows."""
    return _STEP_LINE.search(line) is not None


def worth_showing(line: str) -> bool:
    """Lines printed while a job runs: rank 0's progress and errors; the spinner shows the rest."""
    return "[train]" in line or "Error" in line or "Traceback" in line or line.startswith("Job '")


def workloads_tarball(src: Path = WORKLOADS_DIR) -> bytes:
    """The `workloads/` package as a gzipped tar rooted at `workloads/`, without caches or run output."""
    buf = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if "__pycache__" in parts or "runs" in parts or info.name.endswith((".pyc", ".pyo")):
            return None
        return info

    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src, arcname="workloads", filter=keep)
    return buf.getvalue()


# ---- AWS: through the head pod -------------------------------------------------------------------
def upload_command(dest: str, payload_len: int) -> list[str]:
    """Unpack a base64 tarball of exactly `payload_len` characters from stdin into `dest`.

    `head -c` ends the read itself: the exec websocket's v4 protocol cannot signal end of stdin.
    """
    q = shlex.quote(dest)
    return ["sh", "-c", f"rm -rf {q} && mkdir -p {q} && head -c {payload_len} | base64 -d | tar -xzf - -C {q}"]


def submit_command(
    args: TrainConfig, working_dir: str, env_vars: dict[str, str] | None = None, submission_id: str | None = None
) -> list[str]:
    """`ray job submit` against the head pod's own job server, waiting for the job and streaming its logs.

    ``submission_id`` is the Ray job id (default: the run id); a job that resumes a run needs its own,
    because Ray keeps a finished job's id."""
    runtime_env = {"env_vars": dict(env_vars or {})}
    return [
        "ray",
        "job",
        "submit",
        "--address",
        HEAD_JOB_SERVER,
        "--working-dir",
        working_dir,
        "--submission-id",
        submission_id or args.run_id,
        "--runtime-env-json",
        json.dumps(runtime_env, sort_keys=True),
        "--",
        "python",
        *command(args),
    ]


def job_status_from_output(output: str, rc: int) -> str:
    """The job's final status from `ray job submit`'s closing line, else from its exit code."""
    found = _JOB_END.findall(output)
    if found:
        return _STATUS_WORD[found[-1][1]]
    return "SUCCEEDED" if rc == 0 else "FAILED"


def submit_on_head(
    pod_exec: PodExec,
    head_pod: str,
    namespace: str,
    args: TrainConfig,
    on_line: Callable[[str], None] = lambda s: None,
    env_vars: dict[str, str] | None = None,
    timeout_s: float = 3600,
    submission_id: str | None = None,
) -> TrainOutcome:
    """Copy `workloads/` into the head pod, submit the job there, follow it, and read its summary."""
    src_dir = f"{CLUSTER_ROOT}/src/{args.run_id}"
    payload = base64.b64encode(workloads_tarball()).decode()
    up = pod_exec(head_pod, namespace, upload_command(src_dir, len(payload)), stdin=payload, timeout_s=300)
    if up.rc != 0:
        raise DriverError(
            f"copying workloads/ into {namespace}/{head_pod} failed (rc {up.rc}): {up.stderr.strip()[-300:]}"
        )
    tail: deque[str] = deque(maxlen=200)

    def line(s: str) -> None:
        s = strip_ansi(s)
        tail.append(s)
        on_line(s)

    res = pod_exec(
        head_pod, namespace, submit_command(args, src_dir, env_vars, submission_id), on_line=line, timeout_s=timeout_s
    )
    if not tail:
        tail.extend(strip_ansi(raw) for raw in (res.stdout + res.stderr).splitlines()[-200:])
    status = job_status_from_output(res.stdout + res.stderr, res.rc)
    summary = None
    if status == "SUCCEEDED":
        # The entrypoint (rank 0's driver) runs in the head pod, so the summary is written there.
        cat = pod_exec(head_pod, namespace, ["cat", args.summary_json], timeout_s=60)
        summary = _parse_summary(cat.stdout) if cat.rc == 0 else None
    return TrainOutcome(args.run_id, status, summary, tuple(tail), args)


def _parse_summary(text: str) -> dict | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


# ---- local: the job server on loopback -----------------------------------------------------------
def submit_local(
    client: Any,
    args: TrainConfig,
    working_dir: Path,
    python: str,
    on_line: Callable[[str], None] = lambda s: None,
    timeout_s: float = 600,
    poll_s: float = 1.0,
) -> TrainOutcome:
    """Submit to a `ray.job_submission.JobSubmissionClient`, stream new log lines, wait for the end."""
    # The SDK logs each package upload at INFO on stderr; the driver reports the job itself.
    logging.getLogger("ray").setLevel(logging.WARNING)
    entry = " ".join(shlex.quote(a) for a in [python, *command(args)])
    job_id = client.submit_job(
        entrypoint=entry, submission_id=args.run_id, runtime_env={"working_dir": str(working_dir)}
    )
    seen = 0
    tail: deque[str] = deque(maxlen=200)
    deadline = time.monotonic() + timeout_s
    terminal = {"SUCCEEDED", "FAILED", "STOPPED"}
    while True:
        status = str(client.get_job_status(job_id)).split(".")[-1]
        lines = client.get_job_logs(job_id).splitlines()
        for s in map(strip_ansi, lines[seen:]):
            tail.append(s)
            on_line(s)
        seen = len(lines)
        if status in terminal:
            break
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            status = "TIMEOUT"
            break
        time.sleep(poll_s)
    summary = None
    path = Path(args.summary_json)
    if status == "SUCCEEDED" and path.is_file():
        summary = _parse_summary(path.read_text())
    return TrainOutcome(job_id, status, summary, tuple(tail), args)
