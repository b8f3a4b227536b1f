"""automation/hang.py's rules, one boundary at a time: the bound a followed job is held to and what it says when
past it, how a pod's diagnosis calls are read (each failure recorded, never raised), and the document kept.

Stacks are `ray stack` output as Ray 2.58 prints it (python/ray/scripts/scripts.py `stack`: "Stack dump for <ps aux
line>", then py-spy's `dump`); NCCL tails are GNU `tail -v` output ("==> FILE <==" headers) over the files
workloads/loop.py `route_nccl_log` names `nccl.<run>.rank<R>.<host>.<pid>.log`."""

from __future__ import annotations

import json

import pytest

from automation.errors import DriverError
from automation.hang import (
    CALL_S,
    FIRST_STEP_S,
    HANG_FACTOR,
    HANG_FILE,
    HANG_FLOOR_S,
    STACK_COMMAND,
    HangBound,
    HangWatch,
    RankEvidence,
    bound_of,
    diagnosis,
    nccl_tail_command,
    pod_evidence,
    stacks_by_pid,
    verdict,
    write,
)
from automation.kube import ExecResult


def step_line(i: int, ms: int | None = None) -> str:
    took = f" step_time {ms} ms" if ms is not None else ""
    return f"[train] step {i}/100 loss 7.0000{took} tokens/s 52,000"


def test_flags_left_out_take_the_defaults_and_given_ones_are_kept():
    got = (bound_of(None, None), bound_of(3, 120))
    assert got == (HangBound(HANG_FACTOR, HANG_FLOOR_S), HangBound(3, 120)), f"got {got}"


def test_running_counts_from_the_first_time_the_job_server_said_running():
    watch = HangWatch(HangBound())
    watch.running(5.0)
    watch.running(50.0)
    assert watch.running_since == 5.0, f"expected 5.0, got {watch.running_since}"


def test_lines_other_than_step_lines_do_not_reset_the_clock():
    watch = HangWatch(HangBound())
    watch.line(step_line(1, 100), 10.0)
    watch.line("[train] loading the next shard", 500.0)
    assert (watch.last_step, watch.last_step_at) == (1, 10.0), f"got {watch.last_step}, {watch.last_step_at}"


def test_step_times_are_read_in_seconds_and_lines_without_one_add_none():
    watch = HangWatch(HangBound())
    watch.line(step_line(1, 1500), 1.0)
    watch.line(step_line(2), 2.0)
    assert watch.step_times_s == [1.5], f"expected [1.5], got {watch.step_times_s}"


def test_the_stride_is_the_steps_between_the_last_two_lines():
    watch = HangWatch(HangBound())
    for step, at in ((5, 1.0), (10, 2.0), (12, 3.0)):
        watch.line(step_line(step, 100), at)
    assert (watch.stride, watch.last_step) == (2, 12), f"expected stride 2 at step 12, got {watch.stride}"


def test_the_first_line_alone_leaves_the_stride_at_one_and_a_repeated_step_keeps_it():
    watch = HangWatch(HangBound())
    watch.line(step_line(40, 100), 1.0)
    first = watch.stride
    watch.line(step_line(50, 100), 2.0)
    watch.line(step_line(50, 100), 3.0)
    assert (first, watch.stride) == (1, 10), f"expected 1 after the first line and 10 kept, got {first}, {watch.stride}"


def test_step_lines_without_step_times_are_held_to_the_floor_alone():
    watch = HangWatch(HangBound(10, 1))
    watch.line(step_line(1), 0.0)
    assert watch.limit_s() == 1, f"expected the 1 s floor (no expected step time), got {watch.limit_s()}"


def test_the_bound_is_the_median_not_the_mean_step_time():
    watch = HangWatch(HangBound(10, 1))
    for i, ms in enumerate((1000, 2000, 90000), start=1):
        watch.line(step_line(i, ms), float(i))
    assert watch.limit_s() == 20.0, f"expected 10 × the 2 s median, got {watch.limit_s()}"


def test_a_job_never_running_is_never_overdue():
    assert HangWatch(HangBound()).overdue(1e9) is None, "expected no verdict before RUNNING"


def test_the_first_step_bound_is_said_with_the_time_since_running():
    watch = HangWatch(HangBound())
    watch.running(10.0)
    got = watch.overdue(10.0 + FIRST_STEP_S + 5)
    want = f"no first step line {FIRST_STEP_S + 5:.0f} s after the job began RUNNING (bound {FIRST_STEP_S:.0f} s)"
    assert got == want, f"expected {want!r}, got {got!r}"


def test_after_a_step_line_the_clock_counts_from_it_not_from_running():
    watch = HangWatch(HangBound(10, 60))
    watch.running(0.0)
    watch.line(step_line(3, 2000), 5000.0)
    got = (watch.overdue(5059.0), watch.overdue(5060.0))
    want = "no step line for 60 s after step 3, past max(10 × 2.0 s × 1 steps a line, 60 s) = 60 s"
    assert got == (None, want), f"expected not overdue at 59 s and {want!r} at 60 s, got {got}"


