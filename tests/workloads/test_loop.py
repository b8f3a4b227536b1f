"""The training step, the warm-up schedule and the checkpoint choice, in process and on CPU.

The torchrun tests (tests/workloads/test_loop_step_equivalence.py, test_loop_resume_schedule.py,
test_train_torchrun_resume.py) prove the same promises end to end under FSDP2, in minutes; these take
seconds, so that mutation testing can run them for every mutant (TESTING.md). The model is a
plain module with the loop's calling convention, `model(ids, labels) -> mean loss`.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import shutil
import threading
import time
from pathlib import Path
from unittest.mock import MagicMock, patch

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import loop
from workloads.config import TrainConfig
from workloads.loop import (
    STATE_FILE,
    SUMMARY_FILE,
    Checkpointer,
    FirstStepsOutOfMemory,
    WorkerEnv,
    _warmup_schedule,
    data_position_of,
    halved,
    latest_complete,
    report_metrics,
    train_loop_per_worker,
    train_step,
)
from workloads.metrics import read_metrics
from workloads.summary import RunSummary

VOCAB = 11
CPU = torch.device("cpu")
PLAIN = WorkerEnv(rank=0, world=1, local_rank=0, under_ray=False)


class TinyLM(torch.nn.Module):
    """Mean next-token cross-entropy of an embedding and a linear head."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(VOCAB, 4)
        self.head = torch.nn.Linear(4, VOCAB)

    def forward(self, ids, labels):
        return F.cross_entropy(self.head(self.emb(ids)).flatten(0, 1), labels.flatten())


class SyncRecorder(TinyLM):
    """Records what `train_step` asks of FSDP2's gradient sync, micro-batch by micro-batch."""

    def __init__(self):
        super().__init__()
        self.sync_calls: list[bool] = []

    def set_requires_gradient_sync(self, sync: bool) -> None:
        self.sync_calls.append(sync)


def _batch(rows: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, 5), generator=torch.Generator().manual_seed(seed))


def _sgd_step(model, micro_batches, clip=1e9, stats=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    batches = iter((m, m) for m in micro_batches)
    loss = train_step(model, opt, batches, len(micro_batches), clip, CPU, VOCAB, stats)
    return loss, opt


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_accumulated_micro_batches_give_the_loss_and_update_of_one_batch():
    data = _batch(4, seed=1)
    one, accum = TinyLM(), TinyLM()
    loss_one, _ = _sgd_step(one, [data])
    loss_accum, _ = _sgd_step(accum, list(data.split(1)))
    torch.testing.assert_close(loss_accum, loss_one, msg=lambda m: f"loss of 4 micro-batches vs one batch: {m}")
    gap = (_flat(accum) - _flat(one)).abs().max().item()
    assert gap < 1e-6, f"expected the parameters of one SGD step on the whole batch, largest difference {gap:.3g}"


def test_only_the_last_micro_batch_syncs_gradients():
    model = SyncRecorder()
    _sgd_step(model, list(_batch(3, seed=2).split(1)))
    assert model.sync_calls == [False, False, True], f"expected sync on the last of 3 only, got {model.sync_calls}"


def test_gradients_do_not_leak_into_the_next_step():
    data = [_batch(2, seed=3), _batch(2, seed=4)]
    stepped, fresh = TinyLM(), TinyLM()
    _sgd_step(stepped, [data[0]])
    _sgd_step(stepped, [data[1]])
    _sgd_step(fresh, [data[0]])
    expected = TinyLM()
    expected.load_state_dict(fresh.state_dict())
    _sgd_step(expected, [data[1]])
    gap = (_flat(stepped) - _flat(expected)).abs().max().item()
    assert gap < 1e-6, f"the second step's update carried the first step's gradient (difference {gap:.3g})"


def test_gradient_norm_is_reported_before_clipping_and_the_update_is_clipped():
    model, stats = TinyLM(), {}
    before = _flat(model).clone()
    _sgd_step(model, [_batch(4, seed=5)], clip=1e-3, stats=stats)
    moved = (_flat(model) - before).norm().item()
    assert stats["grad_norm"].item() > 1e-2, f"expected the unclipped norm, got {stats['grad_norm']}"
    assert moved == pytest.approx(0.5 * 1e-3, rel=1e-3), f"expected an update of lr x clip = 5e-4, got {moved:.3g}"


def test_token_id_equal_to_the_vocabulary_size_is_refused():
    ids = torch.tensor([[0, VOCAB]])
    with pytest.raises(RuntimeError, match=f"token id {VOCAB} >= vocab {VOCAB}"):
        _sgd_step(TinyLM(), [ids])


def test_largest_token_id_of_the_vocabulary_trains():
    loss, _ = _sgd_step(TinyLM(), [torch.tensor([[0, VOCAB - 1]])])
    assert torch.isfinite(loss).all(), f"expected a finite loss, got {loss}"


@pytest.mark.parametrize(("warmup", "expected"), [(4, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]), (0, [1.0] * 6)])
def test_warmup_rises_linearly_to_the_configured_rate_then_holds(warmup, expected):
    opt = torch.optim.SGD(TinyLM().parameters(), lr=0.2)
    sched = _warmup_schedule(TrainConfig(preset="tiny", lr=0.2, warmup_steps=warmup), opt)
    got = []
    for _ in expected:
        got.append(round(opt.param_groups[0]["lr"] / 0.2, 6))
        opt.step()
        sched.step()
    assert got == expected, f"expected rates (x lr) {expected} over the first steps, got {got}"


