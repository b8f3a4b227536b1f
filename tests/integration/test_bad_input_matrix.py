"""Bad input at every entry point: `python -m automation`, `python -m workloads.train`,
`python -m workloads.nccl_check` and the Pulumi program (rendered under Pulumi's mocks by
`python -m automation render`, with a bad stack file in a copy of the project directory).

Each case is run once (in-process through the entry point's `main(argv)` where it has one, as a
subprocess where the process boundary matters) and three tests judge it: the documented exit code,
a message naming the offending input, and no traceback. Exit codes: automation 2 for bad input;
workloads.train 2; workloads.nccl_check 3 for bad input and 2 for an inconclusive (empty) log."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EFA_LOG = REPO / "tests" / "fixtures" / "nccl" / "efa_unprefixed_ofi1.20.log"  # a passing 2-node log
# One line of the metrics schema (workloads/metrics.py), so `report` gets as far as --compare.
METRICS_LINE = (
    '{"schema": 1, "run_id": "r1", "time": 0, "step": 1, "total_steps": 1, "loss": 1.0, "lr": 0.001, '
    '"tokens_per_s": 1.0, "tokens_per_s_per_gpu": null, "mfu": null, "step_time_s": 1.0, "data_wait_s": 0.0, '
    '"peak_mem_gb": 1.0, "grad_norm": null}\n'
)
STACK_KEYS_OK = "  aws:region: us-west-2\n  ray-efa-eks:gpuAvailabilityZone: us-west-2a\n"


@dataclass(frozen=True)
class Case:
    """`argv` of `entry`; "{dir}" in it is a fresh directory `setup` may fill; `names`: the
    strings the error output must hold (the key or flag, the value)."""

    entry: str  # automation | train | nccl | automation-proc | train-proc | nccl-proc
    argv: tuple[str, ...]
    exit_code: int
    names: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)


def stack_file(text: str | bytes) -> Callable[[Path], None]:
    """A copy of the project (Pulumi.yaml, __main__.py) beside a stack `bad` holding `text`."""

    def setup(d: Path) -> None:
        for name in ("Pulumi.yaml", "__main__.py"):
            shutil.copy(REPO / name, d / name)
        target = d / "Pulumi.bad.yaml"
        target.write_bytes(text if isinstance(text, bytes) else text.encode())

    return setup


def stack_keys(extra: str) -> Callable[[Path], None]:
    return stack_file("config:\n" + STACK_KEYS_OK + extra)


def project_yaml(text: str | None) -> Callable[[Path], None]:
    """A good stack file beside a Pulumi.yaml holding `text` (None: no Pulumi.yaml at all)."""

    def setup(d: Path) -> None:
        shutil.copy(REPO / "Pulumi.us-west-2.yaml", d / "Pulumi.bad.yaml")
        shutil.copy(REPO / "__main__.py", d / "__main__.py")
        if text is not None:
            (d / "Pulumi.yaml").write_text(text)

    return setup


def files(contents: dict[str, str]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for name, text in contents.items():
            path = d / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    return setup


def fifo(name: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)

    return setup


def bad_stack(argv_tail: tuple[str, ...] = ()) -> tuple[str, ...]:
    return ("preflight", "--stack", "bad", "--project-dir", "{dir}", *argv_tail)


def render_bad() -> tuple[str, ...]:
    return ("render", "--stack", "bad", "--project-dir", "{dir}")


A = "automation"
CASES: dict[str, Case] = {
    # --- python -m automation: flags ---
    "run-empty-stack": Case(A, ("run", "--stack", ""), 2, ("--stack", "empty")),
    "run-num-workers-0": Case(A, ("run", "--num-workers", "0"), 2, ("--num-workers", "0")),
    "run-steps-0": Case(A, ("run", "--steps", "0"), 2, ("--steps", "0")),
    "run-steps-negative": Case(A, ("run", "--steps", "-3"), 2, ("--steps", "-3")),
    "run-num-workers-negative": Case(A, ("run", "--num-workers", "-1"), 2, ("--num-workers", "-1")),
    "run-steps-word": Case(A, ("run", "--steps", "two"), 2, ("--steps", "'two'")),
    "run-num-workers-float": Case(A, ("run", "--num-workers", "1.5"), 2, ("--num-workers", "'1.5'")),
    "run-plan-local": Case(A, ("run", "--plan"), 2, ("--plan", "local")),
    "run-kubeconfig-local": Case(A, ("run", "--kubeconfig", "kc"), 2, ("--kubeconfig", "local")),
    "run-use-gpu-aws": Case(A, ("run", "--stack", "us-west-2", "--use-gpu"), 2, ("--use-gpu", "aws")),
    "run-resume-without-stack": Case(A, ("run", "--resume", "r1"), 2, ("--resume", "--stack")),
    "run-run-id-dotdot": Case(A, ("run", "--run-id", "../x"), 2, ("--run-id", "'../x'")),
    "train-run-id-slash": Case(A, ("train", "--stack", "us-west-2", "--run-id", "a/b"), 2, ("--run-id", "'a/b'")),
    "run-resume-dotdot": Case(A, ("run", "--stack", "us-west-2", "--resume", "../x"), 2, ("--resume", "'../x'")),
    "run-unknown-flag": Case(A, ("run", "--bogus"), 2, ("--bogus",)),
    "run-target-unknown": Case(A, ("run", "--target", "gcp"), 2, ("--target", "'gcp'")),
    "run-target-aws-no-stack": Case(A, ("run", "--target", "aws"), 2, ("--target aws", "--stack")),
    "run-stack-with-target-local": Case(
        A, ("run", "--stack", "us-west-2", "--target", "local"), 2, ("--stack us-west-2", "--target local")
    ),
    "run-unknown-stack": Case(A, ("run", "--stack", "nosuch"), 2, ("nosuch", "us-west-2")),
    "unknown-command": Case(A, ("frobnicate",), 2, ("'frobnicate'",)),
    "destroy-plan": Case(A, ("destroy", "--stack", "us-west-2", "--plan"), 2, ("--plan", "destroy")),
    "render-steps": Case(A, ("render", "--stack", "us-west-2", "--steps", "5"), 2, ("--steps", "render")),
    "preview-local": Case(A, ("preview",), 2, ("`preview`", "--stack")),
    "clean-keep-negative": Case(A, ("clean", "--keep", "-1"), 2, ("--keep", "-1")),
    "clean-keep-word": Case(A, ("clean", "--keep", "many"), 2, ("--keep", "'many'")),
    "report-unknown-run": Case(A, ("report", "no-such-run", "--runs-root", "{dir}"), 2, ("no-such-run",)),
    "report-compare-unknown": Case(
        A,
        ("report", "{dir}/runs/r1", "--compare", "no-such-run", "--runs-root", "{dir}/runs"),
        2,
        ("no-such-run",),
        files({"runs/r1/metrics.jsonl": METRICS_LINE}),
    ),
    "logs-without-stack": Case(A, ("logs",), 2, ("--stack",)),
    "logs-worker-word": Case(A, ("logs", "--stack", "us-west-2", "--worker", "x"), 2, ("--worker", "'x'")),
    "preflight-use-gpu-no-gpu": Case(A, ("preflight", "--use-gpu"), 1, ("--use-gpu", "0 local GPUs")),
    "run-aws-without-pulumi-cli": Case(
        A, ("run", "--stack", "us-west-2"), 2, ("pulumi CLI",), env={"PATH": "/nonexistent"}
    ),
    "verify-kubeconfig-missing": Case(
        A, ("verify", "--stack", "us-west-2", "--kubeconfig", "{dir}/kc"), 2, ("kubeconfig", "kc' does not exist")
    ),
    "status-kubeconfig-not-one": Case(
        A,
        ("status", "--stack", "us-west-2", "--kubeconfig", "{dir}/kc"),
        2,
        ("kc", "no clusters"),
        files({"kc": "hello\n"}),
    ),
    "logs-worker-negative": Case(
        A, ("logs", "--stack", "us-west-2", "--worker", "-1", "--kubeconfig", "{dir}/kc"), 2, ("--worker -1",)
    ),
    "dashboard-port-word": Case(A, ("dashboard", "--stack", "us-west-2", "--port", "p"), 2, ("--port", "'p'")),
    "aws-profile-unknown": Case(
        A,
        ("preflight", "--stack", "us-west-2"),
        2,
        ("AWS_PROFILE", "no-such-profile-xyz"),
        env={"AWS_PROFILE": "no-such-profile-xyz", "AWS_CONFIG_FILE": "/nonexistent/config"},
    ),
    # --- stack files (the Pulumi program's config, read by every AWS command) ---
    "stack-not-yaml": Case(A, bad_stack(), 2, ("Pulumi.bad.yaml", "line"), stack_file("config: [broken\n")),
    "stack-not-utf8": Case(A, bad_stack(), 2, ("Pulumi.bad.yaml", "UTF-8"), stack_file(b"config:\n  x: \xff\xfe\n")),
    "stack-region-misspelled": Case(
        A, bad_stack(), 2, ("aws:region", "us-wset-2"), stack_file("config:\n  aws:region: us-wset-2\n")
    ),
    "stack-node-count-huge": Case(
        A, bad_stack(), 2, ("gpuNodeCount", "100000"), stack_keys("  ray-efa-eks:gpuNodeCount: 100000\n")
    ),
    "stack-node-count-negative": Case(
        A, bad_stack(), 2, ("gpuNodeCount", "-2"), stack_keys("  ray-efa-eks:gpuNodeCount: -2\n")
    ),
    "stack-node-count-word": Case(
        A, bad_stack(), 2, ("gpuNodeCount", "two"), stack_keys("  ray-efa-eks:gpuNodeCount: two\n")
    ),
    "stack-node-count-float": Case(
        A, bad_stack(), 2, ("gpuNodeCount", "1.5"), stack_keys("  ray-efa-eks:gpuNodeCount: 1.5\n")
    ),
    "stack-namespace-misspelled": Case(
        A, bad_stack(), 2, ("ray-efa-ek:gpuNodeCount",), stack_keys("  ray-efa-ek:gpuNodeCount: 2\n")
    ),
    "stack-bare-key": Case(A, bad_stack(), 2, ("gpuNodeCount", "ray-efa-eks:"), stack_keys("  gpuNodeCount: 2\n")),
    "stack-key-misspelled": Case(
        A, bad_stack(), 2, ("gpuNodeCnt", "gpuNodeCount"), stack_keys("  ray-efa-eks:gpuNodeCnt: 2\n")
    ),
    "stack-train-key-misspelled": Case(
        A, bad_stack(), 2, ("stepz", "steps"), stack_keys("  ray-efa-eks:train:\n    stepz: 5\n")
    ),
    "stack-train-value-negative": Case(
        A, bad_stack(), 2, ("steps", "-5"), stack_keys("  ray-efa-eks:train:\n    steps: -5\n")
    ),
    "stack-train-value-word": Case(
        A, bad_stack(), 2, ("steps", "many", "a whole number"), stack_keys("  ray-efa-eks:train:\n    steps: many\n")
    ),
    "stack-train-not-mapping": Case(
        A, bad_stack(), 2, ("ray-efa-eks:train",), stack_keys("  ray-efa-eks:train: [1, 2]\n")
    ),
    "stack-config-not-mapping": Case(A, bad_stack(), 2, ("Pulumi.bad.yaml", "config"), stack_file("config:\n- a\n")),
    "stack-bool-word": Case(
        A, bad_stack(), 2, ("gpuCapacityBlock", "maybe"), stack_keys("  ray-efa-eks:gpuCapacityBlock: maybe\n")
    ),
    "project-yaml-missing": Case(A, bad_stack(), 2, ("Pulumi.yaml",), project_yaml(None)),
    "project-yaml-broken": Case(A, bad_stack(), 2, ("Pulumi.yaml", "line"), project_yaml("name: [broken\n")),
    # --- the Pulumi program under the mock engine ---
    "render-not-yaml": Case(A, render_bad(), 2, ("Pulumi.bad.yaml",), stack_file("config: [broken\n")),
    "render-region-misspelled": Case(
        A, render_bad(), 2, ("aws:region", "us-wset-2"), stack_file("config:\n  aws:region: us-wset-2\n")
    ),
    "render-node-count-huge": Case(
        A, render_bad(), 2, ("gpuNodeCount", "100000"), stack_keys("  ray-efa-eks:gpuNodeCount: 100000\n")
    ),
    "render-bare-key": Case(A, render_bad(), 2, ("gpuNodeCount",), stack_keys("  gpuNodeCount: 2\n")),
    "render-no-gpu-az": Case(
        A,
        render_bad(),
        2,
        ("gpuAvailabilityZone", "python -m automation preflight --stack bad"),
        stack_file("config:\n  aws:region: us-east-2\n  ray-efa-eks:availabilityZones: [us-east-2a, us-east-2b]\n"),
    ),
    "render-project-yaml-missing": Case(A, render_bad(), 2, ("Pulumi.yaml",), project_yaml(None)),
    # --- python -m workloads.train ---
    "train-seq-len-huge": Case("train", ("--preset", "tiny", "--seq-len", "99999999"), 2, ("--seq-len", "99999999")),
    "train-use-gpu-no-gpu": Case("train", ("--preset", "tiny", "--use-gpu"), 2, ("--use-gpu",)),
    "train-steps-0": Case("train", ("--preset", "tiny", "--steps", "0"), 2, ("--steps", "0")),
    "train-steps-negative": Case("train", ("--preset", "tiny", "--steps", "-1"), 2, ("--steps", "-1")),
    "train-steps-word": Case("train", ("--steps", "abc"), 2, ("--steps", "'abc'", "pass a whole number")),
    "train-num-workers-0": Case("train", ("--preset", "tiny", "--num-workers", "0"), 2, ("--num-workers", "0")),
    "train-lr-word": Case("train", ("--lr", "fast"), 2, ("--lr", "'fast'", "pass a number")),
    "train-preset-unknown": Case("train", ("--preset", "nosuch"), 2, ("--preset", "'nosuch'")),
    "train-launcher-unknown": Case("train", ("--launcher", "mpi"), 2, ("--launcher", "'mpi'")),
    "train-unknown-flag": Case("train", ("--bogus-flag",), 2, ("--bogus-flag",)),
    "train-run-id-dotdot": Case("train", ("--preset", "tiny", "--run-id", "../x"), 2, ("--run-id", "../x")),
    "train-batch-not-divisible": Case(
        "train",
        ("--preset", "tiny", "--num-workers", "2", "--global-batch-size", "3"),
        2,
        ("--global-batch-size", "3"),
    ),
    "train-data-missing": Case(
        "train", ("--preset", "tiny", "--data", "{dir}/nothing-here"), 2, ("--data", "nothing-here")
    ),
    # --- python -m workloads.nccl_check ---
    "nccl-missing-path": Case("nccl", ("{dir}/no-such.log",), 3, ("no-such.log",)),
    "nccl-unknown-flag": Case("nccl", ("--bogus", "{dir}"), 3, ("--bogus",)),
    "nccl-require-unknown": Case("nccl", ("--require", "tcp", "{dir}"), 3, ("--require", "'tcp'")),
    "nccl-no-path": Case("nccl", (), 3, ("PATH",)),
    "nccl-only-log-empty": Case(
        "nccl", ("{dir}/nccl",), 3, ("nccl.rank0.log", "empty"), files({"nccl/nccl.rank0.log": ""})
    ),
    "nccl-one-worker-log-empty": Case(
        "nccl",
        ("{dir}/nccl",),
        2,
        ("nccl.rank1.log", "empty"),
        files({"nccl/nccl.rank0.log": EFA_LOG.read_text(), "nccl/nccl.rank1.log": ""}),
    ),
    "nccl-folder-holding-fifo": Case(
        "nccl", ("{dir}/nccl",), 3, ("nccl.rank1.log", "FIFO"), fifo("nccl/nccl.rank1.log")
    ),
    "nccl-not-nccl-text": Case("nccl", ("{dir}/x.log",), 3, ("x.log",), files({"x.log": "hello\n"})),
    # --- as processes, where the process boundary matters ---
    "nccl-proc-fifo": Case("nccl-proc", ("{dir}/pipe.log",), 3, ("pipe.log", "FIFO"), fifo("pipe.log")),
    "nccl-proc-dev-zero": Case("nccl-proc", ("/dev/zero",), 3, ("/dev/zero",)),
    "automation-proc-steps-0": Case("automation-proc", ("run", "--steps", "0"), 2, ("--steps", "0")),
    "train-proc-seq-len-huge": Case(
        "train-proc", ("--preset", "tiny", "--seq-len", "99999999"), 2, ("--seq-len", "99999999")
    ),
}


MAINS = {"automation": "automation.cli", "train": "workloads.train", "nccl": "workloads.nccl_check.__main__"}
MODULES = {"automation-proc": "automation", "train-proc": "workloads.train", "nccl-proc": "workloads.nccl_check"}


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None
    output: str  # stdout and stderr together: whatever the user sees


def run_in_process(case: Case, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Outcome:
    import importlib

    main = importlib.import_module(MAINS[case.entry]).main
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own exit
            rc = e.code
        except BaseException:  # noqa: BLE001 - a traceback is what the matrix looks for
            import traceback

            traceback.print_exc(file=err)
            rc = None
    return Outcome(rc, out.getvalue() + err.getvalue())


def run_as_process(case: Case, argv: list[str], cwd: Path) -> Outcome:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400", **case.env)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", MODULES[case.entry], *argv],
            capture_output=True,
            text=True,
            timeout=60,  # /dev/zero and a FIFO must be refused, not read forever
            cwd=cwd,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        return Outcome(None, f"timed out after 60 s: {e.stderr!r}")
    return Outcome(proc.returncode, proc.stdout + proc.stderr)


_OUTCOMES: dict[str, Outcome] = {}


@pytest.fixture
def outcome(request, tmp_path, monkeypatch) -> Outcome:
    """The case's outcome, run once however many tests judge it."""
    name = request.param
    if name not in _OUTCOMES:
        case = CASES[name]
        if case.setup:
            case.setup(tmp_path)
        argv = [a.replace("{dir}", str(tmp_path)) for a in case.argv]
        monkeypatch.chdir(tmp_path)  # runs/ and reports land in the case's own directory
        monkeypatch.setenv("COLUMNS", "400")  # argparse and rich print the whole line
        if case.entry in MAINS:
            _OUTCOMES[name] = run_in_process(case, argv, monkeypatch)
        else:
            _OUTCOMES[name] = run_as_process(case, argv, tmp_path)
    return _OUTCOMES[name]


