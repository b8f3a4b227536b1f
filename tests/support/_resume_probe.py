"""Run under torchrun (2 ranks, gloo) with an output directory: both ranks save a checkpoint at
step 4 to shared storage; then rank 1 alone is given a view of the storage that also holds a newer,
incomplete checkpoint_000006 (its state.json written, DCP's .metadata missing: a save still
landing, or a stale cache on another node). Each rank restores into a fresh model from its own view
and writes <dir>/rank<R>.json with the step it resumed from and whether its weights are the saved ones."""

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from workloads.config import TrainConfig
from workloads.loop import STATE_FILE, Checkpointer, WorkerEnv, build_training

dist.init_process_group("gloo")
out = Path(sys.argv[1])
env = WorkerEnv.detect()
cfg = TrainConfig(
    preset="tiny", num_workers=2, seq_len=16, global_batch_size=2, run_id="probe", run_dir=str(out / "run")
)
cfg = dataclasses.replace(cfg.resolved(), storage_path=str(out / "shared"))

tr = build_training(cfg, torch.device("cpu"), env.world)
with torch.no_grad():  # weights no fresh model has
    for p in tr.model.parameters():
        p.add_(1.0)
saved = sum(float(p.to_local().sum()) for p in tr.model.parameters())
Checkpointer(cfg, env).save({"step": 4, "losses": [1.0] * 4}, tr.model, tr.optimizer)

view = out / f"rank{env.rank}-view"
if env.rank == 1:
    shutil.copytree(out / "shared", view)
    newer = view / cfg.name / "checkpoint_000006"
    shutil.copytree(view / cfg.name / "checkpoint_000004", newer)
    (newer / ".metadata").unlink()
    (newer / STATE_FILE).write_text(json.dumps({"step": 6, "losses": [1.0] * 6}))
dist.barrier()

mine = dataclasses.replace(cfg, storage_path=str(out / "shared" if env.rank == 0 else view))
fresh = build_training(mine, torch.device("cpu"), env.world)
state = Checkpointer(mine, env).restore(fresh.model, fresh.optimizer)
loaded = sum(float(p.to_local().sum()) for p in fresh.model.parameters())
row = {"rank": env.rank, "step": state["step"], "weights_restored": abs(loaded - saved) < 1e-3 * abs(saved)}
(out / f"rank{env.rank}.json").write_text(json.dumps(row))
dist.destroy_process_group()
