"""A job that stopped making steps while its job server still says RUNNING: noticed while following, diagnosed, stopped.

The bound is max(K × the expected time between step lines, a floor): the median `step_time` rank 0 printed so far
(workloads/loop.py `_say_step`) times the steps between two lines (--log-every). Before the first step line (node
join, image pull, model build, the first compile: not steady steps) only FIRST_STEP_S from the first RUNNING applies.
Anchors: PyTorch's ProcessGroupNCCL times a collective out after 10 min (pytorch/pytorch#110947), Ray Train's
process group after 30 min (ray-project/ray#58229); NVIDIA's fault-tolerance launcher waits 3600 s for a rank's
first heartbeat and 2700 s between heartbeats, or a safety factor times the observed interval (nvidia-resiliency-ext,
fault_tolerance/config.py `FaultToleranceConfig`); Ray's own NCCL hang detector (Ray Train v2's NCCL RAS callback,
ray-project/ray#64928) came after the image's Ray 2.58, so the driver does it.

On a hang each worker pod is asked (each call bounded by CALL_S) for its Ray workers' Python stacks (`ray stack`, Ray
2.58 python/ray/scripts/scripts.py `stack`: "Stack dump for <ps aux line>" then `py-spy dump` of that pid) and each
rank's last NCCL lines (workloads/loop.py `route_nccl_log` names a rank's file `nccl.<run>.rank<R>.<host>.<pid>.log`:
its pod and pid, and so its stack). A rank outside any collective while others wait in one is the rank behind.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from automation.errors import DriverError
from automation.kube import PodExec
from automation.recovery import last_step as step_of

HANG_FACTOR, HANG_FLOOR_S = 10, 600  # defaults of --hang-factor and --hang-floor
FIRST_STEP_S = 3600.0  # from RUNNING to the first step line
CALL_S = 60.0  # one diagnosis call in one pod: a stuck `ray stack` costs this, not the diagnosis
NCCL_TAIL_LINES = 20
HANG_FILE = "hang.json"
# `timeout` ends `ray stack` in the pod too: the exec's own limit would only stop the driver waiting for it.
STACK_COMMAND = ["timeout", f"{CALL_S - 5:.0f}", "ray", "stack"]
_STEP_TIME = re.compile(r" step_time (\d+) ms")
_NCCL_FILE = re.compile(r"^==> (\S*?rank(\d+)\.(\S+)\.(\d+)\.log) <==$")
# Frames of a rank waiting on the others: a collective call, or the host waiting for the GPU stream it is queued on.
_WAITING = re.compile(r"torch/distributed/|all_reduce|reduce_scatter|all_gather|barrier|synchronize|\bwait \(")


@dataclass(frozen=True)
class HangBound:
    """--hang-factor and --hang-floor: no step line for max(factor × expected, floor_s) seconds is a hang."""

    factor: int = HANG_FACTOR
    floor_s: int = HANG_FLOOR_S


def bound_of(factor: int | None, floor_s: int | None) -> HangBound:
    """The bound of the flags a command was given (each left out: its default)."""
    return HangBound(factor or HANG_FACTOR, floor_s or HANG_FLOOR_S)


@dataclass
class HangWatch:
    """The step lines of one followed job on the follower's clock; `overdue` says when it is past its bound."""

    bound: HangBound
    running_since: float | None = None
    last_step_at: float | None = None
    last_step: int = 0
    stride: int = 1  # steps between two step lines (--log-every)
    step_times_s: list[float] = field(default_factory=list)

    def running(self, now: float) -> None:
        if self.running_since is None:
            self.running_since = now

    def line(self, text: str, now: float) -> None:
        step = step_of([text])
        if step is None:
            return
        if step > self.last_step and self.last_step:
            self.stride = step - self.last_step
        self.last_step, self.last_step_at = step, now
        if took := _STEP_TIME.search(text):
            self.step_times_s.append(int(took[1]) / 1e3)

    def limit_s(self) -> float:
        if self.last_step_at is None:
            return FIRST_STEP_S
        expected = statistics.median(self.step_times_s) * self.stride if self.step_times_s else 0.0
        return max(self.bound.factor * expected, self.bound.floor_s)

    def overdue(self, now: float) -> str | None:
        """Why the job is hung (no step line past its bound), or None."""
        since = self.last_step_at if self.last_step_at is not None else self.running_since
        if since is None or now - since < self.limit_s():
            return None
        if self.last_step_at is None:
            return f"no first step line {now - since:.0f} s after the job began RUNNING (bound {FIRST_STEP_S:.0f} s)"
        median = statistics.median(self.step_times_s) if self.step_times_s else 0.0
        return (
            f"no step line for {now - since:.0f} s after step {self.last_step}, past max({self.bound.factor} × "
            f"{median:.1f} s × {self.stride} steps a line, {self.bound.floor_s} s) = {self.limit_s():.0f} s"
        )


