"""`python -m automation <command>`: the user's one command for the whole pipeline.

    python -m automation run                                # local target: Ray on 127.0.0.1, no AWS
    python -m automation preflight --stack us-west-2        # read-only AWS checks, each with its fix
    python -m automation run --stack us-west-2 --plan       # preflight + preview, no change
    python -m automation run --stack us-west-2 --yes        # preflight, preview, up, verify, train, check
    python -m automation destroy --stack us-west-2
    python -m automation render --stack us-west-2           # the resources the program declares, offline
    python -m automation clean --keep 3                     # delete local runs/ but the newest 3
    python -m automation report RUN [--compare RUN2]        # an HTML report of a run, with plots
    python -m automation logs --stack us-west-2 [--worker N] # follow a running job's logs
    python -m automation dashboard --stack us-west-2        # Ray's dashboard on 127.0.0.1 (a port-forward)
    python -m automation scale --stack us-west-2 --gpu-nodes 0  # GPU nodes by hand (`run` scales them itself)
    python -m automation capacity --instance-type g6.12xlarge --count 2  # where the GPU nodes can be had

`--target` defaults to `local` without `--stack` and to `aws` with one. Every error is one line
on stderr and a non-zero exit: 2 for bad input, 1 for a failed step, 130 when interrupted.

This module alone parses arguments and dispatches: pipeline commands to the steps in
automation/steps/ over a target from automation/targets/, the others to automation/commands/.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from automation.errors import DriverError
from automation.scaling import after_run
from infra.config import GpuNodesConfig
from workloads.config import _RUN_ID, ConfigError
from workloads.uri import parse_location

PROJECT_DIR = Path(__file__).resolve().parent.parent
COMMANDS = ("preflight", "preview", "up", "verify", "train", "check", "destroy", "run", "status", "render", "clean")
LOCAL_COMMANDS = ("preflight", "run", "status", "clean")
# Commands that are not pipeline steps: a module under automation/commands/ with `run(args, ui) -> int`.
STANDALONE = {
    "render": "automation.commands.render",
    "status": "automation.commands.status",
    "clean": "automation.commands.clean",
}
# Stand-alone commands with flags of their own: each module has add_parser(sub, parents) and
# run(args, ui) -> int, and reads its own target (--stack or --target) from its arguments.
COMMAND_MODULES = {
    "report": "automation.commands.report",
    "dashboard": "automation.commands.dashboard",
    "logs": "automation.commands.logs",
    "bench": "automation.commands.bench",
    "drill": "automation.commands.drill",
    "scale": "automation.commands.scale",
    "capacity": "automation.commands.capacity",
}
TARGETS = {"aws": "automation.targets.aws", "local": "automation.targets.local"}


HELPS = {
    "preflight": "check AWS (or this machine) before any change",
    "preview": "show what `up` would change",
    "up": "create or update the stack",
    "verify": "check the cluster: GPU/EFA nodes, device plugins, KubeRay, the RayCluster",
    "train": "submit the training job from inside the Ray head pod and follow it",
    "check": "assert from the workers' NCCL logs that collectives went over EFA",
    "destroy": "delete the stack's resources",
    "run": "all steps in order, stopping at the first failure",
    "status": "what exists now",
    "render": "list the resources the Pulumi program declares (offline, no CLI)",
    "clean": "delete the local runs' directories under ./runs, keeping the newest --keep",
}
# The flags each command takes (every command also takes --json); a flag a command lacks is an
# argparse error ("unrecognized arguments"), never silently ignored.
TARGET_FLAGS = ("stack", "target")
COMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "preflight": (*TARGET_FLAGS, "num_workers", "use_gpu"),
    "preview": TARGET_FLAGS,
    "up": (*TARGET_FLAGS, "yes"),
    "verify": (*TARGET_FLAGS, "kubeconfig"),
    "train": (*TARGET_FLAGS, "kubeconfig", "run_id", "resume", "steps", "num_workers"),
    "check": (*TARGET_FLAGS, "kubeconfig", "run_id"),
    "destroy": (*TARGET_FLAGS, "yes"),
    "run": (
        *TARGET_FLAGS,
        "plan",
        "yes",
        "kubeconfig",
        "run_id",
        "resume",
        "steps",
        "num_workers",
        "use_gpu",
        "storage_path",
        "keep_nodes",
    ),
    "status": (*TARGET_FLAGS, "kubeconfig", "capture"),
    "render": ("stack",),
    "clean": ("keep", "yes"),
}
# What a command that lacks a flag sees for it, so the code reads every attribute the same way.
FLAG_DEFAULTS = {
    "stack": None,
    "target": None,
    "plan": False,
    "yes": False,
    "kubeconfig": None,
    "run_id": None,
    "resume": None,
    "steps": None,
    "num_workers": None,
    "use_gpu": False,
    "keep": 0,
    "storage_path": None,
    "capture": None,
    "keep_nodes": False,
}


def stack_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty name is no stack: pass one (e.g. us-west-2, from Pulumi.us-west-2.yaml), "
            "or leave --stack out to run locally"
        )
    return text


def _at_least(low: int, hint: str = ""):
    """An argparse type: a whole number of ``low`` or more (0 is never read as "the default")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: pass a whole number >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}: pass a whole number >= {low}{hint}")
        return value

    return parse


