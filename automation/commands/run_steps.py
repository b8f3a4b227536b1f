"""The pipeline's commands: `run` (every step in order) and each step alone (preflight, preview, up, verify,
train, check, destroy), over the target the flags choose; then the one report every target shares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from automation import steps
from automation.commands.report import collect_and_report
from automation.flags import add_command, resolve_target
from automation.pipeline import StepInterrupted
from automation.run_report import build_report, show
from automation.scaling import after_run
from automation.targets import Target, aws, local

HELPS = {
    "preflight": "check AWS (or this machine) before any change",
    "preview": "show what `up` would change",
    "up": "create or update the stack",
    "verify": "check the cluster: GPU/EFA nodes, device plugins, KubeRay, the RayCluster",
    "train": "submit the training job from inside the Ray head pod and follow it",
    "check": "assert from the workers' NCCL logs that collectives went over EFA",
    "destroy": "delete the stack's resources",
    "run": "all steps in order, stopping at the first failure",
}
# How each command reaches the stack through pulumi (automation.targets.aws.PulumiUse).
PULUMI_USE: dict[str, aws.PulumiUse] = {
    "preflight": "never",
    **dict.fromkeys(("preview", "up", "destroy", "run"), "always"),
    **dict.fromkeys(("verify", "train", "check"), "without-kubeconfig"),
}


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    for name, help in HELPS.items():
        add_command(sub, name, help, parents)


def open_target(args: argparse.Namespace, ui: Any, deps: aws.AwsDeps | None = None) -> Target:
    """The target the flags chose, for this command's steps (`deps`: the AWS target's outside world, for tests)."""
    if resolve_target(args) == "local":
        return local.from_args(args, ui)
    return aws.open_stack(
        args.stack,
        project_dir=args.project_dir,
        ui=ui,
        kubeconfig=args.kubeconfig,
        deps=deps,
        pulumi=PULUMI_USE[args.command],
        run_id=args.resume or args.run_id,
        run_id_given=bool(args.resume or args.run_id),
        resume=bool(args.resume),
        yes=args.yes,
        steps_override=args.steps,
        workers_override=args.num_workers,
        scale_nodes=args.command == "run",
        auto_az=args.auto_az,
    )


def run(args: argparse.Namespace, ui: Any) -> int:
    """The command's steps on the chosen target, then its report; 130 with what exists when interrupted."""
    target = None
    try:
        target = open_target(args, ui)
        begun: list[str] = []

        def on_start(name: str) -> None:
            begun.append(name)
            ui.step_started(name)

        try:
            result = steps.run(target.pipeline(args.command, args.plan), target, on_start, ui.step_finished)
        except KeyboardInterrupt:
            idle_nodes(args, target, begun, ui.note)
            raise
        idle_nodes(args, target, begun, target.notes.append)
        report = build_report(target, result, args.command)
        trained = result.result("train") is not None
        files = collect_and_report(target, Path.cwd() / "runs", report.to_dict()) if trained else {}
        return show(report, ui, files)
    except KeyboardInterrupt as e:
        if target is None:
            raise
        report_interrupt(e, target, ui)
        return 130


def idle_nodes(args: argparse.Namespace, target: Target, begun: list[str], say: Any) -> None:
    """After an AWS `run` that reached `up` (pass, fail or Ctrl-C): the GPU nodes to gpuIdleNodes unless
    --keep-nodes (automation/scaling.py), and the line saying so."""
    if args.command == "run" and target.name == "aws" and "up" in begun:
        say(after_run(target, args.keep_nodes))


def report_interrupt(e: KeyboardInterrupt, target: Target, ui: Any) -> None:
    """Which step was interrupted, what exists now, and the commands to resume or tear down."""
    step = e.step if isinstance(e, StepInterrupted) else None
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
