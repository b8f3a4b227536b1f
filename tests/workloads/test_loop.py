"""The training step, the warm-up schedule and the checkpoint choice, in process and on CPU.

The torchrun tests (tests/workloads/test_loop_step_equivalence.py, test_loop_resume_schedule.py,
test_train_torchrun_resume.py) prove the same promises end to end under FSDP2, in minutes; these take
seconds, so that mutation testing can run them for every mutant (TESTING.md). The model is a
plain module with the loop's calling convention, `model(ids, labels) -> mean loss`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from workloads.config import TrainConfig
from workloads.loop import (
    STATE_FILE,
    SUMMARY_FILE,
    Checkpointer,
    WorkerEnv,
    _warmup_schedule,
    latest_complete,
    report_metrics,
    train_step,
)

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


@pytest.mark.parametrize("summary", [None, {"loss_last": 1.25, "steps": 4}], ids=["mid-run", "final"])
def test_only_the_final_save_writes_the_run_summary(tmp_path, process_group, summary):
    model = TinyLM()
    _, opt = _sgd_step(model, [_batch(2, seed=6)])
    path = Path(Checkpointer(_cfg(tmp_path), PLAIN).save({"step": 4, "losses": []}, model, opt, summary=summary))
    written = json.loads((path / SUMMARY_FILE).read_text()) if (path / SUMMARY_FILE).exists() else "no file"
    expected = summary or "no file"
    assert written == expected, f"expected summary {expected}, got {written}"


def test_ray_records_the_step_states_scalars_beside_a_mid_run_checkpoint():
    state = {"step": 4, "losses": [2.0, 1.5], "run_id": "r1", "data": [{"docs": 3}], "note": None}
    got = report_metrics(state)
    assert got == {"step": 4, "run_id": "r1", "note": None}, f"expected the step (automation drill reads it), got {got}"


def test_ray_records_the_summarys_scalars_beside_the_final_checkpoint():
    summary = {"loss_last": 1.25, "mfu": None, "losses": [2.0, 1.25], "backend": "gloo"}
    got = report_metrics({"step": 20, "losses": []}, summary)
    assert got == {"loss_last": 1.25, "mfu": None, "backend": "gloo"}, f"got {got}"


# ---- under Ray Train: the checkpoint goes through ray.train.report and comes back through get_checkpoint.
# Ray Train itself runs in tests/workloads/test_train_ray.py (a killed worker resumes); here its two calls
# are stood in for, so that the checkpointer's side of them runs in seconds.
RAY = WorkerEnv(rank=0, world=1, local_rank=0, under_ray=True)


class _RayTrainStandIn:
    """ray.train.report keeps a copy of each reported checkpoint (Ray uploads it to storage); get_checkpoint
    hands the newest back, as the controller does to a restarted worker group."""

    def __init__(self, store: Path):
        self.store, self.reports = store, []

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
    summary = {"loss_last": 1.0, "losses": [1.0]}
    Checkpointer(_cfg(tmp_path), RAY).save({"step": 4, "losses": [1.0]}, model, opt, summary=summary)
    assert ray_train.reports[0]["metrics"] == {"loss_last": 1.0}, f"got {ray_train.reports[0]['metrics']}"


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
