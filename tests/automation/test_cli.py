"""Bad input gets one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from automation import cli, flags
from workloads.config import runs_root


def run_cli(capsys, *argv):
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig_file(tmp_path, server):
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return path


def test_unknown_stack_lists_the_known_ones(capsys):
    rc, out, err = run_cli(capsys, "preflight", "--stack", "eu-nowhere-1")
    assert rc == 2, f"expected exit 2, got {rc}"
    assert "stack 'eu-nowhere-1'" in err and "known stacks are us-east-2, us-west-2" in " ".join(err.split()), err
    assert "Traceback" not in out + err


def test_unknown_target_is_refused_by_the_parser(capsys):
    rc, out, err = run_cli(capsys, "run", "--target", "gcp")
    assert rc == 2 and "invalid choice: 'gcp'" in err, f"got rc={rc}: {err}"


def test_aws_target_without_stack_names_the_known_stacks(capsys):
    rc, out, err = run_cli(capsys, "verify", "--target", "aws")
    assert rc == 2 and "--target aws needs --stack NAME" in " ".join(err.split()), f"got rc={rc}: {err}"


def test_cloud_commands_are_refused_for_the_local_target(capsys):
    rc, out, err = run_cli(capsys, "up", "--target", "local")
    assert rc == 2 and "`up` has no meaning for --target local" in " ".join(err.split()), f"got rc={rc}: {err}"


def test_missing_kubeconfig_file_is_a_clear_error(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "verify", "--stack", "us-west-2", "--kubeconfig", str(tmp_path / "absent"))
    assert rc == 2 and "does not exist" in err, f"got rc={rc}: {err}"
    assert "Traceback" not in out + err


def test_unreachable_cluster_is_a_clear_failure(capsys, tmp_path):
    port = closed_port()
    rc, out, err = run_cli(
        capsys,
        "verify",
        "--stack",
        "us-west-2",
        "--kubeconfig",
        str(kubeconfig_file(tmp_path, f"http://127.0.0.1:{port}")),
    )
    text = " ".join((out + err).split())
    assert rc == 1, f"expected exit 1, got {rc}"
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in text, text
    assert "Traceback" not in text


def test_missing_pulumi_cli_says_how_to_install(capsys, monkeypatch):
    monkeypatch.setattr("automation.targets.aws.shutil.which", lambda name: None)
    rc, out, err = run_cli(capsys, "preview", "--stack", "us-west-2")
    assert rc == 2 and "https://www.pulumi.com/docs/install/" in " ".join(err.split()), f"got rc={rc}: {err}"
    assert "Traceback" not in out + err


def test_missing_pulumi_cli_is_reported_before_preflight_runs(capsys, monkeypatch):
    monkeypatch.setattr("automation.targets.aws.shutil.which", lambda name: None)
    monkeypatch.setattr(
        "automation.steps.preflight.run_preflight", lambda *a: pytest.fail("preflight must not run without pulumi")
    )
    rc, out, err = run_cli(capsys, "run", "--stack", "us-west-2")
    assert rc == 2, f"expected exit 2, got {rc}"


def test_json_errors_leave_stdout_one_json_document(capsys):
    rc, out, err = run_cli(capsys, "preflight", "--stack", "eu-nowhere-1", "--json")
    doc = json.loads(out)
    assert (rc, doc["ok"]) == (2, False) and "eu-nowhere-1" in doc["error"], f"got rc={rc}, doc={doc}"


def test_target_defaults_to_local_without_a_stack():
    args = cli.build_parser().parse_args(["run"])
    assert flags.resolve_target(args) == "local"


def test_target_defaults_to_aws_with_a_stack():
    args = cli.build_parser().parse_args(["run", "--stack", "us-west-2"])
    assert flags.resolve_target(args) == "aws"


def _aws_steps(monkeypatch, **behaviour):
    """The AWS pipeline with each named step replaced: an exception to raise, or a passing result."""
    from automation import steps
    from automation.pipeline import StepResult
    from automation.targets import aws

    monkeypatch.setattr(aws.shutil, "which", lambda name: "/usr/local/bin/pulumi")
    monkeypatch.setattr(
        aws.AwsTarget, "price", lambda self, gpu_nodes=None: aws.CostEstimate(None, (), "not priced in tests")
    )
    for name in aws.PIPELINE:
        outcome = behaviour.get(name)

        def step(target, prior, name=name, outcome=outcome):
            if outcome is not None:
                raise outcome
            return StepResult(name, "pass", f"{name} ok")

        monkeypatch.setitem(steps.STEPS, name, step)


def test_bad_input_error_after_up_prints_the_destroy_advice(capsys, monkeypatch):
    from automation.errors import DriverError

    _aws_steps(monkeypatch, verify=DriverError("stack us-west-2 has no kubeconfig output (is it up?)", exit_code=2))
    rc, out, err = run_cli(capsys, "run", "--stack", "us-west-2", "--yes")
    text = " ".join((out + err).split())
    assert rc == 1, f"expected exit 1 (a failed step), got {rc}: {text}"
    for expected in (
        "failed at verify",
        "is up and costs money",
        "python -m automation run --stack us-west-2",
        "python -m automation destroy --stack us-west-2",
    ):
        assert expected in text, f"expected {expected!r} in {text!r}"


def test_aws_interrupt_names_the_step_and_what_exists(capsys, monkeypatch):
    _aws_steps(monkeypatch, up=KeyboardInterrupt())
    rc, out, err = run_cli(capsys, "run", "--stack", "us-west-2", "--yes")
    text = " ".join((out + err).split())
    assert rc == 130, f"expected exit 130, got {rc}: {text}"
    assert "started locally" not in text, f"an AWS run stops nothing locally: {text!r}"
    for expected in (
        "interrupted during step up",
        "may be partly created",
        "python -m automation run --stack us-west-2",
        "python -m automation destroy --stack us-west-2",
    ):
        assert expected in text, f"expected {expected!r} in {text!r}"


# ---- bad input is refused before any cloud call or Ray start -------------------------------------
def no_ray_start(monkeypatch):
    monkeypatch.setattr(
        "automation.local_ray.LocalRayCluster.start", lambda self: pytest.fail("bad input must not start Ray")
    )


def test_empty_stack_is_refused_not_read_as_local(capsys, monkeypatch):
    no_ray_start(monkeypatch)
    rc, out, err = run_cli(capsys, "run", "--stack", "")
    assert rc == 2 and "argument --stack: an empty name is no stack" in err, f"got rc={rc}: {err}"


@pytest.mark.parametrize(
    ("argv", "takes"),
    [
        (["destroy", "--stack", "us-west-2", "--plan"], "`destroy` takes"),
        (["render", "--steps", "3"], "`render` takes"),
    ],
    ids=["destroy --plan", "render --steps"],
)
def test_flag_the_command_does_not_take_is_refused_naming_the_command(capsys, argv, takes):
    rc, out, err = run_cli(capsys, *argv)
    text = " ".join(err.split())
    assert rc == 2 and "unrecognized arguments" in text and takes in text, f"got rc={rc}: {text}"


@pytest.mark.parametrize(
    ("flag", "value"), [("--steps", "0"), ("--num-workers", "0"), ("--num-workers", "-1"), ("--steps", "two")]
)
def test_count_below_one_is_refused_not_read_as_the_default(capsys, monkeypatch, flag, value):
    no_ray_start(monkeypatch)
    rc, out, err = run_cli(capsys, "run", flag, value)
    assert rc == 2 and f"argument {flag}: " in err and "pass a whole number >= 1" in err, f"got rc={rc}: {err}"


def test_run_id_that_is_a_path_is_refused(capsys):
    rc, out, err = run_cli(capsys, "train", "--stack", "us-west-2", "--run-id", "../x")
    text = " ".join(err.split())
    assert rc == 2 and "argument --run-id: '../x' is not a run id" in text, f"got rc={rc}: {text}"


def test_unknown_aws_profile_is_one_line_that_names_it_and_the_local_run(capsys, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-for-tests")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    rc, out, err = run_cli(capsys, "preflight", "--stack", "us-west-2")
    text = " ".join(err.split())
    assert rc == 2 and "AWS_PROFILE='no-such-profile-for-tests'" in text, f"got rc={rc}: {text}"
    assert "`python -m automation run` (no --stack) runs the same job locally" in text, text
    assert "Traceback" not in out + err


def test_missing_pulumi_cli_mentions_the_local_run(capsys, monkeypatch):
    monkeypatch.setattr("automation.targets.aws.shutil.which", lambda name: None)
    rc, out, err = run_cli(capsys, "up", "--stack", "us-west-2")
    text = " ".join(err.split())
    assert rc == 2 and "`python -m automation run` (no --stack) runs the same job locally" in text, text


def test_missing_credentials_fix_mentions_the_local_run():
    from botocore.exceptions import NoCredentialsError

    from automation.steps.preflight import check_credentials

    class NoCredentials:
        def get_caller_identity(self):
            raise NoCredentialsError()

    finding, _ = check_credentials(NoCredentials())
    assert finding.status == "fail" and "`python -m automation run` runs locally" in finding.fix, f"got {finding}"


def test_report_says_where_the_run_files_are(capsys, monkeypatch):
    _aws_steps(monkeypatch)
    rc, out, err = run_cli(capsys, "run", "--stack", "us-west-2", "--yes", "--run-id", "r7", "--json")
    doc = json.loads(out)
    assert (rc, doc["files"].split(" ")[0]) == (0, "/tmp/ray-efa-eks/runs/r7"), f"got rc={rc}, files={doc['files']!r}"


def test_verify_that_cannot_reach_the_cluster_does_not_say_it_is_up(capsys, monkeypatch):
    # an unreachable kubeconfig is no proof that anything exists: once it said "is up and costs money"
    from automation.errors import DriverError

    _aws_steps(monkeypatch, verify=DriverError("cannot reach the Kubernetes API at https://10.0.0.1: timed out"))
    rc, out, err = run_cli(capsys, "verify", "--stack", "us-west-2")
    text = " ".join((out + err).split())
    assert rc == 1 and "is up" not in text, f"expected exit 1 without 'is up', got {rc}: {text}"
    assert "status --stack us-west-2" in text, f"expected the status command that says what exists in {text!r}"


def test_report_of_a_run_that_stopped_before_up_shows_no_cost(capsys, monkeypatch):
    from automation.errors import DriverError

    _aws_steps(monkeypatch, preflight=DriverError("no AWS credentials"))
    from automation.cost import CostEstimate

    monkeypatch.setattr("automation.targets.aws.AwsTarget.price", lambda self: CostEstimate(9.0, ()))
    rc, out, err = run_cli(capsys, "run", "--stack", "us-west-2", "--yes", "--json")
    doc = json.loads(out)
    assert doc.get("cost") is None, f"expected no cost for a run that created nothing, got {doc.get('cost')}"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_command_takes_ctrl_cs_path_and_exits_130(capsys, monkeypatch, sig):
    # The real run under each signal is tests/automation/targets/test_local_run.py (SIGINT in the default
    # tier, SIGTERM in the slow one); this proves in-process that both reach the same KeyboardInterrupt.
    import os
    import signal
    import time

    def run(args, ui):
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(5)  # the handler interrupts this at once
        raise AssertionError(f"{sig} did not interrupt the command")

    monkeypatch.setattr("automation.commands.status.run", run)
    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    rc, _, err = run_cli(capsys, "status")
    assert rc == 130, f"{sig}: expected exit 130, got {rc}: {err}"
    assert time.monotonic() - t0 < 4, f"{sig} waited for the command instead of interrupting it"
    assert "interrupted" in err, err
    assert signal.getsignal(signal.SIGTERM) is before, "main did not put the previous SIGTERM handler back"


# ---- A refused command starts no run: nothing is left under the runs directory (issue 36: a newcomer's
# runs/ filled with empty folders of commands that never ran).

REFUSED = {
    "steps-0": ("run", "--steps", "0"),
    "run-id-dotdot": ("run", "--run-id", "../x"),
    "unknown-stack": ("run", "--stack", "nosuch"),
    "resume-without-stack": ("run", "--resume", "r1"),
    "report-unknown-run": ("report", "no-such-run"),
}


@pytest.mark.parametrize("argv", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_command_leaves_nothing_under_runs(argv, capsys):
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # argparse's refusals
        rc = e.code
    left = sorted(p.name for p in runs_root().rglob("*")) if runs_root().exists() else []
    assert (rc, left) == (2, []), f"{' '.join(argv)}: expected exit 2 and nothing under {runs_root()}, got {rc}, {left}"


def test_a_job_a_command_builds_wrongly_is_bad_input_in_one_line(capsys, monkeypatch):
    from automation.commands import clean
    from workloads.config import TrainConfigError

    def builds_a_bad_job(args, ui):  # as bench's cluster_job or the drill's local_job refuse a job
        raise TrainConfigError("train.steps: 0 is below 1")

    monkeypatch.setattr(clean, "run", builds_a_bad_job)
    rc, out, err = run_cli(capsys, "clean")
    assert (rc, "train.steps: 0 is below 1" in err, "Traceback" in err) == (2, True, False), f"got {rc}: {err!r}"