def _checkpoint(root, step: int, state: bool = True, metadata: bool = True):
    d = root / f"checkpoint_{step:06d}"
    d.mkdir(parents=True)
    if state:
        (d / STATE_FILE).write_text("{}")
    if metadata:
        (d / ".metadata").write_text("")
    return d


def test_newest_complete_checkpoint_is_chosen_over_newer_incomplete_ones(tmp_path):
    _checkpoint(tmp_path, 2)
    chosen = _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 12, metadata=False)  # DCP's save still landing
    _checkpoint(tmp_path, 14, state=False)  # rank 0 has not written the step state yet
    assert latest_complete(tmp_path) == chosen, f"expected {chosen.name}, got {latest_complete(tmp_path)}"


def test_no_checkpoint_without_a_complete_one(tmp_path):
    _checkpoint(tmp_path, 2, metadata=False)
    assert latest_complete(tmp_path) is None
    assert latest_complete(tmp_path / "absent") is None


@pytest.fixture
def process_group(tmp_path):
    """A one-rank gloo group: the checkpointer's barriers and gathers need one."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _cfg(tmp_path) -> TrainConfig:
    cfg = TrainConfig(preset="tiny", run_id="ckpt", run_dir=str(tmp_path / "run")).resolved()
    return dataclasses.replace(cfg, storage_path=str(tmp_path / "store"))


def test_fresh_run_restores_step_zero(tmp_path):
    model = TinyLM()
    state = Checkpointer(_cfg(tmp_path), PLAIN).restore(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert state == {"step": 0, "losses": []}, f"expected a fresh start, got {state}"


def test_restore_loads_the_newest_saved_step_with_its_weights_and_data_position(tmp_path, process_group):
    cfg = _cfg(tmp_path)
    model = TinyLM(seed=1)
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    ckpt = Checkpointer(cfg, PLAIN)
    ckpt.save({"step": 2, "losses": [3.0, 2.0]}, model, opt, data_position={"docs": 1})
    _sgd_step(model, [_batch(2, seed=7)])
    saved = _flat(model).clone()
    path = ckpt.save({"step": 4, "losses": [3.0, 2.0, 1.5, 1.0]}, model, opt, data_position={"docs": 2})

    fresh = TinyLM(seed=2)
    state = Checkpointer(cfg, PLAIN).restore(fresh, torch.optim.SGD(fresh.parameters(), lr=0.5))
    assert path.endswith("checkpoint_000004"), f"expected the step-4 checkpoint's path, got {path}"
    assert (state["step"], state["data"]) == (4, [{"docs": 2}]), f"expected step 4 at docs 2, got {state}"
    gap = (_flat(fresh) - saved).abs().max().item()
    assert gap == 0.0, f"expected the saved weights of step 4, largest difference {gap:.3g}"


def test_resume_past_step_nine_picks_the_numerically_newest_checkpoint(tmp_path, process_group):
    # saves on both sides of step 10: a text order of the folder names would pick step 9
    cfg = _cfg(tmp_path)
    model = TinyLM(seed=1)
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    ckpt = Checkpointer(cfg, PLAIN)
    for step in (9, 10, 11):
        ckpt.save({"step": step, "losses": []}, model, opt)
    state = Checkpointer(cfg, PLAIN).restore(model, opt)
    assert state["step"] == 11, f"expected the step-11 checkpoint, got step {state['step']}"


def test_checkpoint_folders_are_ordered_by_step_number_not_by_name(tmp_path):
    for name in ("checkpoint_9", "checkpoint_10", "checkpoint_11"):
        (tmp_path / name).mkdir()
        (tmp_path / name / STATE_FILE).write_text("{}")
        (tmp_path / name / ".metadata").write_text("")
    got = latest_complete(tmp_path)
    assert got == tmp_path / "checkpoint_11", f"expected checkpoint_11, got {got}"


def test_step_returns_the_batch_mean_loss_as_one_positive_element():
    model, batch = TinyLM(seed=3), _batch(4, seed=8)
    with torch.no_grad():
        expected = model(batch, batch).item()
    loss, _ = _sgd_step(model, [batch[:2], batch[2:]])
    assert loss.shape == (1,), f"expected one element for the all-reduce and .item(), got shape {tuple(loss.shape)}"
    assert loss.item() == pytest.approx(expected, rel=1e-5), f"expected the batch's mean loss {expected}, got {loss}"


def test_step_frees_the_gradients_it_applied():
    model = TinyLM()
    _sgd_step(model, [_batch(2, seed=9)])
    kept = [name for name, p in model.named_parameters() if p.grad is not None]
    assert not kept, f"expected no gradient kept between steps (set_to_none frees their memory), got {kept}"


def test_save_over_an_incomplete_checkpoint_of_the_same_step_replaces_it(tmp_path, process_group):
    """A run that died while saving step 4 and resumed from step 2 saves step 4 again into the same folder."""
    cfg = _cfg(tmp_path)
    model = TinyLM(seed=1)
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    ckpt = Checkpointer(cfg, PLAIN)
    _checkpoint(Path(ckpt.plain_root), 4, state=False, metadata=False)  # the dead run's partial save
    path = ckpt.save({"step": 4, "losses": [1.0] * 4}, model, opt)
    assert latest_complete(Path(ckpt.plain_root)) == Path(path), f"expected {path} complete after the second save"


@pytest.mark.parametrize("summary", [None, RunSummary(loss_last=1.25, steps=4)], ids=["mid-run", "final"])
def test_only_the_final_save_writes_the_run_summary(tmp_path, process_group, summary):
    model = TinyLM()
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    path = Path(Checkpointer(_cfg(tmp_path), PLAIN).save({"step": 4, "losses": []}, model, opt, summary=summary))
    written = RunSummary.parse((path / SUMMARY_FILE).read_text()) if (path / SUMMARY_FILE).exists() else "no file"
    expected = summary or "no file"
    assert written == expected, f"expected summary {expected}, got {written}"


def test_ray_records_the_step_states_scalars_beside_a_mid_run_checkpoint():
    state = {"step": 4, "losses": [2.0, 1.5], "run_id": "r1", "data": [{"docs": 3}], "note": None}
    got = report_metrics(state)
    assert got == {"step": 4, "run_id": "r1", "note": None}, f"expected the step (automation drill reads it), got {got}"


def test_ray_records_the_summarys_scalars_beside_the_final_checkpoint():
    summary = RunSummary(loss_last=1.25, losses=(2.0, 1.25), backend="gloo")
    got = report_metrics({"step": 20, "losses": []}, summary)
    kept = {k: got.get(k, "absent") for k in ("loss_last", "mfu", "backend", "losses")}
    assert kept == {"loss_last": 1.25, "mfu": None, "backend": "gloo", "losses": "absent"}, f"got {got}"


# ---- under Ray Train: the checkpoint goes through ray.train.report and comes back through get_checkpoint.
# Ray Train itself runs in tests/workloads/test_train_ray.py (a killed worker resumes); here its two calls
# are stood in for, so that the checkpointer's side of them runs in seconds.
RAY = WorkerEnv(rank=0, world=1, local_rank=0, under_ray=True)


class _RayTrainStandIn:
    """ray.train.report keeps a copy of each reported checkpoint (Ray uploads it to storage); get_checkpoint
    hands the newest back, as the controller does to a restarted worker group."""

    def __init__(self, store: Path):
        self.store = store
        self.reports: list = []

    def report(self, metrics, checkpoint=None):
        kept = None
        if checkpoint is not None:
            kept = self.store / f"checkpoint_{len(self.reports)}"
            shutil.copytree(checkpoint.path, kept)
        self.reports.append({"metrics": metrics, "checkpoint": kept, "local": checkpoint and checkpoint.path})

    def get_checkpoint(self):
        import ray.train

        kept = [r["checkpoint"] for r in self.reports if r["checkpoint"]]
        return ray.train.Checkpoint.from_directory(str(kept[-1])) if kept else None


@pytest.fixture
def ray_train(tmp_path, monkeypatch):
    import ray.train

    stand_in = _RayTrainStandIn(tmp_path / "ray-storage")
    monkeypatch.setattr(ray.train, "report", stand_in.report)
    monkeypatch.setattr(ray.train, "get_checkpoint", stand_in.get_checkpoint)
    return stand_in


def test_ray_save_reports_the_checkpoint_with_its_scalars_and_removes_the_local_copy(
    tmp_path, process_group, ray_train
):
    model = TinyLM(seed=1)
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    returned = Checkpointer(_cfg(tmp_path), RAY).save({"step": 4, "losses": [2.0, 1.0], "run_id": "ckpt"}, model, opt)
    [report] = ray_train.reports
    assert returned is None, f"under Ray the stored path comes from Ray Train, got {returned}"
    assert report["metrics"] == {"step": 4, "run_id": "ckpt"}, f"got {report['metrics']}"
    assert json.loads((report["checkpoint"] / STATE_FILE).read_text())["step"] == 4, "the step state was not reported"
    assert (report["checkpoint"] / ".metadata").exists(), "the model and optimizer shards were not reported"
    assert not Path(report["local"]).exists(), f"the local copy {report['local']} was left behind"


def test_ray_final_save_reports_the_summarys_scalars(tmp_path, process_group, ray_train):
    model = TinyLM()
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    summary = RunSummary(loss_last=1.0, losses=(1.0,))
    Checkpointer(_cfg(tmp_path), RAY).save({"step": 4, "losses": [1.0]}, model, opt, summary=summary)
    got = ray_train.reports[0]["metrics"]
    assert (got["loss_last"], "losses" in got) == (1.0, False), f"got {got}"


def test_ray_restore_loads_the_checkpoint_ray_train_hands_over(tmp_path, process_group, ray_train):
    cfg = _cfg(tmp_path)
    model = TinyLM(seed=1)
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    Checkpointer(cfg, RAY).save({"step": 4, "losses": [2.0, 1.0]}, model, opt, data_position={"docs": 2})
    fresh = TinyLM(seed=2)
    state = Checkpointer(cfg, RAY).restore(fresh, torch.optim.SGD(fresh.parameters(), lr=0.5))
    assert (state["step"], state["losses"], state["data"]) == (4, [2.0, 1.0], [{"docs": 2}]), f"got {state}"
    gap = (_flat(fresh) - _flat(model)).abs().max().item()
    assert gap == 0.0, f"expected the reported weights, largest difference {gap:.3g}"


def test_ray_restore_without_a_checkpoint_starts_fresh(tmp_path, ray_train):
    model = TinyLM()
    state = Checkpointer(_cfg(tmp_path), RAY).restore(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert state == {"step": 0, "losses": []}, f"expected a fresh start, got {state}"


class AfterStepRecorder(TinyLM):
    """Records `after_optimizer_step` calls with the weights they see (CausalLM refreshes float8 scales there)."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def after_optimizer_step(self) -> None:
        self.seen.append(self.head.weight.detach().clone())


