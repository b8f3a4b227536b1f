"""Hangs noticed while following (issue 46 item 3): `run --stack` on a fake clock whose job stops logging steps while
its job server still says RUNNING, and jobs that are slow but not hung.

The world is tests/support/_attach_world.py's (moto's node group, the recorded cluster's pods, the head
pod's job server of _ray_jobs.py on one fake clock), with worker pods that also answer the diagnosis: `ray stack`
as Ray 2.58 prints it (python/ray/scripts/scripts.py `stack`: "Stack dump for <ps aux line>", then py-spy's `dump`
of that pid: "Process <pid>: <cmdline>", "Thread <tid> (idle): \"MainThread\"", one `function (file:line)` per
frame, innermost first, as py-spy's README shows) and `tail -v` of each rank's NCCL log (GNU tail's "==> FILE <=="
headers; the file names of workloads/loop.py `route_nccl_log`). The recorded cluster has two worker pods, on
nodes ip-10-30-1-17 and ip-10-30-1-204; each holds four ranks (a g6.12xlarge's four L4s).
"""

from __future__ import annotations

import json

import pytest
from _attach_world import World, cli_on, doc_of, step
from _ray_jobs import FakeRayJobs, JobScript

from automation.errors import DriverError
from automation.hang import CALL_S, FIRST_STEP_S, HANG_FILE, STACK_COMMAND, nccl_tail_command
from automation.job import CLUSTER_ROOT
from automation.kube import ExecResult
from automation.ray_head import POLL_S

PODS = {"ray-efa-gpu-workers-worker-4kq7d": range(0, 4), "ray-efa-gpu-workers-worker-tz8mb": range(4, 8)}
NODE_OF_RANK_5 = "ip-10-30-1-204.us-west-2.compute.internal"
PENDING_S = 20.0  # JobScript's default: the job server says PENDING this long, then RUNNING


def step_line(i: int, n: int, step_s: float) -> str:
    """Rank 0's line (workloads/loop.py `_say_step`)."""
    return f"[train] step {i}/{n} loss 7.1234 step_time {step_s * 1e3:.0f} ms tokens/s 52,000 peak_mem 15.20 GB"


def stack_dump(rank: int, frames: list[str]) -> str:
    pid = 100 + rank
    ps = f"ray        {pid}  99.0  1.2 123456 7890 ?  Rl   05:21   9:59 ray::RayTrainWorker.run_train_fn"
    lines = [f"Stack dump for {ps}", f"Process {pid}: ray::RayTrainWorker.run_train_fn", "Python v3.13.0", ""]
    return "\n".join([*lines, f'Thread {pid} (idle): "MainThread"', *(f"    {f}" for f in frames), ""])


IN_COLLECTIVE = ["all_reduce (torch/distributed/distributed_c10d.py:2810)", "train_step (workloads/loop.py:385)"]
LOADING = ["__next__ (workloads/data.py:88)", "train_step (workloads/loop.py:372)"]


def nccl_tail(pod: str, rank: int) -> str:
    path = f"{CLUSTER_ROOT}/runs/r1/nccl/nccl.r1.rank{rank}.{pod}.{100 + rank}.log"
    return f"==> {path} <==\n{pod}:{100 + rank}:{200 + rank} [{rank % 4}] NCCL INFO comm 0x5 rank {rank} nRanks 8\n"


class HangWorld(World):
    """The world of tests/support/_attach_world.py, whose pods answer `ray stack` and the NCCL tails; `stuck_pod`'s
    `ray stack` never returns (the exec runs past its limit, as automation/kube.py's KubeApi.exec says then)."""

    stuck_pod: str | None = None
    seen: list[tuple[float, str]]

    def exec(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600) -> ExecResult:
        if command == STACK_COMMAND:
            if pod == self.stuck_pod:
                self.clock.sleep(timeout_s)
                raise DriverError(f"`{' '.join(command[:4])} …` in pod {pod} ran past {timeout_s:.0f} s")
            return ExecResult(0, "".join(stack_dump(r, LOADING if r == 5 else IN_COLLECTIVE) for r in PODS[pod]), "")
        if command == nccl_tail_command(f"{CLUSTER_ROOT}/runs/r1/nccl"):
            return ExecResult(0, "\n".join(nccl_tail(pod, r) for r in PODS[pod]), "")
        return super().exec(pod, namespace, command, stdin=stdin, on_line=on_line, timeout_s=timeout_s)


def world_running(moto_eks, script: JobScript) -> HangWorld:
    world = HangWorld(moto_eks)
    world.jobs = FakeRayJobs(world.clock, lambda job_id: script)
    world.seen = []
    world.shown = Shown(world)
    return world