def test_the_overdue_line_says_a_zero_median_without_step_times():
    watch = HangWatch(HangBound(10, 60))
    watch.line(step_line(3), 0.0)
    got = watch.overdue(61.0)
    assert got is not None and "10 × 0.0 s × 1 steps a line, 60 s) = 60 s" in got, f"got {got!r}"


@pytest.mark.parametrize(
    "frame",
    [
        "all_reduce (torch/distributed/distributed_c10d.py:2810)",
        "reduce_scatter_tensor (x.py:1)",
        "all_gather_into_tensor (x.py:1)",
        "barrier (x.py:1)",
        "synchronize (torch/cuda/__init__.py:985)",
        "wait (torch/futures.py:1)",
    ],
)
def test_each_collective_or_stream_wait_frame_is_waiting(frame):
    assert RankEvidence(0, "p", "n", f"    {frame}").waiting, f"expected {frame!r} to be a wait"


def test_a_compute_frame_is_not_waiting():
    assert not RankEvidence(0, "p", "n", "    forward (workloads/model.py:12)").waiting, "expected no wait"


def test_the_stack_call_is_bounded_inside_the_pod_below_the_exec_limit():
    assert STACK_COMMAND == ["timeout", f"{CALL_S - 5:.0f}", "ray", "stack"], STACK_COMMAND


def test_the_nccl_tail_reads_every_log_of_the_directory_with_headers():
    want = ["sh", "-c", 'tail -v -n 20 "$1"/*.log', "sh", "/d"]
    assert nccl_tail_command("/d") == want, nccl_tail_command("/d")


def test_a_stack_block_without_a_pid_is_dropped_and_a_bare_ps_line_is_kept():
    got = stacks_by_pid("preamble Stack dump for ray\nStack dump for ray 77")
    assert list(got) == ["77"], f"expected only pid 77, got {list(got)}"


def nccl_file(rank: int, pid: int) -> str:
    return f"==> /tmp/runs/r1/nccl/nccl.r1.rank{rank}.host-a.{pid}.log <=="


class Pod:
    """A pod's exec (automation/kube.py PodExec) answering `ray stack` and the NCCL tail, or failing either."""

    def __init__(self, stacks: ExecResult | Exception, tails: ExecResult | Exception) -> None:
        self.answers, self.limits, self.asked = {"ray": stacks, "sh": tails}, list[float](), list[tuple]()

    def __call__(self, pod, namespace, command, *, timeout_s=600.0, **kw) -> ExecResult:
        self.limits.append(timeout_s)
        self.asked.append((pod, namespace, command[-1]))
        answer = self.answers["ray" if "ray" in command else "sh"]
        if isinstance(answer, Exception):
            raise answer
        return answer


STACKS = "Stack dump for ray 11 x\n    all_reduce (t.py:1)\nStack dump for ray 12 x\n    forward (m.py:1)\n"
TAILS = f"{nccl_file(0, 11)}\nline a\nline b\n\n{nccl_file(1, 13)}\nline c\n"


def test_each_rank_gets_its_pids_stack_and_its_nccl_lines():
    pod_exec = Pod(ExecResult(0, STACKS, ""), ExecResult(0, TAILS, ""))
    r0, r1 = pod_evidence(pod_exec, "pod-a", "node-a", "ns", "/d")
    got = ((r0.rank, r0.waiting, r0.nccl_tail, r0.stack_error), (r1.rank, r1.stack, r1.stack_error, r1.nccl_tail))
    want = ((0, True, ("line a", "line b"), ""), (1, "", "no `ray stack` block for pid 13", ("line c",)))
    assert got == want, f"expected {want}, got {got}"
    where = [(r.pod, r.node) for r in (r0, r1)]
    assert where == [("pod-a", "node-a")] * 2, f"expected each rank on pod-a, node-a, got {where}"
    asked = (pod_exec.asked, pod_exec.limits)
    want_asked = ([("pod-a", "ns", "stack"), ("pod-a", "ns", "/d")], [CALL_S] * 2)
    assert asked == want_asked, f"expected the stack and /d's tail in pod-a, ns, {CALL_S} s each; got {asked}"


def test_a_failed_stack_call_is_recorded_on_every_rank_with_its_exit_and_last_words():
    pod_exec = Pod(ExecResult(124, "", "  " + "x" * 400 + "END  "), ExecResult(0, TAILS, ""))
    ranks = pod_evidence(pod_exec, "pod-a", "node-a", "ns", "/d")
    want = "rc 124: " + ("x" * 400 + "END")[-300:]
    assert [r.stack_error for r in ranks] == [want, want], f"expected {want!r} twice, got {ranks}"


def test_a_failed_stack_call_keeps_no_stack_of_a_pod_without_nccl_files():
    pod_exec = Pod(ExecResult(1, "partial", "py-spy: permission denied"), ExecResult(0, "", ""))
    got = pod_evidence(pod_exec, "p", "n", "ns", "/d")
    want = [RankEvidence(None, "p", "n", "", "rc 1: py-spy: permission denied", (), "no NCCL log files")]
    assert got == want, f"expected {want}, got {got}"


