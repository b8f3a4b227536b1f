"""The AWS run requires EFA: the target the CLI builds for `run --stack` asks the NCCL check for efa,
and the check step fails a run whose logs show a socket fallback or prove nothing. Real NCCL logs
from tests/fixtures/nccl (its README says where each comes from); no cluster, no Ray."""

from __future__ import annotations

import types

from conftest import FIXTURES

from automation.cli import build_parser, parse
from automation.commands.run_steps import open_target
from automation.steps.check import assert_transport, check_result

SOCKET_LOG = FIXTURES / "nccl" / "socket_cluster_nccl952.log"  # NCCL over NET/Socket between two hosts
EFA_LOG = FIXTURES / "nccl" / "efa_unprefixed_ofi1.20.log"  # aws-ofi-nccl 1.20 over EFA, two nodes


def test_the_cli_builds_the_aws_run_with_efa_required(repo_root):
    args = parse(build_parser(), ["run", "--stack", "us-west-2", "--project-dir", str(repo_root)])
    ui = types.SimpleNamespace(log=print, progress=print, note=print)
    target = open_target(args, ui, deps=object())  # deps given: nothing of the outside world is built
    assert target.run.require == "efa", f"expected the AWS run's NCCL check to require efa, got {target.run.require!r}"


def test_socket_fallback_fails_the_check_step_when_efa_is_required():
    result = check_result(assert_transport([SOCKET_LOG], "efa", run_id=None))
    assert result.status == "fail", f"expected the check to fail on a socket fallback, got {result.status}: {result}"


def test_logs_without_nccl_transport_lines_fail_the_check_step_when_efa_is_required(tmp_path):
    empty = tmp_path / "rank0.log"
    empty.write_text("[train] step 1/2 loss 6.9\n")
    v = assert_transport([empty], "efa", run_id=None)
    result = check_result(v)
    assert result.status == "fail", f"expected a {v.verdict} verdict to fail the AWS check, got {result.status}"


def test_efa_logs_pass_the_check_step():
    result = check_result(assert_transport([EFA_LOG], "efa", run_id=None))
    assert result.status == "pass", f"expected the check to pass on EFA logs, got {result.status}: {result.reason}"
