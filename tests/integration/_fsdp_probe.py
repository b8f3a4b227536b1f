"""Run under torchrun: builds the tiny model, shards it with apply_fsdp and prints, per rank, the
number of parameter elements it holds locally and the full count, as one JSON line."""

import json

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
print(json.dumps({"rank": dist.get_rank(), "local": local, "full": full, "dtypes": dtypes}), flush=True)
dist.destroy_process_group()