def test_a_failed_call_without_stderr_records_its_stdout():
    pod_exec = Pod(ExecResult(1, "only stdout\n", ""), ExecResult(0, TAILS, ""))
    got = pod_evidence(pod_exec, "p", "n", "ns", "/d")[0].stack_error
    assert got == "rc 1: only stdout", f"expected stdout recorded, got {got!r}"


def test_a_pod_without_nccl_files_keeps_what_its_stack_showed_as_one_unknown_rank():
    pod_exec = Pod(ExecResult(0, STACKS, ""), ExecResult(0, "", ""))
    got = pod_evidence(pod_exec, "p", "n", "ns", "/d")
    want = [RankEvidence(None, "p", "n", STACKS, "", (), "no NCCL log files")]
    assert got == want, f"expected {want}, got {got}"


def test_a_pod_whose_calls_raise_records_both_reasons():
    pod_exec = Pod(DriverError("exec timed out"), DriverError("pod gone"))
    got = pod_evidence(pod_exec, "p", "n", "ns", "/d")
    want = [RankEvidence(None, "p", "n", "", "exec timed out", (), "pod gone")]
    assert got == want, f"expected {want}, got {got}"


def test_a_non_nccl_block_of_the_tail_is_not_a_rank():
    pod_exec = Pod(ExecResult(0, STACKS, ""), ExecResult(0, "==> /d/other.txt <==\nx\n\n" + TAILS, ""))
    got = [r.rank for r in pod_evidence(pod_exec, "p", "n", "ns", "/d")]
    assert got == [0, 1], f"expected ranks 0 and 1 only, got {got}"


WAIT, WORK = "    all_reduce (t.py:1)", "    forward (m.py:1)"


def test_the_verdict_names_the_waiting_ranks_in_order():
    ranks = [RankEvidence(2, "p2", "n2", WAIT), RankEvidence(1, "p1", "n1", WORK), RankEvidence(0, "p0", "n0", WAIT)]
    behind, why = verdict(ranks)
    want = "rank 1 on node n1 (pod p1) is behind: its stack is outside any collective while ranks 0, 2 wait in one"
    assert (behind, why) == (ranks[1], want), f"expected rank 1 and {want!r}, got {behind}, {why!r}"


def test_when_every_read_rank_waits_the_rank_behind_is_not_named_and_each_rank_is_said():
    ranks = [RankEvidence(0, "p0", "n", WAIT), RankEvidence(1, "p1", "n", "", "rc 1: x")]
    behind, why = verdict(ranks)
    want = "the rank behind cannot be told from the stacks (rank 0 (p0): waits in a collective; rank 1 (p1): rc 1: x)"
    assert (behind, why) == (None, want), f"expected {want!r}, got {behind}, {why!r}"


def test_when_no_read_rank_waits_none_is_named_behind():
    behind, why = verdict([RankEvidence(0, "p0", "n", WORK), RankEvidence(1, "p1", "n", WORK)])
    want = "the rank behind cannot be told from the stacks (rank 0 (p0): outside collectives; rank 1 (p1): outside "
    assert (behind, why) == (None, want + "collectives)"), f"expected none named, got {behind}, {why!r}"


def test_a_pod_of_unknown_ranks_is_not_named_behind():
    ranks = [RankEvidence(None, "p0", "n0", WORK), RankEvidence(1, "p1", "n1", WAIT)]
    behind, why = verdict(ranks)
    want = "the rank behind cannot be told from the stacks (rank None (p0): outside collectives; "
    assert behind is None and why.startswith(want), f"expected no rank named, got {behind}, {why!r}"


def test_the_document_names_the_rank_behind_and_keeps_every_rank(tmp_path):
    ranks = [RankEvidence(0, "p0", "n0", WAIT), RankEvidence(1, "p1", "n1", WORK, nccl_tail=("t",))]
    doc = diagnosis("late by 900 s", ranks)
    write(tmp_path / "runs" / "r1", {})
    path = write(tmp_path / "runs" / "r1", doc)  # a second diagnosis of the run replaces the first
    got = json.loads(path.read_text())
    want_keys = ("late by 900 s", {"rank": 1, "node": "n1", "pod": "p1"}, [0, 1], ["t"])
    keys = (got["late"], got["behind"], [r["rank"] for r in got["ranks"]], got["ranks"][1]["nccl_tail"])
    assert (path.name, keys, got["verdict"]) == (HANG_FILE, want_keys, verdict(ranks)[1]), f"got {path}, {got}"
    text = path.read_text()  # read by people too: indented by 2, one newline at the end
    assert text == json.dumps(doc, indent=2) + "\n", f"expected the document indented by 2, got {text[:80]!r}"


def test_the_document_says_none_behind_when_it_cannot_be_told():
    doc = diagnosis("late", [RankEvidence(0, "p0", "n0", WAIT)])
    assert doc["behind"] is None, f"expected behind None, got {doc['behind']}"