whole_number = _at_least(1, ", or leave the flag out")  # a count of 1 or more
count = _at_least(0)  # a count of 0 or more


def run_id(text: str) -> str:
    """A run id the training module accepts (workloads/config.py, `_RUN_ID`): it names directories."""
    if not _RUN_ID.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a run id: use letters, digits, '.', '_' or '-' (at most 63, no '/'), "
            "starting with a letter or digit"
        )
    return text


def location(remote: bool = True):
    """An argparse type: a path in a form this project reads (workloads/uri.py), else its error."""

    def parse(text: str) -> str:
        try:
            parse_location("", text, remote=remote)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).strip()) from None
        return text

    return parse


def _add_flag(p: argparse.ArgumentParser, name: str) -> None:
    adders = {
        "stack": lambda: p.add_argument(
            "--stack", type=stack_name, help="Pulumi stack (one per region, e.g. us-west-2); implies --target aws"
        ),
        "target": lambda: p.add_argument(
            "--target", choices=("aws", "local"), help="where to run (default: local without --stack, aws with one)"
        ),
        "plan": lambda: p.add_argument("--plan", action="store_true", help="aws: stop after preview (no change)"),
        "yes": lambda: p.add_argument("--yes", action="store_true", help="do not ask before changes that cost money"),
        "kubeconfig": lambda: p.add_argument(
            "--kubeconfig", type=Path, help="aws: use this kubeconfig instead of the stack's `kubeconfig` output"
        ),
        "run_id": lambda: p.add_argument(
            "--run-id", type=run_id, help="the run id (default: a new one for train/run, the newest run for check)"
        ),
        "resume": lambda: p.add_argument(
            "--resume",
            type=run_id,
            metavar="RUN_ID",
            help="aws: continue run RUN_ID from its last checkpoint in the stack's run bucket",
        ),
        "steps": lambda: p.add_argument(
            "--steps", type=whole_number, help="training steps (default: 20 locally, the stack's train.steps on aws)"
        ),
        "num_workers": lambda: p.add_argument(
            "--num-workers",
            type=whole_number,
            help="training workers (default: 2 locally, the stack's train.num_workers on aws)",
        ),
        "keep": lambda: p.add_argument(
            "--keep", type=count, default=0, help="clean: how many of the newest runs to keep (default: 0)"
        ),
        "use_gpu": lambda: p.add_argument(
            "--use-gpu", action="store_true", help="local: train on this machine's GPUs with NCCL (default: CPU, gloo)"
        ),
        "capture": lambda: p.add_argument(
            "--capture",
            type=Path,
            metavar="DIR",
            help="aws: also write the cluster's nodes, DaemonSets, Deployments, pods, events and RayCluster as JSON "
            "into DIR (the layout of tests/fixtures/k8s/), AWS account ids redacted",
        ),
        "keep_nodes": lambda: p.add_argument(
            "--keep-nodes",
            action="store_true",
            help="aws: leave the GPU nodes running when the run ends "
            f"(default: scale them to {GpuNodesConfig.keyname('idle_nodes')}, 0)",
        ),
        "storage_path": lambda: p.add_argument(
            "--storage-path",
            type=location(),
            help="local: keep checkpoints and Ray Train's state here, a directory or s3://bucket/prefix "
            "(default: runs/<run-id>/ray_results)",
        ),
    }
    adders[name]()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m automation",
        description="Provision, verify and use an EKS cluster for Ray Train over EFA, or run the same job locally.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        p = sub.add_parser(name, help=HELPS[name], description=HELPS[name])
        for flag in COMMAND_FLAGS[name]:
            _add_flag(p, flag)
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
        p.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)
        p.set_defaults(**{k: v for k, v in FLAG_DEFAULTS.items() if k not in COMMAND_FLAGS[name]})
    base = argparse.ArgumentParser(add_help=False)
    base.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    base.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)
    for module in COMMAND_MODULES.values():
        importlib.import_module(module).add_parser(sub, [base])
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, except that a flag the command does not take is named with the flags it does."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command_parser = parser._subparsers._group_actions[0].choices[args.command]  # noqa: SLF001
        takes = ", ".join(a.option_strings[0] for a in command_parser._actions if a.help != argparse.SUPPRESS)  # noqa: SLF001
        command_parser.error(f"unrecognized arguments: {' '.join(extra)} (`{args.command}` takes {takes})")
    return args


