"""automation/hang.py: the bound a followed job is held to, and which rank its workers' stacks say is behind.

The stacks are `ray stack` output as Ray 2.58 prints it (python/ray/scripts/scripts.py `stack`: "Stack dump for
<ps aux line>", then py-spy's `dump` of that pid, frames as `function (file:line)`, innermost first)."""

from __future__ import annotations

from automation.hang import FIRST_STEP_S, HangBound, HangWatch, RankEvidence, stacks_by_pid, verdict


def step_line(i: int, step_s: float) -> str:
    return f"[train] step {i}/100 loss 7.0000 step_time {step_s * 1e3:.0f} ms tokens/s 52,000 peak_mem 15.20 GB"


def watched(step_s: float, steps: int, every: int = 1) -> HangWatch:
    """A watch that saw `steps` step lines, one each `every` steps, one line per step time apart."""
    watch = HangWatch(HangBound())
    watch.running(0.0)
    for k in range(1, steps + 1):
        watch.line(step_line(k * every, step_s), k * step_s * every)
    return watch


def test_the_bound_is_k_times_the_median_step_time_when_that_passes_the_floor():
    assert watched(120, 5).limit_s() == 1200, "expected 10 × 120 s"


def test_the_bound_is_the_floor_for_fast_steps():
    assert watched(2, 5).limit_s() == 600, "expected the 600 s floor over 10 × 2 s"


def test_the_bound_counts_the_steps_between_two_lines():
    assert watched(20, 5, every=10).limit_s() == 2000, "expected 10 × 20 s × 10 steps a line"


def test_a_job_is_overdue_only_past_its_bound():
    watch = watched(120, 5)  # the last line at 600 s
    said = (watch.overdue(600 + 1199) is None, watch.overdue(600 + 1200) is not None)
    assert said == (True, True), f"expected not overdue at 1199 s, overdue at 1200 s after the last line: {said}"


def test_before_the_first_step_line_only_the_first_step_bound_applies():
    watch = HangWatch(HangBound())
    watch.running(100.0)
    said = (watch.overdue(100 + FIRST_STEP_S - 1) is None, watch.overdue(100 + FIRST_STEP_S) is not None)
    assert said == (True, True), f"expected the first-step bound of {FIRST_STEP_S} s from RUNNING: {said}"


def dump(pid: int, frames: list[str]) -> str:
    ps = f"ray  {pid}  99.0  1.2 123456 7890 ?  Rl   05:21   9:59 ray::RayTrainWorker.run_train_fn"
    return "\n".join([f"Stack dump for {ps}", f"Process {pid}: ray::RayTrainWorker", *(f"    {f}" for f in frames)])


WAITS = ["all_reduce (torch/distributed/distributed_c10d.py:2810)"]
LOADS = ["__next__ (workloads/data.py:88)"]


def test_ray_stack_output_is_split_by_pid():
    got = stacks_by_pid(dump(101, WAITS) + "\n" + dump(102, LOADS))
    assert sorted(got) == ["101", "102"] and "data.py" in got["102"], f"expected blocks of pids 101, 102: {got}"


def test_the_rank_outside_a_collective_while_others_wait_is_behind():
    ranks = [RankEvidence(r, f"pod{r // 4}", f"node{r // 4}", dump(r, LOADS if r == 6 else WAITS)) for r in range(8)]
    behind, why = verdict(ranks)
    assert behind is not None and (behind.rank, behind.node) == (6, "node1"), f"expected rank 6 on node1: {why}"


def test_when_every_rank_waits_the_rank_behind_is_not_named():
    behind, why = verdict([RankEvidence(r, "pod", "node", dump(r, WAITS)) for r in range(4)])
    assert behind is None and "cannot be told" in why, f"expected no rank named, and why: {why}"
