"""Run under torchrun with an output directory: builds the tiny model, shards it with apply_fsdp and
writes, per rank, the number of parameter elements it holds locally and the full count to
<dir>/rank<R>.json (a file each: two ranks printing at once can interleave their lines)."""

import json
import sys
from pathlib import Path

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from workloads.config import TrainConfig
from workloads.model import apply_fsdp, build_model, count_params

dist.init_process_group("gloo")
cfg = TrainConfig(preset="tiny")
model = build_model(cfg, __import__("torch").device("cpu"))
full = count_params(model)
apply_fsdp(model, cfg, init_device_mesh("cpu", (dist.get_world_size(),)))
local = sum(p.to_local().numel() for p in model.parameters())
dtypes = sorted({str(p.dtype) for p in model.parameters()})
row = {"rank": dist.get_rank(), "local": local, "full": full, "dtypes": dtypes}
(Path(sys.argv[1]) / f"rank{dist.get_rank()}.json").write_text(json.dumps(row))
dist.destroy_process_group()