def resolve_target(args: argparse.Namespace) -> str:
    """`--target` if given, else aws with a stack and local without; aws without a stack is an error."""
    target = args.target or ("aws" if args.stack else "local")
    if target == "aws" and not args.stack:
        from infra.config import known_stacks

        known = ", ".join(known_stacks(args.project_dir)) or "(none)"
        raise DriverError(f"--target aws needs --stack NAME: known stacks are {known}", exit_code=2)
    if target == "local" and args.stack:
        raise DriverError(
            f"--stack {args.stack} is an AWS stack: leave out --target local, or drop --stack", exit_code=2
        )
    if target == "local" and args.command not in LOCAL_COMMANDS:
        raise DriverError(
            f"`{args.command}` has no meaning for --target local (its Ray cluster lives only for one run): "
            f"use `python -m automation run --target local`, or pass --stack NAME for AWS",
            exit_code=2,
        )
    check_target_flags(args, target)
    return target


# Flags that exist for one target only: (flag, its attribute, the target it is for, what to do instead).
ONE_TARGET_FLAGS = (
    ("--plan", "plan", "aws", "the local target has no preview and changes nothing in the cloud: leave out --plan"),
    ("--kubeconfig", "kubeconfig", "aws", "the local target talks to its own Ray head: leave out --kubeconfig"),
    ("--use-gpu", "use_gpu", "local", "on AWS the stack's GPU nodes train (train.use_gpu): leave out --use-gpu"),
    ("--resume", "resume", "aws", "runs are kept in a stack's run bucket: pass --stack STACK, or leave out --resume"),
    ("--storage-path", "storage_path", "local", "on AWS the stack's run bucket holds runs: leave out --storage-path"),
    ("--capture", "capture", "aws", "the local target has no Kubernetes cluster to record: pass --stack STACK"),
    ("--keep-nodes", "keep_nodes", "aws", "the local target's Ray stops when its run ends: leave out --keep-nodes"),
)


