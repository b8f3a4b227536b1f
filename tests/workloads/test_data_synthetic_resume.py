"""Synthetic data resumes at the right step: a rank's stream started at step k (as the loop starts it
after restoring a step-k checkpoint) yields what the uninterrupted stream yields from step k on, with
gradient accumulation and past step 9. The real runs that show the same (a killed worker ends at the
uninterrupted loss) are slow: tests/workloads/test_loop_resume_schedule.py and the drill."""

from __future__ import annotations

import pytest
import torch

from workloads.config import TrainConfig
from workloads.data import MicroBatches

# 2 ranks x 1 sequence x 2 micro-steps = a global batch of 4: two micro-batches per step and rank.
CFG = TrainConfig(preset="tiny", task="learnable", seq_len=8, global_batch_size=4, num_workers=2, micro_batch_size=1)
MICRO_PER_STEP = 2


def micro_batches(rank: int, start_step: int, n: int) -> list[torch.Tensor]:
    it = MicroBatches(CFG, 512, rank, 2).iterate(start_step)
    return [next(it)[0] for _ in range(n)]


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("step", [1, 4, 11])
def test_stream_resumed_at_a_step_yields_the_uninterrupted_streams_batches_from_that_step(rank, step):
    assert CFG.grad_accum == MICRO_PER_STEP, f"expected {MICRO_PER_STEP} micro-batches a step, got {CFG.grad_accum}"
    uninterrupted = micro_batches(rank, 0, (step + 2) * MICRO_PER_STEP)[step * MICRO_PER_STEP :]
    resumed = micro_batches(rank, step, 2 * MICRO_PER_STEP)
    same = [torch.equal(a, b) for a, b in zip(resumed, uninterrupted, strict=True)]
    assert all(same), f"rank {rank} resumed at step {step}: micro-batches equal to the uninterrupted ones: {same}"


def test_neighbouring_steps_give_other_batches():
    """So the test above can tell a resume one step early or late from the right one."""
    first = [micro_batches(0, s, 1)[0] for s in (3, 4, 5)]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2]), (
        "expected steps 3, 4 and 5 to start with different micro-batches"
    )
