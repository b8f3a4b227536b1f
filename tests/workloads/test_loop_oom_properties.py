"""Properties of the out-of-memory fallback (workloads/loop.py): any OOM in the first steps of an attempt halves
the micro-batch and keeps the global batch; an OOM after that window is the run's error, not a fallback.

The window is 3 optimizer steps (loop.py's comment: the first step allocates the activations, the second the
optimizer's state, the third is the steady state); it is written here as a number so that moving it is a
visible change to this test.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import MagicMock, patch

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import loop
from workloads.config import TrainConfig
from workloads.loop import FirstStepsOutOfMemory, halved

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
WINDOW = 3  # steps 0, 1 and 2 of an attempt may fall back (see the module docstring)


@st.composite
def batch_shape(draw) -> TrainConfig:
    """A valid (workers, global batch, micro-batch) with a micro-batch above 1 that divides the per-worker batch."""
    workers = draw(st.integers(min_value=1, max_value=16))
    micro = draw(st.integers(min_value=2, max_value=64))
    accum = draw(st.integers(min_value=1, max_value=16))
    return TrainConfig(num_workers=workers, global_batch_size=workers * micro * accum, micro_batch_size=micro)


@PROPERTY
@given(cfg=batch_shape(), step=st.integers(min_value=1, max_value=10**6))
def test_halving_keeps_the_global_batch_with_a_micro_batch_at_most_half_that_divides_it(cfg, step):
    got = halved(cfg, FirstStepsOutOfMemory(step, "CUDA out of memory."))
    per_worker = cfg.global_batch_size // cfg.num_workers
    assert got.global_batch_size == cfg.global_batch_size and got.tokens_per_step == cfg.tokens_per_step, got
    assert 1 <= got.micro_batch <= cfg.micro_batch // 2, f"{cfg.micro_batch} -> {got.micro_batch}"
    assert per_worker % got.micro_batch == 0, f"{got.micro_batch} does not divide the per-worker batch {per_worker}"
    assert got.micro_batch * got.grad_accum == per_worker, f"{got.micro_batch} x {got.grad_accum} != {per_worker}"


@PROPERTY
@given(cfg=batch_shape())
def test_halving_picks_the_largest_micro_batch_that_fits_under_half(cfg):
    got = halved(cfg, FirstStepsOutOfMemory(1, "CUDA out of memory."))
    per_worker = cfg.global_batch_size // cfg.num_workers
    larger = [m for m in range(got.micro_batch + 1, cfg.micro_batch // 2 + 1) if per_worker % m == 0]
    assert not larger, f"{cfg.micro_batch} -> {got.micro_batch}, but {larger} also divide {per_worker}"


def _step(nth: int, error: BaseException | None):
    """loop._step_or_oom for attempt step ``nth`` whose train_step raises ``error`` (None: returns a loss)."""
    cfg = TrainConfig(global_batch_size=8, micro_batch_size=4)
    tr = SimpleNamespace(model=None, optimizer=MagicMock(), vocab=8)
    recorder = MagicMock()
    effect = error if error is not None else (lambda *a, **k: torch.tensor(1.0))
    with patch.object(loop, "train_step", side_effect=effect):
        try:
            return loop._step_or_oom(cfg, nth, 7, tr, [], torch.device("cpu"), None, recorder), tr, recorder
        except BaseException as e:  # noqa: BLE001 - what the step raised is the result under test
            return e, tr, recorder


@PROPERTY
@given(nth=st.integers(min_value=0, max_value=WINDOW - 1))
def test_an_oom_in_the_window_becomes_a_fallback_that_frees_the_step(nth):
    got, tr, recorder = _step(nth, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert isinstance(got, FirstStepsOutOfMemory) and got.step == 7, f"attempt step {nth}: got {got!r}"
    assert tr.optimizer.zero_grad.called and recorder.close.called, "the failed step's gradients were kept"


@PROPERTY
@given(nth=st.integers(min_value=WINDOW, max_value=10**6))
def test_an_oom_past_the_window_is_the_runs_error(nth):
    got, _, _ = _step(nth, torch.OutOfMemoryError("CUDA out of memory."))
    assert type(got) is torch.OutOfMemoryError, f"attempt step {nth}: expected the OOM itself, got {got!r}"


@pytest.mark.parametrize("error", [RuntimeError("NCCL error"), ValueError("bad batch")])
def test_an_error_other_than_an_oom_is_never_a_fallback(error):
    got, _, _ = _step(0, error)
    assert got is error, f"expected {error!r} unchanged, got {got!r}"


def test_a_micro_batch_of_two_halves_to_one():
    got = halved(TrainConfig(num_workers=1, global_batch_size=2, micro_batch_size=2), FirstStepsOutOfMemory(1, "x"))
    assert (got.micro_batch, got.grad_accum) == (1, 2), f"expected 1 x 2, got {got.micro_batch} x {got.grad_accum}"
