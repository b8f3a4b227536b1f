"""Which data position a rank resumes from, out of a checkpoint's state."""

from __future__ import annotations

import pytest

from workloads.loop import data_position_of

STATE = {"step": 8, "data": [{"epoch": 0, "docs": 3, "carry": [5]}, {"epoch": 0, "docs": 4, "carry": []}]}


def test_each_rank_gets_its_own_position():
    got = [data_position_of(STATE, r, 2)["docs"] for r in range(2)]
    assert got == [3, 4], f"ranks 0 and 1 resumed at docs {got}"


def test_state_without_positions_resumes_synthetic_data():
    assert data_position_of({"step": 8, "losses": []}, 0, 2) is None


def test_other_world_size_is_refused_naming_the_fix():
    with pytest.raises(
        RuntimeError,
        match="the checkpoint at step 8 holds the data positions of 2 ranks but this run has 4: "
        "resume with --num-workers 2",
    ):
        data_position_of(STATE, 0, 4)
