"""The pipeline's commands: `run` (every step in order) and each step alone (preflight, preview, up, verify,
train, check, destroy), over the target the flags choose; then the one report every target shares.

`train` is two steps, `submit` (the job queued on the cluster's job server) and `train` (the job followed to
its end); `run --detach` stops after `submit`, and `attach` (automation/commands/attach.py) follows the job
later with the same steps. The GPU nodes go back to gpuIdleNodes at the end only once the job has ended."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from automation import steps
from automation.commands.report import collect_and_report
from automation.flags import (
    AWS,
    LOCAL,
    TARGET_PARENT,
    Mode,
    add_kubeconfig,
    location,
    not_in,
    resolve_target,
    run_id,
    whole_number,
)
from automation.pipeline import JobLeftRunning, PipelineResult, StepInterrupted, SubmittedJob
from automation.ray_head import TERMINAL
from automation.run_report import build_report, show
from automation.scaling import after_run
from automation.targets import Target, aws, local
from automation.ui import Output, Ui
from infra.config import GpuNodesConfig
from workloads.config import runs_root

HELPS = {
    "preflight": "check AWS (or this machine) before any change",
    "preview": "show what `up` would change",
    "up": "create or update the stack",
    "verify": "check the cluster: GPU/EFA nodes, device plugins, KubeRay, the RayCluster",
    "train": "submit the training job from inside the Ray head pod and follow it to its end",
    "check": "assert from the workers' NCCL logs that collectives went over EFA",
    "destroy": "delete the stack's resources",
    "run": "all steps in order, stopping at the first failure",
}
# How each command reaches the stack through pulumi (automation.targets.aws.PulumiUse).
PULUMI_USE: dict[str, aws.PulumiUse] = {
    "preflight": "never",
    **dict.fromkeys(("preview", "up", "destroy", "run"), "always"),
    **dict.fromkeys(("verify", "train", "check", "attach"), "without-kubeconfig"),
}
# The modes of `run` (and `train`) its flags choose besides the target.
PLAN = Mode("--plan", lambda args: args.plan)
DETACHED = Mode("--detach", lambda args: args.detach)
RESUMED = Mode("--resume", lambda args: args.resume is not None)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    def command(name: str) -> argparse.ArgumentParser:
        return pipeline_command(sub, name, HELPS[name], parents)

    p = command("preflight")
    add_num_workers(p)
    add_use_gpu(p)
    command("preview")
    p = command("up")
    add_yes(p)
    add_auto_az(p)
    add_kubeconfig(command("verify"))
    p = command("train")
    add_kubeconfig(p)
    add_job(p)
    add_timeout(p)
    p = command("check")
    add_kubeconfig(p)
    add_run_id(p)
    add_yes(command("destroy"))
    p = command("run")
    plan = p.add_argument("--plan", action="store_true", help="aws: stop after preview (no change)")
    not_in(plan, LOCAL, "the local target has no preview and changes nothing in the cloud")
    not_in(add_yes(p), PLAN, "it stops before any change")
    not_in(add_auto_az(p), PLAN, "it stops before `up`")
    add_kubeconfig(p)
    add_job(p)
    add_use_gpu(p)
    storage = p.add_argument(
        "--storage-path",
        type=location(),
        help="local: keep checkpoints and Ray Train's state here, a directory or s3://bucket/prefix "
        "(default: runs/<run-id>/ray_results)",
    )
    not_in(storage, AWS, "the stack's run bucket holds runs")
    keep = add_keep_nodes(p)
    not_in(keep, PLAN, "it stops before the GPU nodes scale up")
    not_in(keep, DETACHED, "the GPU nodes stay up until the job ends; `attach --keep-nodes` keeps them after")
    detach = p.add_argument(
        "--detach",
        action="store_true",
        help="aws: submit the job and exit 0; it runs on the cluster without this terminal, "
        "`attach --stack S RUN` follows it later (the GPU nodes stay up until it ends)",
    )
    not_in(detach, LOCAL, "the local target's Ray stops when its run ends, so no job could outlive it")
    not_in(detach, PLAN, "it stops before any job is submitted")
    timeout = add_timeout(p)
    not_in(timeout, PLAN, "it stops before any job is submitted")
    not_in(timeout, DETACHED, "the job outlives this command; `attach --timeout` limits it")


def pipeline_command(sub: Any, name: str, help: str, parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """The parser of a command whose steps run on the target --stack and --target choose."""
    return sub.add_parser(name, help=help, description=help, parents=[*parents, TARGET_PARENT])


# The flags several of these commands take, each declared once (`attach` takes some too).
def add_yes(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument("--yes", action="store_true", help="do not ask before changes that cost money")


def add_auto_az(p: argparse.ArgumentParser) -> argparse.Action:
    auto_az = p.add_argument(
        "--auto-az",
        action="store_true",
        help="aws: when EC2 has no capacity for the GPU nodes, move them to the next ranked AZ of the stack's "
        "network and run `up` again (at most 2 moves; default: ask on a terminal, else name the AZ)",
    )
    return not_in(auto_az, LOCAL, "the local target has no AZ")


def add_run_id(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument(
        "--run-id", type=run_id, help="the run id (default: a new one for train/run, the newest run for check)"
    )


def add_num_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--num-workers",
        type=whole_number,
        help="training workers (default: 2 locally, the stack's train.num_workers on aws)",
    )


def add_job(p: argparse.ArgumentParser) -> None:
    """Which training job, of how many steps and workers."""
    not_in(add_run_id(p), RESUMED, "the resumed run keeps its own id")
    resume = p.add_argument(
        "--resume",
        type=run_id,
        metavar="RUN_ID",
        help="aws: continue run RUN_ID from its last checkpoint in the stack's run bucket",
    )
    not_in(resume, LOCAL, "runs are kept in a stack's run bucket: pass --stack NAME to resume one")
    p.add_argument(
        "--steps", type=whole_number, help="training steps (default: 20 locally, the stack's train.steps on aws)"
    )
    add_num_workers(p)


def add_use_gpu(p: argparse.ArgumentParser) -> None:
    help = "local: train on this machine's GPUs with NCCL (default: CPU, gloo)"
    not_in(p.add_argument("--use-gpu", action="store_true", help=help), AWS, "the stack's GPU nodes train")


def add_keep_nodes(p: argparse.ArgumentParser) -> argparse.Action:
    keep = p.add_argument(
        "--keep-nodes",
        action="store_true",
        help="aws: leave the GPU nodes running when the run ends "
        f"(default: scale them to {GpuNodesConfig.keyname('idle_nodes')}, 0)",
    )
    return not_in(keep, LOCAL, "the local target's Ray stops when its run ends")


def add_timeout(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument(
        "--timeout",
        type=whole_number,
        metavar="SECONDS",
        help="stop the training job with `ray job stop` once it has run this long "
        "(default: no limit on aws, 600 s locally)",
    )


def open_target(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None) -> Target:
    """The target the flags chose, for this command's steps (`deps`: the AWS target's outside world, for tests)."""
    if resolve_target(args) == "local":
        return local.from_args(args, ui)
    given = vars(args).get  # each command declares only its own flags: one it lacks was not given
    return aws.open_stack(
        args.stack,
        project_dir=args.project_dir,
        ui=ui,
        kubeconfig=given("kubeconfig"),
        deps=deps,
        pulumi=PULUMI_USE[args.command],
        run_id=given("resume") or given("run_id"),
        run_id_given=bool(given("resume") or given("run_id")),
        resume=bool(given("resume")),
        yes=bool(given("yes")),
        steps_override=given("steps"),
        workers_override=given("num_workers"),
        scale_nodes=args.command == "run",
        detach=bool(given("detach")),
        job_timeout_s=given("timeout"),
        attach_job=given("job"),
        auto_az=bool(given("auto_az")),
    )


def run(args: argparse.Namespace, ui: Ui) -> int:
    """The command's steps on the chosen target, then its report; 130 with what exists when interrupted."""
    target = None
    try:
        target = open_target(args, ui)
        begun: list[str] = []

        def on_start(name: str) -> None:
            begun.append(name)
            ui.step_started(name)

        try:
            plan = target.pipeline(args.command, bool(vars(args).get("plan")))  # only `run` takes --plan
            result = steps.run(plan, target, on_start, ui.step_finished)
        except KeyboardInterrupt as e:
            idle_nodes(args, target, begun, ui.note, e.job_id if isinstance(e, JobLeftRunning) else None)
            raise
        idle_nodes(args, target, begun, target.notes.append, job_left_running(result))
        report = build_report(target, result, args.command)
        trained = result.result("train") is not None
        files = collect_and_report(target, runs_root(), report.to_dict()) if trained else {}
        return show(report, ui, files)
    except KeyboardInterrupt as e:
        if target is None:
            raise
        report_interrupt(e, target, ui)
        return 130


