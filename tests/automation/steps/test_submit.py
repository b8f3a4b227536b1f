"""submit and train: the commands run in the head pod, and how the job's end is read."""

from __future__ import annotations

import base64
import io
import json
import tarfile

from automation.job import command, with_run_paths
from automation.kube import ExecResult
from automation.pipeline import TrainOutcome
from automation.ray_head import (
    HEAD_JOB_SERVER,
    HeadJobs,
    JobState,
    LogChunk,
    follow_job,
    outcome_of,
    submit_command,
    upload_command,
    workloads_tarball,
)
from automation.steps.follow import train_result
from workloads.config import TrainConfig

ARGS = with_run_paths(
    TrainConfig(
        preset="qwen2.5-1.5b",
        num_workers=8,
        steps=50,
        global_batch_size=16,
        seq_len=2048,
        use_gpu=True,
        gpus_per_worker=1,
        cpus_per_worker=9,
    ),
    "r1",
    "/tmp/ray-efa-eks/runs/r1",
)


def test_submit_goes_to_the_head_pods_own_job_server():
    cmd = submit_command(ARGS, "/tmp/ray-efa-eks/src/r1")
    assert cmd[:5] == ["ray", "job", "submit", "--address", HEAD_JOB_SERVER], f"got {cmd[:5]}"
    assert HEAD_JOB_SERVER == "http://127.0.0.1:8265"


def _options(cmd: list[str]) -> dict[str, str]:
    words = [w for w in cmd[3 : cmd.index("--")] if w != "--no-wait"]
    return dict(zip(words[::2], words[1::2], strict=True))


def test_submit_passes_working_dir_submission_id_and_runtime_env():
    cmd = submit_command(ARGS, "/tmp/ray-efa-eks/src/r1", {"NCCL_DEBUG": "INFO"})
    opts = {k: v for k, v in _options(cmd).items() if k != "--log-style"}
    expected = {
        "--address": HEAD_JOB_SERVER,
        "--working-dir": "/tmp/ray-efa-eks/src/r1",
        "--submission-id": "r1",
        "--runtime-env-json": json.dumps({"env_vars": {"NCCL_DEBUG": "INFO"}}, sort_keys=True),
    }
    assert opts == expected, f"expected {expected}, got {opts}"


def test_submit_returns_once_the_job_is_queued():
    cmd = submit_command(ARGS, "/src")
    assert "--no-wait" in cmd[: cmd.index("--")], f"expected --no-wait before the entrypoint, got {cmd[:8]}"


def test_entrypoint_is_the_training_module_with_the_run_directories():
    cmd = submit_command(ARGS, "/src")
    entry = cmd[cmd.index("--") + 1 :]
    assert entry[:3] == ["python", "-m", "workloads.train"], f"got {entry[:3]}"
    job = TrainConfig.from_argv(entry[3:])
    got = (job.run_id, job.run_dir, job.summary_json, job.nccl_log_dir, job.num_workers)
    want = (
        "r1",
        "/tmp/ray-efa-eks/runs/r1",
        "/tmp/ray-efa-eks/runs/r1/summary.json",
        "/tmp/ray-efa-eks/runs/r1/nccl",
        8,
    )
    assert got == want, f"expected {want}, got {got}"


def test_training_cli_accepts_the_submitted_arguments():
    from workloads.train import build_parser

    ns = build_parser().parse_args(command(ARGS)[2:])  # after "-m workloads.train"
    got = (ns.preset, ns.num_workers, ns.use_gpu, ns.gpus_per_worker, ns.cpus_per_worker, ns.run_id)
    assert got == ("qwen2.5-1.5b", 8, True, 1.0, 9.0, "r1"), f"got {got}"


def test_upload_reads_exactly_the_payload_from_stdin():
    cmd = upload_command("/tmp/ray-efa-eks/src/r1", 1234)
    assert cmd[:2] == ["sh", "-c"] and "head -c 1234 | base64 -d | tar -xzf - -C /tmp/ray-efa-eks/src/r1" in cmd[2], cmd


def test_tarball_holds_the_workloads_package_without_caches():
    names = tarfile.open(fileobj=io.BytesIO(workloads_tarball()), mode="r:gz").getnames()
    assert "workloads/train.py" in names and "workloads/__init__.py" in names, f"missing modules in {names[:10]}"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")], "caches must not be shipped"


class Exec:
    """The head pod's exec: the submit answers as Ray 2.58's `ray job submit --no-wait` does (its success box,
    tests/support/_ray_jobs.py), `cat` the summary."""

    def __init__(self):
        self.calls = []

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        self.calls.append((pod, namespace, command, stdin))
        if command[:3] == ["ray", "job", "submit"]:
            return ExecResult(0, "2026-12-06 05:21:51,924\tSUCC cli.py:67 -- Job 'r1' submitted successfully\n", "")
        return ExecResult(0, "", "")


def test_workloads_are_copied_into_the_head_pod_before_submitting():
    ex = Exec()
    job_id = HeadJobs(ex, "head-0", "ray").submit(ARGS, {}, "r1")
    first = ex.calls[0]
    assert (first[0], first[1], job_id) == ("head-0", "ray", "r1"), f"expected exec into ray/head-0, got {first[:2]}"
    payload = base64.b64decode(first[3])
    names = tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz").getnames()
    assert "workloads/train.py" in names, f"the stdin payload must be the workloads tarball, got {names[:5]}"
    assert ex.calls[1][2][:3] == ["ray", "job", "submit"], f"expected submit second, got {ex.calls[1][2][:3]}"


class EndedJob:
    """A target (a FollowPlace, automation/ray_head.py) whose job server's job has already ended FAILED with `log`."""

    poll_s, job_timeout_s, hang_bound = 5.0, None, None

    def __init__(self, log: list[str]):
        self.log = log

    def jobs(self):
        return self

    def on_line(self, line):
        pass

    def note(self, text):
        raise AssertionError(f"an ended job is followed without a note, got {text!r}")

    def clock(self):
        return 0.0

    def job_status(self, job_id):
        return JobState("FAILED", "Job entrypoint command failed with exit code 1")

    def job_logs(self, job_id, offset, final=False):
        return LogChunk(tuple(self.log[offset:]), len(self.log))

    def stop_job(self, job_id):
        raise AssertionError("an ended job is not stopped")


def test_failed_job_surfaces_with_its_log_tail():
    log = [f"line {i}" for i in range(100)] + ["RuntimeError: NCCL error: unhandled system error"]
    end = follow_job(EndedJob(log), "r1")
    result = train_result(outcome_of(end, ARGS, None))
    assert result.status == "fail" and "ended FAILED" in result.summary, f"got {result.status}: {result.summary[:200]}"
    assert "RuntimeError: NCCL error: unhandled system error" in result.summary, "the log tail must carry the error"
    assert "line 10\n" not in result.summary, "only the tail of the log belongs in the summary"


def test_succeeded_job_without_summary_fails():
    result = train_result(TrainOutcome("r1", "SUCCEEDED", None, (), ARGS))
    assert result.status == "fail" and "wrote no summary" in result.summary, result.summary