def test_the_model_hears_of_each_optimizer_step_after_the_weights_changed():
    model = AfterStepRecorder()
    before = model.head.weight.detach().clone()
    _sgd_step(model, [_batch(2, 1), _batch(2, 2)])
    assert len(model.seen) == 1, f"expected one call per optimizer step (not per micro-batch), got {len(model.seen)}"
    assert not torch.equal(model.seen[0], before), "after_optimizer_step ran before the optimizer changed the weights"


# ---- Which data position a rank resumes from, out of a checkpoint's state.

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


# ---- Fault injection under Ray Train waits for the controller to take the worker's reports before the
# death (workloads.loop._maybe_fail): a death before that loses the last checkpoint.

context = pytest.importorskip("ray.train.v2._internal.execution.context")


class _Ctx:
    def __init__(self, q: queue.Queue):
        self.q = q

    def get_result_queue(self) -> queue.Queue:
        return self.q


@pytest.fixture
def result_queue(monkeypatch) -> queue.Queue:
    q: queue.Queue = queue.Queue(maxsize=1)  # as Ray Train V2 makes it
    monkeypatch.setattr(context, "get_train_context", lambda: _Ctx(q))
    return q


def test_waits_until_the_controller_takes_the_pending_report(result_queue):
    result_queue.put("checkpoint report")
    taken_at: list[float] = []

    def controller_poll():
        time.sleep(0.4)
        result_queue.get_nowait()
        taken_at.append(time.monotonic())

    threading.Thread(target=controller_poll, daemon=True).start()
    loop._wait_until_reports_taken(timeout_s=10)
    returned_at = time.monotonic()
    assert taken_at, "returned before the report was taken"
    assert returned_at >= taken_at[0], f"returned {taken_at[0] - returned_at:.3f} s before the report was taken"