class Shown(list):
    """The lines the driver showed, each also kept with the fake time it was shown at."""

    def __init__(self, world: HangWorld):
        super().__init__()
        self.world = world

    def append(self, line: str) -> None:
        self.world.seen.append((self.world.clock(), line))
        super().append(line)


def last_step_shown_at(world: HangWorld) -> float:
    return max(t for t, line in world.seen if line.startswith("[train] step"))


# A job of 120 s steps, one line a step, whose collective hangs after step 15: the bound is max(10 × 120, 600) s.
STEP_S, STEPS, HUNG_AFTER = 120.0, 30, 15
BOUND_S = 10 * STEP_S
HUNG = JobScript(
    tuple(step_line(i, STEPS, STEP_S) for i in range(1, STEPS + 1)),
    run_s=STEPS * STEP_S,
    stalls_at_s=HUNG_AFTER * STEP_S,
)


@pytest.fixture
def hung(moto_eks, capsys, monkeypatch, tmp_path):
    world = world_running(moto_eks, HUNG)
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    return world, got, doc_of(capsys)


def test_a_hung_job_is_stopped_within_the_bound_and_one_poll(hung):
    world, _, _ = hung
    stopped, seen = world.jobs.jobs["r1"].stopped_at, last_step_shown_at(world)
    assert stopped is not None and seen + BOUND_S <= stopped <= seen + BOUND_S + POLL_S, (
        f"expected `ray job stop` between {seen + BOUND_S} and {seen + BOUND_S + POLL_S} s, got {stopped}"
    )


def test_a_hung_job_fails_the_follow_step_naming_the_rank_and_node_behind(hung):
    _, got, doc = hung
    follow = step(doc, "follow")
    said = (got["rc"], follow["status"], "rank 5 on node " + NODE_OF_RANK_5 in follow["summary"])
    assert said == (1, "fail", True), f"expected exit 1, follow failed naming rank 5 and its node: {said}, {follow}"


def test_a_hung_job_keeps_every_ranks_stack_and_last_nccl_lines(hung, tmp_path):
    kept = json.loads((tmp_path / "runs" / "r1" / HANG_FILE).read_text())
    read = sorted((r["rank"], bool(r["stack"]), len(r["nccl_tail"])) for r in kept["ranks"])
    assert read == [(r, True, 1) for r in range(8)], f"expected a stack and an NCCL line for ranks 0-7, got {read}"


def test_a_diagnosis_call_that_hangs_costs_its_limit_and_the_job_is_still_stopped(moto_eks, capsys, monkeypatch):
    world = world_running(moto_eks, HUNG)
    world.stuck_pod = "ray-efa-gpu-workers-worker-tz8mb"
    cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    stopped, seen = world.jobs.jobs["r1"].stopped_at, last_step_shown_at(world)
    assert stopped is not None and stopped <= seen + BOUND_S + POLL_S + CALL_S, (
        f"expected `ray job stop` by {seen + BOUND_S + POLL_S + CALL_S} s (one stuck call of {CALL_S:.0f} s), "
        f"got {stopped}"
    )


# A job of 60 s steps that checkpoints after every 10th step for 8 slots: that gap is 540 s, 0.9 × the bound of
# max(10 × 60, 600) = 600 s. The checkpoint lines are no step lines.
def steady_lines(steps: int) -> tuple[str, ...]:
    out: list[str] = []
    for i in range(1, steps + 1):
        out.append(step_line(i, steps, 60))
        if i % 10 == 0 and i < steps:
            out += [f"(RayTrainWorker pid=100) writing checkpoint shard {k}" for k in range(8)]
    return tuple(out)


def test_a_slow_but_steady_job_is_never_stopped(moto_eks, capsys, monkeypatch):
    lines = steady_lines(40)
    world = world_running(moto_eks, JobScript(lines, run_s=60 * len(lines)))
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    said = (got["rc"], world.jobs.jobs["r1"].stopped_at, step(doc_of(capsys), "follow")["status"])
    assert said == (0, None, "pass"), f"expected a pass with no `ray job stop`, got {said}"


def test_a_job_before_its_first_step_is_not_called_hung_within_the_first_step_bound(moto_eks, capsys, monkeypatch):
    # 56 lines of start-up, 60 s apart: the first step line comes 3,420 s after RUNNING, within FIRST_STEP_S.
    start = tuple(f"(RayTrainWorker pid=100) building the model, part {k}" for k in range(56))
    lines = start + tuple(step_line(i, 10, 60) for i in range(1, 11))
    assert 57 * 60 < FIRST_STEP_S
    world = world_running(moto_eks, JobScript(lines, run_s=60 * len(lines)))
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    said = (got["rc"], world.jobs.jobs["r1"].stopped_at)
    assert said == (0, None), f"expected exit 0 and no `ray job stop` before the first step, got {said}"
