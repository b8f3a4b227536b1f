"""`automation logs` against the fake Kubernetes API with a scripted exec: which pod it follows, with
which command, and what it prints."""

from __future__ import annotations

import json

import _driver_helpers as helpers
import pytest
from _driver_helpers import KubeWithExec

from automation.cli import build_parser
from automation.commands import logs
from automation.errors import DriverError
from automation.kube import ExecResult
from automation.targets.aws import AwsDeps
from workloads.nccl_check import run_marker

HEAD = "ray-efa-head-9xk2q"
WORKERS = ("ray-efa-gpu-workers-worker-4kq7d", "ray-efa-gpu-workers-worker-tz8mb")
RANK3_LOG = "/tmp/ray/session_latest/logs/worker-ab12-01000000-4242.out"


def answer(pod, cmd, stdin):
    text = " ".join(cmd)
    if "ls -1t" in text:
        return ExecResult(0, "r-newest\n", "")
    if cmd[:3] == ["ray", "job", "logs"]:
        return ExecResult(0, "\x1b[36m(RayTrainWorker pid=1)\x1b[0m [train] step 1/20\n", "")
    if "grep -l" in text:
        holds = pod == WORKERS[1] and run_marker("r1", 3) in text
        return ExecResult(0, RANK3_LOG + "\n" if holds else "", "")
    if cmd[0] == "tail":
        return ExecResult(0, "rank 3 says hello\n", "")
    raise AssertionError(f"unexpected command {cmd} in {pod}")


def follow(argv, capsys):
    """Run `logs --stack us-west-2 ARGV` against the fake API (kubeconfig from the stack's output)."""
    scripted = helpers.ScriptedExec(answer)
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", {"kubeconfig": json.dumps(api.kubeconfig())})
        deps = AwsDeps(client=None, stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, scripted))
        args = build_parser().parse_args(["logs", "--stack", "us-west-2", *argv])
        rc = logs.run(args, NullUi(), deps)
    return rc, scripted.calls, capsys.readouterr().out


class NullUi:
    def note(self, text):
        pass


def test_driver_log_follows_the_run_on_the_head_pods_job_server(capsys):
    rc, calls, _ = follow(["r1"], capsys)
    expected = (HEAD, "ray", ["ray", "job", "logs", "--address", "http://127.0.0.1:8265", "--follow", "r1"])
    assert calls[-1][:3] == expected, f"expected {expected}, got {calls[-1][:3]}"


def test_driver_log_lines_are_printed_without_colour_codes(capsys):
    _, _, out = follow(["r1"], capsys)
    assert out == "(RayTrainWorker pid=1) [train] step 1/20\n", f"got {out!r}"


def test_without_a_run_id_the_newest_run_is_followed(capsys):
    _, calls, _ = follow([], capsys)
    assert calls[-1][2][-1] == "r-newest", f"expected the newest run r-newest, got {calls[-1][2]}"


def test_worker_log_is_the_file_holding_that_ranks_marker(capsys):
    rc, calls, out = follow(["r1", "--worker", "3"], capsys)
    expected = (WORKERS[1], "ray", ["tail", "-n", "+1", "-F", RANK3_LOG])
    assert calls[-1][:3] == expected, f"expected {expected}, got {calls[-1][:3]}"
    assert out == "rank 3 says hello\n", f"got {out!r}"


def test_unknown_rank_is_bad_input_naming_the_flag(capsys):
    with pytest.raises(DriverError, match=r"--worker 9: no log of rank 9 of run r1") as e:
        follow(["r1", "--worker", "9"], capsys)
    assert e.value.exit_code == 2
