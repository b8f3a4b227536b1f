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


def model_rows() -> list[dict]:
    """The model's measured rows: the bf16 candidates, then the float8 rows of the module's rule (the MLP's
    projections: the `f8only=mlp` rows of 2026-12-06; that run's other float8 rows converted every eligible layer,
    a rule since dropped)."""
    model = load_model()
    float8 = [r for r in model.load_rows(model.FLOAT8_ROWS) if r["float8"] != "off" and "f8only=mlp" in r["config"]]
    return model.load_rows(model.DEFAULT_ROWS) + float8


def model_row(rows: list[dict], job: TrainConfig, gpus_per_node: int) -> dict | None:
    """The measured row of the model with this job's layout and precision, or None when the model has none."""
    want = {
        "float8": job.float8,
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
    row = model_row(model_rows(), job, gpus_per_node)
    return None if row is None else float(row["collectives"]["inter_node_bytes_per_nic"])
