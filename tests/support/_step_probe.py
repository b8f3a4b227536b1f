"""Run under torchrun as `_step_probe.py OUT_DIR JSON`: trains the tiny preset for a few steps with
`workloads.loop.train_step` on fixed data (the same global batch whatever the mesh or the split into
micro-batches) and writes, on rank 0, OUT_DIR/result.json with each step's loss and the full final
parameters' values (a flat list), so that two runs can be compared number for number.

JSON keys: mesh ("fsdp"/"hsdp"), shard_size, micro (sequences per micro-batch), global_batch
(sequences per step over all ranks), steps, optimizer ("adamw": the module's; "sgd": plain SGD,
whose update is proportional to the gradient), lr."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from workloads.config import TrainConfig
from workloads.loop import build_training, train_step
from workloads.train import exit_without_finalizing

SEQ = 16

out, args = Path(sys.argv[1]), json.loads(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
cfg = TrainConfig(
    preset="tiny", mesh=args["mesh"], shard_size=args.get("shard_size", 0), param_dtype="float32", lr=args["lr"]
)
device = torch.device("cpu")
tr = build_training(cfg, device, world, world)
if args["optimizer"] == "sgd":
    tr.optimizer = torch.optim.SGD(tr.model.parameters(), lr=args["lr"])
g = torch.Generator().manual_seed(1234)
per_rank = args["global_batch"] // world
losses = []
for _ in range(args["steps"]):
    ids = torch.randint(0, tr.vocab, (args["global_batch"], SEQ), generator=g)  # the same on every rank
    mine = ids[rank * per_rank : (rank + 1) * per_rank]
    micro = list(mine.split(args["micro"]))
    loss = train_step(tr.model, tr.optimizer, iter((m, m) for m in micro), len(micro), 1e9, device, tr.vocab)
    dist.all_reduce(loss)
    losses.append(loss.item() / world)
flat = torch.cat([p.full_tensor().detach().reshape(-1) for p in tr.model.parameters()])
if rank == 0:
    (out / "result.json").write_text(json.dumps({"losses": losses, "params": flat.tolist()}))
dist.destroy_process_group()
exit_without_finalizing(0)  # gloo's threads outlive the group: see its docstring
