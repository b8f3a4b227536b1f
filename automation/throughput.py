"""bench/throughput_model.py as the driver uses it: the model's measured row for a job's layout, and
the bytes that row predicts each node's NIC sends across nodes."""

from __future__ import annotations

from dataclasses import fields
from types import ModuleType
from typing import Any

from bench import throughput_model
from workloads.config import TrainConfig


def load_model() -> ModuleType:
    """bench/throughput_model.py (the `bench` package is installed with the project)."""
    return throughput_model


def model_row(rows: list[dict], job: TrainConfig, gpus_per_node: int) -> dict | None:
    """The measured row of the model with this job's layout, or None when the model has none."""
    want = {
        "mesh": job.mesh,
        "world": job.num_workers,
        "gpus_per_node": gpus_per_node,
        "micro_batch": job.micro_batch,
        "accum": job.grad_accum,
        "seq_len": job.seq_len,
        "reduce_dtype": job.reduce_dtype,
        "activation_checkpointing": job.activation_checkpointing,
        "ac_policy": job.ac_policy,
        "reshard_after_forward": job.reshard_after_forward,
        "loss_chunk_size": job.loss_chunk_size,
    }
    defaults = {f.name: f.default for f in fields(job)}
    return next((r for r in rows if all(_row_field(r, k, defaults.get(k)) == v for k, v in want.items())), None)


def _row_field(row: dict, key: str, default: Any) -> Any:
    """A row's field; a TrainConfig field the row does not record is read from its config string
    (`key=value+...`, bench/fake_rank_step.py), else it was TrainConfig's default."""
    if key in row:
        return row[key]
    given = dict(p.partition("=")[::2] for p in row.get("config", "").split("+"))
    if key not in given:
        return default
    return given[key] in ("1", "true", "True") if isinstance(default, bool) else type(default)(given[key])


def nic_bytes_per_step(job: TrainConfig, gpus_per_node: int) -> float | None:
    """Bytes each node's NIC sends across nodes per optimizer step for `job` (the model's counted
    `inter_node_bytes_per_nic`), or None when the model has no measured row for its layout."""
    model = load_model()
    row = model_row(model.load_rows(model.DEFAULT_ROWS), job, gpus_per_node)
    return None if row is None else float(row["collectives"]["inter_node_bytes_per_nic"])
