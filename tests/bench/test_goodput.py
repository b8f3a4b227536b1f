"""The pure parts of bench/goodput.py, and the cluster's checkpoint interval pinned to the Young/Daly rule."""

from __future__ import annotations

import math
import statistics

import pytest

from automation.storage import CHECKPOINT_EVERY
from bench.goodput import (
    CLUSTER,
    cluster_interval,
    failure_gaps,
    goodput,
    interval_steps,
    predicted_goodput,
    run_times,
    young_daly_interval_s,
)


def test_young_daly_interval_is_the_root_of_twice_cost_times_mtbf():
    got = young_daly_interval_s(checkpoint_s=2.0, mtbf_s=3600.0)
    assert got == pytest.approx(120.0), f"expected sqrt(2 x 2 x 3600) = 120 s, got {got}"


def test_young_daly_refuses_a_cost_of_zero():
    with pytest.raises(ValueError, match="positive"):
        young_daly_interval_s(0.0, 3600.0)


def test_interval_steps_rounds_the_interval_to_whole_steps():
    got = interval_steps(checkpoint_s=2.0, mtbf_s=3600.0, step_s=7.0)
    assert got == 17, f"expected 120 s / 7 s = 17.1 rounded to 17 steps, got {got}"


def test_goodput_is_failure_free_time_over_wall_time():
    got = goodput(steps=100, step_s=0.5, wall_s=80.0)
    assert got == pytest.approx(0.625), f"expected 100 x 0.5 / 80 = 0.625, got {got}"


def test_failure_gaps_repeat_for_the_same_seed():
    assert failure_gaps(20.0, 5, seed=46) == failure_gaps(20.0, 5, seed=46), "one seed gave two schedules"


def test_failure_gaps_have_the_stated_mean():
    mean = statistics.mean(failure_gaps(20.0, 20_000, seed=1))
    assert mean == pytest.approx(20.0, rel=0.03), f"expected a mean gap near 20 s, got {mean:.2f}"


def test_predicted_goodput_peaks_near_the_young_daly_interval():
    c, m, r = 1.0, 400.0, 5.0
    taus = [x / 10 for x in range(10, 2000)]
    best = max(taus, key=lambda t: predicted_goodput(t, c, m, r))
    assert best == pytest.approx(young_daly_interval_s(c, m), rel=0.1), (
        f"expected the model's best interval near sqrt(2CM) = {young_daly_interval_s(c, m):.1f} s, got {best}"
    )


def _records(times_steps: list[tuple[float, int]]) -> list[dict]:
    return [{"time": t, "step": s, "step_time_s": 0.1} for t, s in times_steps]


def test_run_times_takes_the_checkpoint_cost_from_the_gap_across_a_checkpoint():
    # steps 1-4 a second apart, a checkpoint after step 2 adds 3 s
    got = run_times(_records([(1.0, 1), (2.0, 2), (6.0, 3), (7.0, 4)]), steps=4, every=2).checkpoint_s
    assert got == pytest.approx(3.0), f"expected 4 s across the checkpoint less the 1 s step = 3 s, got {got}"


def test_run_times_counts_each_redone_step_as_lost():
    # killed after step 3, resumed from the checkpoint at step 2: step 3 done twice
    records = _records([(1.0, 1), (2.0, 2), (3.0, 3), (20.0, 3), (21.0, 4)])
    got = run_times(records, steps=4, every=2, kills=[10.0]).redone_steps
    assert got == 1, f"expected one step done again, got {got}"


def test_run_times_leaves_a_kill_out_of_the_step_time():
    # resumed from the checkpoint at step 2 having lost nothing: the gap 2 -> 3 holds the restart
    records = _records([(1.0, 1), (2.0, 2), (30.0, 3), (31.0, 4)])
    got = run_times(records, steps=4, every=2, kills=[10.0]).checkpoint_s
    assert got is None, f"expected no checkpoint gap (the only one holds a kill), got {got}"


def test_run_times_wall_starts_at_the_first_step():
    got = run_times(_records([(1.0, 1), (2.0, 2)]), steps=2, every=10).wall_s
    assert got == pytest.approx(1.1), f"expected 2.0 - (1.0 - 0.1) = 1.1 s, got {got}"


def test_cluster_mtbf_scales_llama3_interruptions_to_eight_gpus():
    got = cluster_interval()["mtbf_s"]
    want = 54 * 86_400 * 16_384 / 419 / 8
    assert got == pytest.approx(want), f"expected {want:.0f} s, got {got:.0f}"


def test_cluster_default_checkpoint_interval_is_young_dalys():
    # Changing an input in bench/goodput.py's CLUSTER without CHECKPOINT_EVERY (or the reverse) fails here.
    c = cluster_interval()
    want = max(1, round(math.sqrt(2 * c["checkpoint_s"] * c["mtbf_s"]) / CLUSTER["step_s"]))
    assert want == CHECKPOINT_EVERY, (
        f"Young/Daly gives {want} steps (C {c['checkpoint_s']:.1f} s, MTBF {c['mtbf_s']:.0f} s, step "
        f"{CLUSTER['step_s']:.2f} s) but automation/storage.py's CHECKPOINT_EVERY is {CHECKPOINT_EVERY}"
    )
