"""Bad input at every entry point: `python -m automation`, `python -m workloads.train`,
`python -m workloads.nccl_check` and the Pulumi program (rendered under Pulumi's mocks by
`python -m automation render`, with a bad stack file in a copy of the project directory).

Each case is run once (in-process through the entry point's `main(argv)` where it has one, as a
subprocess where the process boundary matters) and three tests judge it: the documented exit code,
a message naming the offending input, and no traceback. Exit codes: automation 2 for bad input;
workloads.train 2; workloads.nccl_check 3 for bad input and 2 for an inconclusive (empty) log."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from workloads.config import TrainConfig, flag_of

REPO = Path(__file__).resolve().parents[1]
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


def files(contents: dict[str, str | bytes]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for name, text in contents.items():
            path = d / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text if isinstance(text, bytes) else text.encode())

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
    "run-auto-az-local": Case(A, ("run", "--auto-az"), 2, ("--auto-az", "local")),
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
    "scale-without-stack": Case(A, ("scale", "--gpu-nodes", "0"), 2, ("scale needs --stack", "us-west-2")),
    # --stack comes from one parent parser (automation/flags.py), so every command refuses an empty name alike.
    **{
        f"{cmd}-empty-stack": Case(A, (cmd, "--stack", "", *rest), 2, ("--stack", "an empty name is no stack"))
        for cmd, rest in {
            "scale": ("--gpu-nodes", "0"),
            "logs": (),
            "dashboard": (),
            "report": ("r1",),
            "drill": (),
            "bench": (),
        }.items()
    },
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
        A,
        ("logs", "--stack", "us-west-2", "--worker", "-1", "--kubeconfig", "{dir}/kc"),
        2,
        ("--worker", "-1 is below 0"),
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


# --- issue 28: an adversarial pass of new bad inputs, one class at a time (TESTING.md counts them) ---
def parquet(name: str, columns: dict[str, list]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(columns), d / name)

    return setup


def data_case(name: str, body: bytes, why: str) -> Case:
    """`python -m workloads.train --data FILE` on 2 workers: refused before Ray, naming the file."""
    argv = ("--preset", "tiny", "--num-workers", "2", "--global-batch-size", "2", "--data", f"{{dir}}/{name}")
    return Case("train", argv, 2, (name, why), files({name: body}))


def train_flag(flag: str, value: str, *names: str) -> Case:
    return Case("train", ("--preset", "tiny", flag, value), 2, (flag, *names))


def aws_file(var: str, body: bytes | None, *names: str) -> Case:
    """`preflight --stack us-west-2` with ``var`` (AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE) naming a bad file
    (``body``) or a folder (None). The path is fixed per case: env values cannot hold {dir}."""
    path = Path("/tmp/ray-efa-eks-matrix") / f"{var}-{zlib.crc32(body or b'')}"

    def setup(d: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if body is None else path.write_bytes(body)

    return Case(A, ("preflight", "--stack", "us-west-2"), 2, (str(path), *names), setup, env={var: str(path)})


def kubeconfig(command: tuple[str, ...], body: bytes | None, *names: str) -> Case:
    """``command`` with --kubeconfig {dir}/kc holding ``body`` (None: a folder)."""

    def setup(d: Path) -> None:
        (d / "kc").mkdir() if body is None else (d / "kc").write_bytes(body)

    return Case(A, (*command, "--kubeconfig", "{dir}/kc"), 2, ("kc", *names), setup)


def train_block(line: str) -> Callable[[Path], None]:
    return stack_keys(f"  ray-efa-eks:train:\n    {line}\n")


URI_FORMS = "s3://bucket/prefix"
BAD_URIS = {
    "s3-one-slash": ("s3:/bucket/x", "two slashes"),
    "s3-no-slash": ("s3:bucket/x", "two slashes"),
    "s3-no-bucket": ("s3://", "names no bucket"),
    "s3-triple-slash": ("s3:///x", "names no bucket"),
    "s3-upper-bucket": ("s3://MyBucket/x", "no valid bucket name"),
    "gs": ("gs://bucket/x", "gs: is not read here"),
    "http": ("http://example.com/x", "http: is not read here"),
    "https": ("https://example.com/x", "https: is not read here"),
    "hdfs": ("hdfs://namenode/x", "hdfs: is not read here"),
    "ftp": ("ftp://host/x", "ftp: is not read here"),
    "file-relative": ("file://x/y", "file: is not read here"),
}
JSONL_OK = b'{"text": "a"}\n'
ISSUE_28: dict[str, Case] = {
    # 5. nothing passes by accident: an unset shell variable as the run id
    "nccl-run-id-empty": Case("nccl", ("--run-id", "", str(EFA_LOG)), 3, ("--run-id", "is no run id")),
    "nccl-run-id-space": Case("nccl", ("--run-id", " ", str(EFA_LOG)), 3, ("--run-id", "is no run id")),
    "nccl-run-id-tab": Case("nccl", ("--run-id", "\t", str(EFA_LOG)), 3, ("--run-id", "is no run id")),
    "nccl-run-id-padded": Case("nccl", ("--run-id", " r1", str(EFA_LOG)), 3, ("--run-id", "' r1'")),
    "nccl-run-id-newline": Case("nccl", ("--run-id", "r1\n", str(EFA_LOG)), 3, ("--run-id", "is no run id")),
    "nccl-proc-run-id-empty": Case("nccl-proc", ("--run-id", "", str(EFA_LOG)), 3, ("--run-id", "is no run id")),
    "policy-proc-as-a-command": Case("policy-proc", (), 2, ("policy pack", "pulumi preview --stack")),
    # 5. NaN and infinite hyperparameters
    "train-lr-nan": train_flag("--lr", "nan", "not a finite number"),
    "train-lr-NaN": train_flag("--lr", "NaN", "not a finite number"),
    "train-lr-inf": train_flag("--lr", "inf", "not a finite number"),
    "train-lr-1e400": train_flag("--lr", "1e400", "not a finite number"),
    "train-lr-minus-inf": Case("train", ("--preset", "tiny", "--lr=-inf"), 2, ("--lr", "not a finite number")),
    "train-weight-decay-nan": train_flag("--weight-decay", "nan", "not a finite number"),
    "train-grad-clip-inf": train_flag("--grad-clip", "infinity", "not a finite number"),
    "train-gpus-per-worker-nan": train_flag("--gpus-per-worker", "nan", "not a finite number"),
    "train-cpus-per-worker-inf": train_flag("--cpus-per-worker", "inf", "not a finite number"),
    "stack-train-lr-nan": Case(A, bad_stack(), 2, ("lr", "nan"), train_block("lr: .nan")),
    "stack-train-lr-inf": Case(A, bad_stack(), 2, ("lr", "inf"), train_block("lr: .inf")),
    "stack-train-grad-clip-neg-inf": Case(A, bad_stack(), 2, ("grad_clip", "inf"), train_block("grad_clip: -.inf")),
    # 2. one URI parser: every path flag and key
    **{f"train-data-{k}": train_flag("--data", v, repr(v), why, URI_FORMS) for k, (v, why) in BAD_URIS.items()},
    **{
        f"train-storage-{k}": train_flag("--storage-path", v, repr(v), why, URI_FORMS)
        for k, (v, why) in BAD_URIS.items()
        if k in ("s3-one-slash", "s3-no-slash", "s3-no-bucket", "gs", "http", "file-relative")
    },
    **{
        f"run-storage-{k}": Case(A, ("run", "--storage-path", v), 2, ("--storage-path", repr(v), why))
        for k, (v, why) in BAD_URIS.items()
        if k in ("s3-one-slash", "s3-no-slash", "s3-no-bucket", "s3-upper-bucket", "gs", "http", "file-relative")
    },
    **{
        f"drill-storage-{k}": Case(A, ("drill", "--storage-path", v), 2, ("--storage-path", repr(v), why))
        for k, (v, why) in BAD_URIS.items()
        if k in ("s3-one-slash", "gs", "https")
    },
    **{
        f"stack-train-data-{k}": Case(A, bad_stack(), 2, ("train.data", repr(v), why), train_block(f"data: '{v}'"))
        for k, (v, why) in BAD_URIS.items()
        if k in ("s3-one-slash", "s3-no-slash", "gs", "http")
    },
    "stack-train-summary-json-s3": Case(
        A, bad_stack(), 2, ("train.summary_json", "is set by the driver"), train_block("summary_json: s3://b-1/s.json")
    ),
    "train-data-empty-string": train_flag("--data", "", "is empty"),
    "train-data-nul": train_flag("--data", "a\0b", "NUL byte"),
    "train-summary-json-s3": train_flag("--summary-json", "s3://b-1/s.json", "is remote"),
    "train-summary-json-gs": train_flag("--summary-json", "gs://b/s.json", "gs: is not read here"),
    "train-summary-json-folder": Case(
        "train", ("--preset", "tiny", "--summary-json", "{dir}"), 2, ("--summary-json", "is a folder")
    ),
    "train-summary-json-under-a-file": Case(
        "train",
        ("--preset", "tiny", "--summary-json", "{dir}/f/s.json"),
        2,
        ("--summary-json", "is a file, not a folder"),
        files({"f": "x"}),
    ),
    "train-run-dir-s3": train_flag("--run-dir", "s3://b-1/x", "is remote"),
    "train-nccl-log-dir-http": train_flag("--nccl-log-dir", "http://h/x", "http: is not read here"),
    "run-storage-empty": Case(A, ("run", "--storage-path", ""), 2, ("--storage-path", "is empty")),
    "report-out-a-file": Case(
        A,
        ("report", "{dir}/runs/r1", "--out", "{dir}/f"),
        2,
        ("--out", "is a file"),
        files({"runs/r1/metrics.jsonl": METRICS_LINE, "f": "x"}),
    ),
    "report-out-under-a-file": Case(
        A,
        ("report", "{dir}/runs/r1", "--out", "{dir}/f/out"),
        2,
        ("--out", "cannot be made"),
        files({"runs/r1/metrics.jsonl": METRICS_LINE, "f": "x"}),
    ),
    "report-out-s3": Case(A, ("report", "r1", "--out", "s3://b-1/x"), 2, ("--out", "is remote")),
    "report-out-s3-one-slash": Case(A, ("report", "r1", "--out", "s3:/b/x"), 2, ("--out", "two slashes")),
    # 1. training data, before any worker starts
    "data-empty-file": data_case("empty.txt", b"", "is empty"),
    "data-blank-lines": data_case("blank.txt", b"\n \n\t\n", "only blank lines"),
    "data-latin1-text": data_case("latin1.txt", "café\n".encode("latin-1"), "is not UTF-8"),
    "data-latin1-jsonl": data_case("latin1.jsonl", '{"text": "café"}\n'.encode("latin-1"), "is not UTF-8"),
    "data-utf16": data_case("utf16.txt", "hello\n".encode("utf-16"), "UTF-16"),
    "data-utf8-bom": data_case("bom.jsonl", b"\xef\xbb\xbf" + JSONL_OK, "byte-order mark"),
    "data-jsonl-null-text": data_case("null.jsonl", JSONL_OK + b'{"text": null}\n', "line 2 has text null"),
    "data-jsonl-no-text-field": data_case("body.jsonl", b'{"body": "a"}\n', "no 'text' field (it has 'body')"),
    "data-jsonl-number-text": data_case("num.jsonl", b'{"text": 5}\n', "text of type int"),
    "data-jsonl-bool-text": data_case("bool.jsonl", b'{"text": true}\n', "text of type bool"),
    "data-jsonl-object-text": data_case("obj.jsonl", b'{"text": {"a": 1}}\n', "text of type dict"),
    "data-jsonl-list-text": data_case("lst.jsonl", b'{"text": ["a"]}\n', "text of type list"),
    "data-jsonl-empty-text": data_case("e.jsonl", b'{"text": ""}\n', "empty text"),
    "data-jsonl-blank-text": data_case("b.jsonl", b'{"text": "   "}\n', "empty text"),
    "data-jsonl-array-line": data_case("arr.jsonl", b'["a"]\n', "JSON list"),
    "data-jsonl-string-line": data_case("str.jsonl", b'"just a string"\n', "JSON str"),
    "data-jsonl-not-json": data_case("words.jsonl", b"plain words\n", "is not JSON"),
    "data-jsonl-trailing-comma": data_case("comma.jsonl", JSONL_OK + b'{"text": "b",}\n', "line 2 is not JSON"),
    "data-jsonl-one-pretty-object": data_case("pretty.jsonl", b'{\n  "text": "a"\n}\n', "line 1 is not JSON"),
    "data-json-suffix-null": data_case("n.json", b'{"text": null}\n', "text null"),
    "data-not-parquet": data_case("fake.parquet", b"PAR1 not really", "is not a Parquet file"),
    "data-parquet-no-text-column": Case(
        "train",
        ("--preset", "tiny", "--data", "{dir}/a.parquet"),
        2,
        ("a.parquet", "no 'text' column (it has body)"),
        parquet("a.parquet", {"body": ["x", "y"]}),
    ),
    "data-parquet-int-text": Case(
        "train",
        ("--preset", "tiny", "--data", "{dir}/i.parquet"),
        2,
        ("i.parquet", "of type int64"),
        parquet("i.parquet", {"text": [1, 2]}),
    ),
    "data-folder-with-an-empty-file": Case(
        "train",
        ("--preset", "tiny", "--data", "{dir}/c"),
        2,
        ("b.txt", "is empty"),
        files({"c/a.txt": b"one\ntwo\n", "c/b.txt": b""}),
    ),
    "data-too-small-for-the-ranks": Case(
        "train",
        ("--preset", "tiny", "--num-workers", "4", "--global-batch-size", "4", "--data", "{dir}/one.txt"),
        2,
        ("--data", "fewer workers"),
        files({"one.txt": b"a single document\n"}),
    ),
    "data-fewer-bytes-than-workers": Case(
        "train",
        ("--preset", "tiny", "--num-workers", "4", "--global-batch-size", "4", "--data", "{dir}/t.txt"),
        2,
        ("--data", "2 bytes, fewer than the 4 workers"),
        files({"t.txt": b"a\n"}),
    ),
    "data-mixed-formats": Case(
        "train",
        ("--preset", "tiny", "--data", "{dir}/m"),
        2,
        ("--data", "mixes formats"),
        files({"m/a.txt": b"x\n", "m/b.jsonl": JSONL_OK}),
    ),
    # 4. the user's own files: AWS config and credentials, kubeconfig
    "aws-config-unparsable": aws_file("AWS_CONFIG_FILE", b"[default\nregion=x\n", "cannot be parsed"),
    "aws-config-binary": aws_file("AWS_CONFIG_FILE", b"\x00\xff\xfe garbage", "cannot be parsed"),
    "aws-config-folder": aws_file("AWS_CONFIG_FILE", None, "is a folder"),
    "aws-config-key-before-section": aws_file("AWS_CONFIG_FILE", b"region = us-west-2\n", "cannot be parsed"),
    "aws-credentials-unparsable": aws_file("AWS_SHARED_CREDENTIALS_FILE", b"[default\nx=y\n", "cannot be parsed"),
    "aws-credentials-latin1": aws_file("AWS_SHARED_CREDENTIALS_FILE", b"caf\xe9=1\n", "cannot be parsed"),
    "aws-credentials-folder": aws_file("AWS_SHARED_CREDENTIALS_FILE", None, "is a folder"),
    "aws-config-unclosed-profile": aws_file("AWS_CONFIG_FILE", b"[profile\n", "cannot be parsed"),
    "aws-credentials-continuation-first": aws_file(
        "AWS_SHARED_CREDENTIALS_FILE", b"  indented = first\n[default]\n", "cannot be parsed"
    ),
    "kubeconfig-folder-verify": kubeconfig(("verify", "--stack", "us-west-2"), None, "is a folder"),
    "kubeconfig-not-yaml-verify": kubeconfig(("verify", "--stack", "us-west-2"), b"clusters: [\n", "line 2"),
    "kubeconfig-binary-status": kubeconfig(("status", "--stack", "us-west-2"), b"\xff\xfe\x00", "not UTF-8"),
    "kubeconfig-a-list-check": kubeconfig(("check", "--stack", "us-west-2"), b"- a\n- b\n", "no clusters"),
    "kubeconfig-broken-json-verify": kubeconfig(("verify", "--stack", "us-west-2"), b'{"clusters": [', "not YAML"),
    "kubeconfig-folder-logs": kubeconfig(("logs", "--stack", "us-west-2"), None, "is a folder"),
    "kubeconfig-not-yaml-dashboard": kubeconfig(("dashboard", "--stack", "us-west-2"), b"a: [\n", "not YAML"),
    "kubeconfig-binary-report": kubeconfig(("report", "r1", "--stack", "us-west-2"), b"\x00\x01", "not YAML or JSON"),
    # 3. stack files read as Pulumi reads them (YAML 1.2, no key twice, Pulumi.yaml as the table declares)
    "stack-key-twice": Case(
        A, bad_stack(), 2, ("gpuNodeCount", "twice"), stack_keys("  ray-efa-eks:gpuNodeCount: 2\n" * 2)
    ),
    "stack-train-key-twice": Case(A, bad_stack(), 2, ("'steps' twice",), train_block("steps: 5\n    steps: 6")),
    "stack-region-twice": Case(
        A, bad_stack(), 2, ("aws:region", "twice"), stack_file("config:\n  aws:region: us-west-2\n" + STACK_KEYS_OK)
    ),
    "stack-bool-yes": Case(
        A, bad_stack(), 2, ("apiPublicAccess", "'yes'"), stack_keys("  ray-efa-eks:apiPublicAccess: yes\n")
    ),
    "stack-bool-on": Case(
        A, bad_stack(), 2, ("apiPublicAccess", "'on'"), stack_keys("  ray-efa-eks:apiPublicAccess: on\n")
    ),
    "render-key-twice": Case(
        A, render_bad(), 2, ("gpuNodeCount", "twice"), stack_keys("  ray-efa-eks:gpuNodeCount: 2\n" * 2)
    ),
    "project-yaml-default-edited": Case(
        A,
        bad_stack(),
        2,
        ("Pulumi.yaml", "gpuNodeCount has default 4", "--write-pulumi-yaml"),
        project_yaml(
            (REPO / "Pulumi.yaml")
            .read_text()
            .replace("type: integer\n    default: 2\n", "type: integer\n    default: 4\n", 1)
        ),
    ),
    "project-yaml-key-twice": Case(
        A, bad_stack(), 2, ("Pulumi.yaml", "'name' twice"), project_yaml("name: ray-efa-eks\nname: other\n")
    ),
}
CASES.update(ISSUE_28)
# Issue 45: a training field without meaning under another field's value (TrainConfig's `needs`) is refused on the
# command line and in a stack's train: block alike. Per such field: a value away from its default, and a value of the
# field it needs (as YAML; None: left unset) under which it means nothing.
UNMEANT = {
    "ac_policy": ("attention", "false"),
    "ac_blocks": ("2", "false"),
    "ac_rest_policy": ("ops", "0"),
    "shard_size": ("2", "fsdp"),
    "loss_chunk_size": ("1024", "full"),
    "task": ("learnable", "s3://b-1/corpus/"),
    "tokenizer": ("bytes", None),
}
NEEDS = {f.name: f.metadata["needs"][0] for f in dataclasses.fields(TrainConfig) if f.metadata["needs"]}


def _unmeant_flags(name: str) -> tuple[str, ...]:
    (value, other_value), other = UNMEANT[name], flag_of(NEEDS[name])
    given = [] if other_value is None else [f"--no-{other[2:]}"] if other_value == "false" else [other, other_value]
    return ("--preset", "tiny", flag_of(name), value, *given)


def _unmeant_block(name: str) -> Callable[[Path], None]:
    value, other_value = UNMEANT[name]
    return train_block(f"{name}: {value}" + ("" if other_value is None else f"\n    {NEEDS[name]}: {other_value}"))


for _name in UNMEANT:
    CASES[f"train-{_name}-without-meaning"] = Case(
        "train", _unmeant_flags(_name), 2, (flag_of(_name), flag_of(NEEDS[_name]))
    )
    CASES[f"stack-train-{_name}-without-meaning"] = Case(
        A, bad_stack(), 2, (f"train.{_name}", f"train.{NEEDS[_name]}"), _unmeant_block(_name)
    )


def test_every_training_field_that_needs_another_is_tried_without_it():
    assert UNMEANT.keys() == NEEDS.keys(), f"UNMEANT has {sorted(UNMEANT)}, TrainConfig's needs {sorted(NEEDS)}"


MAINS = {"automation": "automation.cli", "train": "workloads.train", "nccl": "workloads.nccl_check.__main__"}
MODULES = {
    "automation-proc": "automation",
    "train-proc": "workloads.train",
    "nccl-proc": "workloads.nccl_check",
    "policy-proc": "infra.policy",
}


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


def test_issue_28_pass_has_at_least_100_new_cases_over_every_class():
    entries = {c.entry.removesuffix("-proc") for c in ISSUE_28.values()}
    assert len(ISSUE_28) >= 100 and {"automation", "train", "nccl", "policy"} <= entries, (
        f"expected >= 100 cases of issue 28 over automation, train, nccl and policy, got {len(ISSUE_28)} over {entries}"
    )


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