def cases(test):
    return pytest.mark.parametrize("outcome", list(CASES), indirect=True)(test)


@cases
def test_bad_input_exits_with_its_documented_code(outcome, request):
    case = CASES[request.node.callspec.params["outcome"]]
    assert outcome.exit_code == case.exit_code, (
        f"expected exit {case.exit_code} for {' '.join(case.argv)}, got {outcome.exit_code}: {outcome.output[-1500:]}"
    )


@cases
def test_bad_input_message_names_the_input(outcome, request):
    case = CASES[request.node.callspec.params["outcome"]]
    text = " ".join(outcome.output.split())  # a message wrapped by rich is still one message
    missing = [n for n in case.names if n not in text]
    assert missing == [], f"expected the message to name {missing}, got: {outcome.output[-1500:]}"


@cases
def test_bad_input_prints_no_traceback(outcome, request):
    assert "Traceback" not in outcome.output, f"expected one clear line, got a traceback:\n{outcome.output[-3000:]}"


# --- the Pulumi program as `pulumi preview` runs it: Pulumi's Python host prints a pulumi.RunError as
# one error line and any other exception with its traceback
# (https://github.com/pulumi/pulumi/blob/master/sdk/python/cmd/pulumi-language-python-exec) ---
PROGRAM_CASES = {
    "gpu-node-count-huge": ({"ray-efa-eks:gpuNodeCount": "100000"}, ("gpuNodeCount", "100000")),
    "region-misspelled": ({"aws:region": "us-wset-2"}, ("aws:region", "us-wset-2")),
    "gpu-az-empty": ({"ray-efa-eks:gpuAvailabilityZone": ""}, ("gpuAvailabilityZone", "preflight --stack us-west-2")),
    "train-key-misspelled": ({"ray-efa-eks:train": '{"stepz": 5}'}, ("ray-efa-eks:train.stepz", "'steps'")),
}


def program_error(overrides: dict[str, str]) -> BaseException | None:
    """What the program raises for the us-west-2 stack's config with `overrides`, under Pulumi's mocks."""
    import warnings

    from infra.mock_render import run_program, stack_config_values

    values = {**stack_config_values("us-west-2", REPO), **overrides}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_program("us-west-2", REPO, config=values)
    except Exception as e:  # noqa: BLE001 - the exception is what is judged
        return e
    return None


@pytest.mark.parametrize("name", list(PROGRAM_CASES))
def test_pulumi_program_raises_bad_config_as_a_run_error(name):
    import pulumi

    err = program_error(PROGRAM_CASES[name][0])
    assert isinstance(err, pulumi.RunError), f"expected a pulumi.RunError (one line under pulumi), got {err!r}"


@pytest.mark.parametrize("name", list(PROGRAM_CASES))
def test_pulumi_program_error_names_the_key_and_value(name):
    overrides, names = PROGRAM_CASES[name]
    text = str(program_error(overrides))
    missing = [n for n in names if n not in text]
    assert missing == [], f"expected the program's error to name {missing}, got {text!r}"