# The step each command that scales down must have begun: `run` from `up` on, `attach` once it followed a job.
SCALE_DOWN_AFTER = {"run": "up", "attach": "train"}


def idle_nodes(
    args: argparse.Namespace, target: Target, begun: list[str], say: Callable[[str], None], running: str | None
) -> None:
    """After an AWS `run` that reached `up`, or an `attach` that followed its job (pass, fail or Ctrl-C): the
    GPU nodes to gpuIdleNodes unless --keep-nodes (automation/scaling.py), and the line saying so; never while
    job `running` may still run on them."""
    if not isinstance(target, aws.AwsTarget) or SCALE_DOWN_AFTER.get(args.command) not in begun:
        return
    if running is not None:
        say(
            f"GPU nodes kept: job {running} may still run on them; `{target.attach_command(running)}` follows it "
            "and scales them down when it ends"
        )
        return
    say(after_run(target, args.keep_nodes))


def job_left_running(result: PipelineResult) -> str | None:
    """The job this command submitted or attached to, when the job server has not said it ended (--detach, a
    job server that stopped answering); None when it ended or none was submitted."""
    found = [r.data for r in (result.result("submit"), result.result("attach")) if r is not None]
    jobs = [d for d in found if isinstance(d, SubmittedJob)]
    if not jobs:
        return None
    followed = result.result("train")
    ended = followed is not None and followed.data is not None and followed.data.status in TERMINAL
    return None if ended else jobs[0].job_id


def report_interrupt(e: KeyboardInterrupt, target: Target, ui: Output) -> None:
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