def test_returns_at_once_when_no_report_is_pending(result_queue):
    t0 = time.monotonic()
    loop._wait_until_reports_taken(timeout_s=10)
    assert time.monotonic() - t0 < 1.0, "waited with an empty queue"


def test_a_report_never_taken_fails_naming_the_wait(result_queue):
    result_queue.put("checkpoint report")
    with pytest.raises(RuntimeError, match="took no report of this worker in 0 s"):
        loop._wait_until_reports_taken(timeout_s=0.2)


# ---- A GPU out of memory in the first optimizer steps halves the micro-batch and doubles the accumulation
# (workloads.loop.train_loop_per_worker), on CPU with the OOM injected by `--oom-drill-micro-batch`.

OOM = FirstStepsOutOfMemory(1, "CUDA out of memory.")


def test_halving_keeps_the_global_batch_and_the_tokens_per_step():
    cfg = TrainConfig(num_workers=2, global_batch_size=16, micro_batch_size=8)
    got = halved(cfg, OOM)
    assert (got.micro_batch, got.grad_accum) == (4, 2), f"expected 4 x 2, got {got.micro_batch} x {got.grad_accum}"
    assert got.tokens_per_step == cfg.tokens_per_step, f"tokens per step {got.tokens_per_step} != {cfg.tokens_per_step}"


