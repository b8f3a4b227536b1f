"""train: the commands run in the head pod, and how the job's end is read."""

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
    job_status_from_output,
    submit_command,
    submit_on_head,
    upload_command,
    workloads_tarball,
)
from automation.steps.train import train_result
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


def test_submit_passes_working_dir_submission_id_and_runtime_env():
    cmd = submit_command(ARGS, "/tmp/ray-efa-eks/src/r1", {"NCCL_DEBUG": "INFO"})
    opts = dict(zip(cmd[3 : cmd.index("--")][::2], cmd[3 : cmd.index("--")][1::2], strict=True))
    expected = {
        "--address": HEAD_JOB_SERVER,
        "--working-dir": "/tmp/ray-efa-eks/src/r1",
        "--submission-id": "r1",
        "--runtime-env-json": json.dumps({"env_vars": {"NCCL_DEBUG": "INFO"}}, sort_keys=True),
    }
    assert opts == expected, f"expected {expected}, got {opts}"


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


def test_job_status_comes_from_the_closing_line():
    assert job_status_from_output("...\nJob 'r1' failed\n", 1) == "FAILED"
    assert job_status_from_output("...\nJob 'r1' succeeded\n", 0) == "SUCCEEDED"
    assert job_status_from_output("...\nJob 'r1' was stopped\n", 0) == "STOPPED"


def test_job_status_falls_back_to_the_exit_code():
    assert job_status_from_output("connection lost", 1) == "FAILED"


class Exec:
    def __init__(self, submit: ExecResult):
        self.submit = submit
        self.calls = []

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        self.calls.append((pod, namespace, command, stdin))
        if command[:3] == ["ray", "job", "submit"]:
            for line in self.submit.stdout.splitlines():
                on_line and on_line(line)
            return self.submit
        if command[0] == "cat":
            return ExecResult(
                0,
                json.dumps({"steps": 50, "loss_first": 1.0, "loss_last": 0.5, "tokens_per_s": 10.0, "world_size": 8}),
                "",
            )
        return ExecResult(0, "", "")


def test_workloads_are_copied_into_the_head_pod_before_submitting():
    ex = Exec(ExecResult(0, "Job 'r1' succeeded\n", ""))
    submit_on_head(ex, "head-0", "ray", ARGS)
    first = ex.calls[0]
    assert (first[0], first[1]) == ("head-0", "ray"), f"expected exec into ray/head-0, got {first[:2]}"
    payload = base64.b64decode(first[3])
    names = tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz").getnames()
    assert "workloads/train.py" in names, f"the stdin payload must be the workloads tarball, got {names[:5]}"
    assert ex.calls[1][2][:3] == ["ray", "job", "submit"], f"expected submit second, got {ex.calls[1][2][:3]}"


def test_failed_job_surfaces_with_its_log_tail():
    logs = (
        "\n".join(f"line {i}" for i in range(100))
        + "\nRuntimeError: NCCL error: unhandled system error\nJob 'r1' failed\n"
    )
    outcome = submit_on_head(Exec(ExecResult(1, logs, "")), "head-0", "ray", ARGS)
    result = train_result(outcome)
    assert result.status == "fail" and "ended FAILED" in result.summary, f"got {result.status}: {result.summary[:200]}"
    assert "RuntimeError: NCCL error: unhandled system error" in result.summary, "the log tail must carry the error"
    assert "line 10\n" not in result.summary, "only the tail of the log belongs in the summary"


def test_succeeded_job_without_summary_fails():
    result = train_result(TrainOutcome("r1", "SUCCEEDED", None, (), ARGS))
    assert result.status == "fail" and "wrote no summary" in result.summary, result.summary
