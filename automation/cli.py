"""`python -m automation <command>`: the user's one command for the whole pipeline.

    python -m automation run                                # local target: Ray on 127.0.0.1, no AWS
    python -m automation preflight --stack us-west-2        # read-only AWS checks, each with its fix
    python -m automation run --stack us-west-2 --plan       # preflight + preview, no change
    python -m automation run --stack us-west-2 --yes        # preflight, preview, up, verify, train, check
    python -m automation destroy --stack us-west-2
    python -m automation render --stack us-west-2           # the resources the program declares, offline

`--target` defaults to `local` without `--stack` and to `aws` with one. Every error is one line
on stderr and a non-zero exit: 2 for bad input, 1 for a failed step, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import warnings
from collections.abc import Sequence
from pathlib import Path

from automation.errors import DriverError

PROJECT_DIR = Path(__file__).resolve().parent.parent
COMMANDS = ("preflight", "preview", "up", "verify", "train", "check", "destroy", "run", "status", "render")
LOCAL_COMMANDS = ("preflight", "run", "status")
# Stand-alone commands: each module has add_parser(sub, parents) and run(args, ui) -> int.
COMMAND_MODULES = {
    "report": "automation.commands.report",
    "dashboard": "automation.commands.dashboard",
    "logs": "automation.commands.logs",
}


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stack", help="Pulumi stack (one per region, e.g. us-west-2); implies --target aws")
    common.add_argument(
        "--target", choices=("aws", "local"), help="where to run (default: local without --stack, aws with one)"
    )
    common.add_argument("--plan", action="store_true", help="run: stop after preview (no change is made)")
    common.add_argument("--yes", action="store_true", help="do not ask before changes that cost money")
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    common.add_argument(
        "--kubeconfig", type=Path, help="aws: use this kubeconfig instead of the stack's `kubeconfig` output"
    )
    common.add_argument(
        "--run-id", help="train/check: the run id (default: a new one for train, the newest run for check)"
    )
    common.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="run/train on aws: continue run RUN_ID from its last checkpoint in the stack's run bucket",
    )
    common.add_argument(
        "--steps", type=int, help="training steps (default: 20 locally, the stack's train.steps on aws)"
    )
    common.add_argument(
        "--num-workers", type=int, help="training workers (default: 2 locally, the stack's train.num_workers on aws)"
    )
    common.add_argument(
        "--use-gpu", action="store_true", help="local: train on this machine's GPUs with NCCL (default: CPU with gloo)"
    )
    common.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)

    parser = argparse.ArgumentParser(
        prog="python -m automation",
        description="Provision, verify and use an EKS cluster for Ray Train over EFA, or run the same job locally.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
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
    }
    for name in COMMANDS:
        sub.add_parser(name, parents=[common], help=helps[name], description=helps[name])
    base = argparse.ArgumentParser(add_help=False)
    base.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    base.add_argument("--project-dir", type=Path, default=PROJECT_DIR, help=argparse.SUPPRESS)
    for module in COMMAND_MODULES.values():
        importlib.import_module(module).add_parser(sub, [base])
    return parser


def resolve_target(args: argparse.Namespace) -> str:
    """`--target` if given, else aws with a stack and local without; aws without a stack is an error."""
    target = args.target or ("aws" if args.stack else "local")
    if target == "aws" and not args.stack:
        from infra.config import known_stacks

        raise DriverError(
            f"--target aws needs --stack NAME: known stacks are {', '.join(known_stacks(args.project_dir)) or '(none)'}",
            exit_code=2,
        )
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
    return target


def _on_sigterm(signum, frame):  # noqa: ANN001
    raise KeyboardInterrupt


def _report_aws_interrupt(e: KeyboardInterrupt, args: argparse.Namespace, ui) -> None:  # noqa: ANN001
    """Which step was interrupted, what may exist in AWS now, and the commands to resume or tear down.

    Nothing is stopped locally for AWS: the cluster (or half of it) keeps running and costing money.
    """
    from automation.pipeline import StepInterrupted

    step = e.step if isinstance(e, StepInterrupted) else None
    advice = e.advice if isinstance(e, StepInterrupted) else None
    stack = args.stack
    if advice is None:  # outside a step (loading the config, printing the report) or no advice to be had
        from automation.pipeline import Advice

        advice = Advice(
            f"stack {stack} may exist in part (GPU nodes cost money while they exist): "
            f"`python -m automation status --stack {stack}` lists what is there",
            (
                f"resume (idempotent): python -m automation run --stack {stack}",
                f"or tear down: python -m automation destroy --stack {stack}",
            ),
        )
    where = f"during step {step}" if step else "outside any step"
    ui.error(f"interrupted {where} of stack {stack}: {advice.exists}")
    for cmd in advice.next_commands:
        ui.note(f"  {cmd}")
    if args.json:
        ui.emit_json(
            {
                "ok": False,
                "error": f"interrupted {where}",
                "interrupted_step": step,
                "exists": advice.exists,
                "next": list(advice.next_commands),
            }
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from automation.ui import Ui

    ui = Ui(json_mode=args.json)
    # SIGTERM takes the same path as Ctrl-C, so the finally blocks stop what this run started.
    # SIGINT gets Python's own handler back: a shell that starts the driver in the background
    # (CI, `cmd &` in a script) hands it SIGINT ignored, and Ctrl-C or `kill -INT` would then
    # neither stop the run nor the Ray processes it started.
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    target = None
    try:
        with warnings.catch_warnings():
            # ConfigWarnings are shown as notes in the output, not as Python warnings.
            warnings.simplefilter("ignore")
            if args.command in COMMAND_MODULES:
                return importlib.import_module(COMMAND_MODULES[args.command]).run(args, ui)
            target = resolve_target(args)
            if target == "local":
                if getattr(args, "resume", None):
                    raise DriverError(
                        f"--resume {args.resume}: runs are kept in a stack's run bucket; pass --stack STACK",
                        exit_code=2,
                    )
                from automation.targets.local import run_local

                return run_local(args, ui)
            from automation.targets.aws import run_aws

            return run_aws(args, ui)
    except DriverError as e:
        ui.error(str(e))
        if args.json:
            ui.emit_json({"ok": False, "error": str(e)})
        return e.exit_code
    except KeyboardInterrupt as e:
        if target == "aws":
            _report_aws_interrupt(e, args, ui)
        else:
            ui.error("interrupted: what this run started locally has been stopped")
        return 130
    finally:
        ui.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