def test_halving_picks_a_micro_batch_that_divides_the_per_worker_batch():
    got = halved(TrainConfig(num_workers=1, global_batch_size=6, micro_batch_size=6), OOM)
    assert (got.micro_batch, got.grad_accum) == (3, 2), f"expected 3 x 2, got {got.micro_batch} x {got.grad_accum}"


def test_a_micro_batch_of_one_fails_naming_the_fix():
    fix = "micro-batch of 1 x 2048 tokens, so nothing is left to halve: lower --seq-len"
    with pytest.raises(RuntimeError, match=fix):
        halved(TrainConfig(global_batch_size=4, micro_batch_size=1), OOM)


@pytest.fixture
def group(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_FILE", "")  # the loop routes NCCL's log through the environment
    monkeypatch.setenv("NCCL_DEBUG", "")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _run(tmp_path, drill: int) -> RunSummary:
    cfg = TrainConfig(
        preset="tiny", steps=3, global_batch_size=4, micro_batch_size=4, seq_len=32, oom_drill_micro_batch=drill
    )
    cfg = dataclasses.replace(cfg, run_id="oom", run_dir=str(tmp_path / "run")).resolved()
    summary = train_loop_per_worker(cfg.to_dict())
    assert summary is not None, "rank 0 of a plain launch returns the summary"
    return summary


def test_first_step_oom_continues_with_half_the_micro_batch(tmp_path, group, capsys):
    summary = _run(tmp_path, drill=3)
    got = [(f["step"], f["micro_batch"], f["to_micro_batch"], f["to_grad_accum"]) for f in summary.oom_fallbacks]
    assert got == [(1, 4, 2, 2)], f"expected one fallback at step 1 from 4 to 2 x 2, got {got}"
    assert len(summary.losses) == 3, f"expected all 3 steps trained, got losses {summary.losses}"
    assert "out of GPU memory at step 1 with micro-batch 4 x 1 accumulated" in capsys.readouterr().out


def test_metrics_after_an_oom_name_the_new_micro_batch_and_accumulation(tmp_path, group):
    _run(tmp_path, drill=3)
    lines = read_metrics(tmp_path / "run" / "metrics.jsonl")
    got = [(r["step"], r["micro_batch"], r["grad_accum"]) for r in lines]
    assert got == [(1, 2, 2), (2, 2, 2), (3, 2, 2)], f"expected steps 1-3 at micro-batch 2 x 2, got {got}"


def test_oom_at_micro_batch_one_ends_the_run_loudly(tmp_path, group):
    with pytest.raises(RuntimeError, match="nothing is left to halve"):
        _run(tmp_path, drill=1)


def test_repeated_ooms_halve_until_the_step_fits(tmp_path, group):
    summary = _run(tmp_path, drill=2)
    assert [f["to_micro_batch"] for f in summary.oom_fallbacks] == [2, 1], summary.oom_fallbacks
    assert (summary.micro_batch, summary.grad_accum) == (1, 4), summary


# ---- Properties of the out-of-memory fallback (workloads/loop.py): any OOM in the first steps of an attempt halves
# the micro-batch and keeps the global batch; an OOM after that window is the run's error, not a fallback.
#
# The window is 3 optimizer steps (loop.py's comment: the first step allocates the activations, the second the
# optimizer's state, the third is the steady state); it is written here as a number so that moving it is a
# visible change to this test.

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
    tr = loop.Training(torch.nn.Linear(1, 1), MagicMock(), n_params=2, vocab=8, n_layers=1, hidden=1)
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


@PROPERTY
@given(
    nth=st.integers(min_value=0, max_value=2 * WINDOW),
    kind=st.sampled_from([RuntimeError, ValueError, KeyError, OSError, MemoryError]),  # MemoryError: host, not GPU
    text=st.sampled_from(["NCCL error", "bad batch", "CUDA error: an illegal memory access was encountered"]),
)
def test_an_error_other_than_an_oom_is_never_a_fallback(nth, kind, text):
    error = kind(text)
    got, _, _ = _step(nth, error)
    assert got is error, f"attempt step {nth}: expected {error!r} unchanged, got {got!r}"


def test_a_micro_batch_of_two_halves_to_one():
    got = halved(TrainConfig(num_workers=1, global_batch_size=2, micro_batch_size=2), FirstStepsOutOfMemory(1, "x"))
    assert (got.micro_batch, got.grad_accum) == (1, 2), f"expected 1 x 2, got {got.micro_batch} x {got.grad_accum}"