@dataclass(frozen=True)
class RankEvidence:
    """What one rank (None: a pod whose ranks could not be read) showed: its stack, its last NCCL lines."""

    rank: int | None
    pod: str
    node: str
    stack: str = ""
    stack_error: str = ""
    nccl_tail: tuple[str, ...] = ()
    nccl_error: str = ""

    @property
    def waiting(self) -> bool:
        return bool(_WAITING.search(self.stack))


def nccl_tail_command(nccl_dir: str) -> list[str]:
    return ["sh", "-c", f'tail -v -n {NCCL_TAIL_LINES} "$1"/*.log', "sh", nccl_dir]


def _call(pod_exec: PodExec, pod: str, namespace: str, command: list[str]) -> tuple[str, str]:
    """(stdout, "") or ("", why): a diagnosis call that fails or runs past CALL_S is recorded, never raised."""
    try:
        res = pod_exec(pod, namespace, command, timeout_s=CALL_S)
    except DriverError as e:
        return "", str(e)
    return (res.stdout, "") if res.rc == 0 else ("", f"rc {res.rc}: {(res.stderr or res.stdout).strip()[-300:]}")


def stacks_by_pid(text: str) -> dict[str, str]:
    """`ray stack`'s output, one block per Ray worker process, by pid (the ps line's second column)."""
    blocks = text.split("Stack dump for ")[1:]
    return {b.split()[1]: b for b in blocks if len(b.split()) > 1}


def pod_evidence(pod_exec: PodExec, pod: str, node: str, namespace: str, nccl_dir: str) -> list[RankEvidence]:
    """Each rank of one worker pod: its stack and its last NCCL lines, by the pid its NCCL log file names."""
    stacks, stack_error = _call(pod_exec, pod, namespace, STACK_COMMAND)
    tails, nccl_error = _call(pod_exec, pod, namespace, nccl_tail_command(nccl_dir))
    by_pid = stacks_by_pid(stacks)
    ranks: list[RankEvidence] = []
    for block in tails.split("\n\n"):
        lines = block.strip().splitlines()
        m = _NCCL_FILE.match(lines[0]) if lines else None
        if m:
            stack = by_pid.get(m[4], "")
            why = stack_error or ("" if stack else f"no `ray stack` block for pid {m[4]}")
            ranks.append(RankEvidence(int(m[2]), pod, node, stack, why, tuple(lines[1:])))
    if not ranks:  # no NCCL file: the pod's ranks are not known, what it showed is kept whole
        ranks.append(RankEvidence(None, pod, node, stacks, stack_error, (), nccl_error or "no NCCL log files"))
    return ranks


def verdict(ranks: Sequence[RankEvidence]) -> tuple[RankEvidence | None, str]:
    """The rank behind and why, or None and why it cannot be told."""
    read = [r for r in ranks if r.stack and r.rank is not None]
    outside = [r for r in read if not r.waiting]
    if outside and len(outside) < len(read):
        r = outside[0]
        waiting = sorted(str(w.rank) for w in read if w.waiting)
        why = f"rank {r.rank} on node {r.node} (pod {r.pod}) is behind: its stack is outside any collective while "
        return r, why + f"ranks {', '.join(waiting)} wait in one"
    shown = "; ".join(
        f"rank {r.rank} ({r.pod}): {'waits in a collective' if r.waiting else r.stack_error or 'outside collectives'}"
        for r in ranks
    )
    return None, f"the rank behind cannot be told from the stacks ({shown})"


def diagnosis(late: str, ranks: Sequence[RankEvidence]) -> dict[str, object]:
    """The document hang.json holds and the report shows."""
    behind, why = verdict(ranks)
    return {
        "late": late,
        "verdict": why,
        "behind": None if behind is None else {"rank": behind.rank, "node": behind.node, "pod": behind.pod},
        "ranks": [asdict(r) for r in ranks],
    }


def write(run_dir: Path, doc: dict[str, object]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / HANG_FILE
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