def check_target_flags(args: argparse.Namespace, target: str) -> None:
    """Refuse a flag meant for the other target before anything starts (no cloud call, no Ray)."""
    for flag, attr, meant_for, instead in ONE_TARGET_FLAGS:
        if getattr(args, attr) and target != meant_for:
            raise DriverError(f"{flag} is for --target {meant_for}, this is --target {target}: {instead}", exit_code=2)


def _on_sigterm(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt


def _report_interrupt(e: KeyboardInterrupt, target: Any, ui: Any) -> None:
    """Which step was interrupted, what exists now, and the commands to resume or tear down."""
    from automation.pipeline import StepInterrupted

    step = e.step if isinstance(e, StepInterrupted) else None
    if target is None:
        ui.error("interrupted before any step began: nothing was started")
        if ui.json_mode:
            ui.emit_json({"ok": False, "error": "interrupted before any step", "interrupted_step": None})
        return
    advice = target.interrupted(e.advice if isinstance(e, StepInterrupted) else None)
    where = f"during step {step}" if step else "outside any step"
    ui.error(f"interrupted {where}{target.where()}: {advice.exists}")
    for cmd in advice.next_commands:
        ui.note(f"  {cmd}")
    if ui.json_mode:
        ui.emit_json(
            {
                "ok": False,
                "error": f"interrupted {where}",
                "interrupted_step": step,
                "exists": advice.exists,
                "next": list(advice.next_commands),
            }
        )


def run_steps(args: argparse.Namespace, ui: Any, started: list) -> int:
    """A pipeline command: its steps on the chosen target, then the one report every target shares."""
    from automation import steps
    from automation.report import build_report, show

    target = importlib.import_module(TARGETS[args.target]).from_args(args, ui)
    started.append(target)
    begun: list[str] = []

    def on_start(name: str) -> None:
        begun.append(name)
        ui.step_started(name)

    try:
        result = steps.run(target.pipeline(args.command, args.plan), target, on_start, ui.step_finished)
    except KeyboardInterrupt:
        _idle_nodes(args, target, begun, ui.note)
        raise
    _idle_nodes(args, target, begun, target.notes.append)
    report = build_report(target, result, args.command)
    files = target.report_files(report.to_dict()) if result.result("train") is not None else {}
    return show(report, ui, files)


def _idle_nodes(args: argparse.Namespace, target: Any, begun: list[str], say: Any) -> None:
    """After an AWS `run` that reached `up` (pass, fail or Ctrl-C): the GPU nodes to gpuIdleNodes unless
    --keep-nodes (automation/scaling.py), and the line saying so."""
    if args.command == "run" and args.target == "aws" and "up" in begun:
        say(after_run(target, args.keep_nodes))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(build_parser(), argv)
    from automation.ui import Ui

    ui = Ui(json_mode=args.json)
    # SIGTERM takes the same path as Ctrl-C, so the finally blocks stop what this run started.
    # SIGINT gets Python's own handler back: a shell that starts the driver in the background
    # (CI, `cmd &` in a script) hands it SIGINT ignored, and Ctrl-C or `kill -INT` would then
    # neither stop the run nor the Ray processes it started.
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    started: list = []
    try:
        with warnings.catch_warnings():
            # ConfigWarnings are shown as notes in the output, not as Python warnings.
            warnings.simplefilter("ignore")
            if args.command in COMMAND_MODULES:
                return importlib.import_module(COMMAND_MODULES[args.command]).run(args, ui)
            args.target = resolve_target(args)
            if args.command in STANDALONE:
                check_target_flags(args, args.target)
                return importlib.import_module(STANDALONE[args.command]).run(args, ui)
            return run_steps(args, ui, started)
    except DriverError as e:
        ui.error(str(e))
        if args.json:
            ui.emit_json({"ok": False, "error": str(e)})
        return e.exit_code
    except KeyboardInterrupt as e:
        _report_interrupt(e, started[0] if started else None, ui)
        return 130
    finally:
        ui.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
