"""The pipeline's commands: `run` (every step in order), each step alone (preflight, preview, up, verify,
train, check, destroy) and `attach`, over the target the flags choose; then the one report every target shares.

`train` is two steps, `submit` (the job queued on the cluster's job server) and `follow` (the job followed to
its end); `run --detach` stops after `submit`. `attach --stack S [RUN]` follows a job that a `run` left (--detach,
a closed laptop, Ctrl-C) from any machine with the stack's credentials with the same steps, then `check` and the
report, as if that `run` had stayed; the job is found on the head pod's job server (RUN: its run or Ray job id;
default: the newest job submitted), and the local target cannot be attached to: its Ray cluster ends with its run.
On AWS `run` and `train` begin with `scale-up`, and each command's run controller (automation/run_controller.py)
resumes a job that fails for the infrastructure (--max-recoveries, --recovery-minutes) and scales the GPU nodes
back to gpuIdleNodes at the end, once the job has ended, unless --keep-nodes."""

from __future__ import annotations

import argparse
from typing import Any

from automation.commands.report import run_files
from automation.errors import DriverError
from automation.flags import (
    AWS,
    LOCAL,
    TARGET_PARENT,
    Mode,
    add_kubeconfig,
    count,
    hang_factor,
    hang_floor,
    location,
    not_in,
    resolve_target,
    run_id,
    whole_number,
)
from automation.hang import FIRST_STEP_S, HANG_FACTOR, HANG_FILE, HANG_FLOOR_S, bound_of
from automation.pipeline import PipelineResult
from automation.recovery import MAX_RECOVERIES, RECOVERY_MINUTES
from automation.run_controller import RunController
from automation.run_outcome import build_report, show
from automation.steps.gate import SKIP_GATE_HELP
from automation.targets import Target, aws, local
from automation.ui import Ui
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
    "attach": "follow a job a `run` left running (--detach, Ctrl-C, a closed laptop), then check and report",
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
    def command(name: str) -> argparse.ArgumentParser:  # its steps run on the target --stack and --target choose
        return sub.add_parser(name, help=HELPS[name], description=HELPS[name], parents=[*parents, TARGET_PARENT])

    # Each step's own flags, in the order `--help` lists the commands (`run` and `attach` follow).
    steps = {
        "preflight": (add_num_workers, add_use_gpu),
        "preview": (),
        "up": (add_yes, add_auto_az),
        "verify": (add_kubeconfig,),
        "train": (add_yes, add_kubeconfig, add_keep_nodes, add_job, add_timeout, add_hang, add_skip_gate, add_recovery),
        "check": (add_kubeconfig, add_run_id),
        "destroy": (add_yes,),
    }
    for name, adds in steps.items():
        p = command(name)
        for add in adds:
            add(p)
    p = command("run")
    plan = p.add_argument("--plan", action="store_true", help="aws: stop after preview (no change)")
    not_in(plan, LOCAL, "the local target has no preview and changes nothing in the cloud")
    not_in(add_yes(p), PLAN, "it stops before any change")
    not_in(add_auto_az(p), PLAN, "it stops before `up`")
    add_kubeconfig(p)
    add_job(p)
    add_use_gpu(p)
    add_storage_path(p)
    keep = add_keep_nodes(p)
    not_in(keep, DETACHED, "the GPU nodes stay up until the job ends; `attach --keep-nodes` keeps them after")
    detach = p.add_argument(
        "--detach",
        action="store_true",
        help="aws: submit the job and exit 0; it runs on the cluster without this terminal, "
        "`attach --stack S RUN` follows it later (the GPU nodes stay up until it ends)",
    )
    not_in(detach, LOCAL, "the local target's Ray stops when its run ends, so no job could outlive it")
    timeout, recovery, hang = add_timeout(p), add_recovery(p), add_hang(p)
    not_in((detach, timeout, *recovery, *hang), PLAN, "it stops before any job is submitted")
    not_in(timeout, DETACHED, "the job outlives this command; `attach --timeout` limits it")
    not_in(recovery, DETACHED, "this command ends at submit; nothing follows the job to recover it")
    not_in(hang, DETACHED, "nothing follows the job; `attach` watches it for hangs")
    not_in((keep, add_skip_gate(p)), PLAN, "it stops before the GPU nodes scale up")
    p = command("attach")
    for add in (add_kubeconfig, add_keep_nodes, add_timeout, add_hang, add_recovery):
        add(p)
    what = "the run (its Ray job id) to follow (default: the newest job submitted)"
    p.add_argument("job", nargs="?", type=run_id, metavar="RUN", help=what)


# The flags several of these commands take (bench and drill some too), each declared once.
def add_recovery(p: argparse.ArgumentParser) -> tuple[argparse.Action, ...]:
    """How far a followed job is resumed after an infrastructure failure (RunController.recovering)."""
    recoveries = p.add_argument(
        "--max-recoveries",
        type=count,
        metavar="N",
        help="aws: after a job fails for the infrastructure (a GPU node lost or unhealthy, a pod evicted), wait "
        f"for the replaced node and resume from the last checkpoint at most N times (default {MAX_RECOVERIES}; "
        "0: never); an application failure (a traceback, out of memory) is never retried",
    )
    minutes = p.add_argument(
        "--recovery-minutes",
        type=whole_number,
        metavar="M",
        help=f"aws: stop recovering once M minutes have passed since the first failure (default {RECOVERY_MINUTES})",
    )
    return not_in((recoveries, minutes), LOCAL, "the local target has no nodes to replace")


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


def add_storage_path(p: argparse.ArgumentParser) -> None:
    help = "local: Ray Train's state and checkpoints, a directory or s3://bucket/prefix (default: in the run's dir)"
    not_in(p.add_argument("--storage-path", type=location(), help=help), AWS, "the stack's run bucket holds runs")


def add_keep_nodes(p: argparse.ArgumentParser) -> argparse.Action:
    keep = p.add_argument(
        "--keep-nodes",
        action="store_true",
        help="aws: leave the GPU nodes running when the run ends "
        f"(default: scale them to {GpuNodesConfig.keyname('idle_nodes')}, 0)",
    )
    return not_in(keep, LOCAL, "the local target's Ray stops when its run ends")


def add_skip_gate(
    p: argparse.ArgumentParser, mode: Mode = LOCAL, why: str = "the local target has no GPU nodes to gate"
) -> argparse.Action:
    """--skip-gate, refused in ``mode`` (where no gate runs: the local target, or bench's sweep)."""
    help = f"aws: {SKIP_GATE_HELP}" if mode is LOCAL else SKIP_GATE_HELP
    return not_in(p.add_argument("--skip-gate", action="store_true", help=help), mode, why)


def add_timeout(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument(
        "--timeout",
        type=whole_number,
        metavar="SECONDS",
        help="stop the training job with `ray job stop` once it has run this long "
        "(default: no limit on aws, 600 s locally)",
    )


def add_hang(p: argparse.ArgumentParser) -> tuple[argparse.Action, argparse.Action]:
    """The hang bound (automation/hang.py): no step line for max(K × the median step time, the floor) stops the job."""
    factor = p.add_argument(
        "--hang-factor",
        type=hang_factor,
        metavar="K",
        help=f"call the job hung when no step line came for K times the median step time so far, or --hang-floor if "
        f"longer; then read each worker's Python stacks (`ray stack`) and last NCCL lines into runs/<run-id>/"
        f"{HANG_FILE}, `ray job stop` it and name the rank and node behind (default {HANG_FACTOR}: steps vary by a "
        f"few times, a collective that hangs does not end)",
    )
    floor = p.add_argument(
        "--hang-floor",
        type=hang_floor,
        metavar="SECONDS",
        help=f"the shortest wait for a step line before calling the job hung (default {HANG_FLOOR_S}: PyTorch's "
        f"own NCCL timeout, and longer than a checkpoint's save); before the first step line the job has "
        f"{FIRST_STEP_S:.0f} s from RUNNING (nodes, image, model build, first compile)",
    )
    return factor, floor


def open_target(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None) -> Target:
    """The target the flags chose, for this command's steps (`deps`: the AWS target's outside world, for tests)."""
    return local.from_args(args, ui) if resolve_target(args) == "local" else aws_target(args, ui, deps)


def aws_target(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None, **options: Any) -> aws.AwsTarget:
    """The stack's target as the command's flags describe it; ``options`` (AwsTarget fields) the command sets itself
    override them."""
    given = vars(args).get  # each command declares only its own flags: one it lacks was not given
    flags = dict(
        run_id=given("resume") or given("run_id"),
        run_id_given=bool(given("resume") or given("run_id")),
        steps_override=given("steps"),
        workers_override=given("num_workers"),
        job_timeout_s=given("timeout"),
        hang_bound=bound_of(given("hang_factor"), given("hang_floor")),
        attach_job=given("job"),
        **{k: given(k) for k in ("max_recoveries", "recovery_minutes") if given(k) is not None},
        **{switch: bool(given(switch)) for switch in ("resume", "yes", "detach", "auto_az", "skip_gate")},
    )
    return aws.open_stack(
        args.stack,
        project_dir=args.project_dir,
        ui=ui,
        kubeconfig=given("kubeconfig"),
        deps=deps,
        pulumi=PULUMI_USE.get(args.command, "without-kubeconfig"),
        **{**flags, **options},
    )


def prepare(owner: RunController, names: tuple[str, ...]) -> None:
    """The steps before a command's own work (bench's sweep, the drill), a failure raised naming its step."""
    ready = owner.steps(names)
    if not ready.ok:
        raise DriverError(f"{ready.failed_step} failed: {ready.reason}")


def run(args: argparse.Namespace, ui: Ui) -> int:
    """The command's steps on the chosen target under its run controller, then its report; 130 with what exists
    when interrupted."""
    target = open_target(args, ui)
    names = target.pipeline(args.command, bool(vars(args).get("plan")))  # only `run` takes --plan
    owner = RunController(target, ui, keep_nodes=bool(vars(args).get("keep_nodes")))

    def report(result: PipelineResult) -> int:
        report = build_report(target, result, args.command, owner.failure, tuple(owner.recoveries))
        trained = result.state.follow is not None
        return show(report, ui, run_files(target, runs_root(), report.to_dict()) if trained else {})

    return owner.run(lambda owner: owner.recovering(owner.steps(names)), report)
