"""Per-step training metrics: rank 0 appends one JSON line per optimizer step to `<run_dir>/metrics.jsonl`.

Each line is written and flushed before the next step starts, so a run killed at any point keeps
every step it finished (at most the line being written is cut short, and `read_metrics` drops only
such a last line). A resumed run appends: a step redone after a restart appears twice, and
`latest_per_step` keeps its last record. Rank 0 also prints each record on stdout after
`ECHO_PREFIX`, which is how the driver's progress bar follows a job it can only see through its log,
and, when `tensorboard` is installed (the `observe` extra), writes TensorBoard event files under
`<run_dir>/tensorboard/`, so `tensorboard --logdir <run_dir>` shows the same curves.

Schema version 1 (docs/observing.md lists it too; `FIELDS` is the one place it is defined):
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
METRICS_FILE = "metrics.jsonl"
RUN_INFO_FILE = "run_info.json"
TENSORBOARD_DIR = "tensorboard"
# Written into every run directory as soon as it exists: `automation clean` deletes only folders
# holding it, so a folder a user keeps under runs/ is never taken for a run.
RUN_MARKER_FILE = ".ray-efa-eks-run"
ECHO_PREFIX = "[metrics] "

FIELDS: dict[str, str] = {
    "schema": "schema version of this line (1)",
    "run_id": "the run's id",
    "time": "Unix time (s) when the step ended",
    "step": "optimizer steps done, 1-based",
    "total_steps": "optimizer steps the run will make",
    "loss": "mean training loss of the step over all ranks (null when not finite)",
    "lr": "learning rate the step used",
    "tokens_per_s": "tokens of the global batch / step time",
    "tokens_per_s_per_gpu": "tokens_per_s / world size (null on CPU)",
    "mfu": "tokens_per_s * flops_per_token / (world size * peak bf16 FLOP/s) (null without a known peak)",
    "step_time_s": "wall time of the step on rank 0, forward to optimizer step, loss read back",
    "data_wait_s": "part of step_time_s rank 0 spent waiting for its next micro-batch",
    "peak_mem_gb": "rank 0's peak memory so far: CUDA allocated bytes, or the process's max RSS on CPU (GB)",
    "grad_norm": "total gradient norm before clipping (null when it cannot be read on rank 0 alone)",
    "micro_batch": "sequences per forward pass on each rank (halved after an out-of-memory in the first steps)",
    "grad_accum": "micro-batches per optimizer step on each rank (doubled when the micro-batch is halved)",
}
__doc__ += "\n".join(f"    {k:<22} {v}" for k, v in FIELDS.items()) + "\n"


class MetricsError(ValueError):
    """A metrics file that cannot be read, with the path, the line and what is wrong."""


@dataclass(frozen=True)
class StepMetrics:
    """What rank 0 measured in one step (the writer adds schema, run id and time)."""

    step: int
    total_steps: int
    loss: float | None
    lr: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    step_time_s: float
    data_wait_s: float
    peak_mem_gb: float
    grad_norm: float | None
    micro_batch: int | None = None
    grad_accum: int | None = None


class DataWait:
    """Wraps the micro-batch iterator and adds up the time spent in `next()` until `take()`."""

    def __init__(self, batches: Iterator):
        self._it, self._waited = batches, 0.0

    def __iter__(self) -> DataWait:
        return self

    def __next__(self):
        t0 = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self._waited += time.perf_counter() - t0

    def take(self) -> float:
        waited, self._waited = self._waited, 0.0
        return waited


def grad_norm_value(norm: Any) -> float | None:
    """`clip_grad_norm_`'s result as a float. Under FSDP2 it is a DTensor; a Replicate one holds the
    whole norm on every rank (checked on torch 2.13, gloo, 2 ranks), so rank 0 reads it without a
    collective. Any other placement would need one, so it is reported as unknown instead."""
    if norm is None:
        return None
    placements = getattr(norm, "placements", None)
    if placements is not None:
        if not all(type(p).__name__ == "Replicate" for p in placements):
            return None
        norm = norm.to_local()
    return float(norm)


class MetricsWriter:
    """Appends StepMetrics as JSON lines (flushed each time), echoes them, and mirrors them to TensorBoard."""

    def __init__(self, run_dir: str | Path, run_id: str, echo: bool = True, tensorboard: bool = True):
        self.run_dir = mark_run_dir(run_dir, run_id)
        self.path = self.run_dir / METRICS_FILE
        self.run_id, self.echo = run_id, echo
        self._file = self.path.open("a", encoding="utf-8")
        self._tb = _tensorboard_writer(self.run_dir / TENSORBOARD_DIR) if tensorboard else None

    def write(self, m: StepMetrics) -> dict:
        record = {"schema": SCHEMA_VERSION, "run_id": self.run_id, "time": round(time.time(), 3), **asdict(m)}
        line = json.dumps(record, allow_nan=False, default=_not_json)
        self._file.write(line + "\n")
        self._file.flush()  # into the kernel: survives the process being killed (not the machine)
        if self.echo:
            sys.stdout.write(ECHO_PREFIX + line + "\n")
            sys.stdout.flush()
        if self._tb is not None:
            for key in ("loss", "lr", "tokens_per_s", "mfu", "step_time_s", "data_wait_s", "peak_mem_gb", "grad_norm"):
                if record[key] is not None:
                    self._tb.add_scalar(f"train/{key}", record[key], m.step)
            self._tb.flush()
        return record

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _not_json(v: Any) -> Any:
    raise TypeError(f"metrics value {v!r} of type {type(v).__name__} is not JSON")


def _tensorboard_writer(logdir: Path) -> Any:
    """torch's SummaryWriter when the `tensorboard` package is installed, else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is an optional extra
        return None
    return SummaryWriter(log_dir=str(logdir))


def mark_run_dir(run_dir: str | Path, run_id: str) -> Path:
    """Create ``run_dir`` if needed and mark it as a run's directory (RUN_MARKER_FILE)."""
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    marker = path / RUN_MARKER_FILE
    if not marker.is_file():
        marker.write_text(json.dumps({"run_id": run_id}) + "\n")
    return path


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run's directory: a real directory holding the marker as a regular file."""
    marker = path / RUN_MARKER_FILE
    return path.is_dir() and not path.is_symlink() and marker.is_file() and not marker.is_symlink()


def local_runs(root: Path) -> list[Path]:
    """The run directories under ``root`` (``is_run_dir``), newest first: the one place that says which
    run is newest (``report``, ``clean`` and ``status`` ask it). A run is as new as its start, the time
    its marker was written (``mark_run_dir`` writes it once, so a resume, a copy of a file into the run
    or a report written there does not make an old run new); runs that started in the same second are
    ordered by name."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if is_run_dir(p)]
    return sorted(found, key=lambda p: ((p / RUN_MARKER_FILE).stat().st_mtime, p.name), reverse=True)


def write_run_info(run_dir: str | Path, config: dict, extra: dict | None = None) -> Path:
    """`<run_dir>/run_info.json`: the run's config and the versions it ran with, for the report."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for mod in ("torch", "ray", "transformers"):
        m = sys.modules.get(mod)
        versions[mod] = getattr(m, "__version__", None) if m else None
    info = {"config": config, "versions": versions, "host": platform.node(), "pid": os.getpid(), **(extra or {})}
    path = Path(run_dir) / RUN_INFO_FILE
    path.write_text(json.dumps(info, indent=2, default=str) + "\n")
    return path


def _finite_or_none(v: float | None) -> float | None:
    return v if v is None or v == v and abs(v) != float("inf") else None


class StepRecorder:
    """Rank 0's hook in the training loop: turns one step's raw numbers into a StepMetrics line.

    On every other rank `record` does nothing, so the loop calls it unconditionally.
    """

    def __init__(self, cfg: Any, rank: int, world: int, flops_per_token: float, peak_tflops: float | None, gpu: bool):
        self.cfg, self.world, self.fpt, self.peak, self.gpu = cfg, world, flops_per_token, peak_tflops, gpu
        self.writer = MetricsWriter(cfg.run_dir, cfg.run_id) if rank == 0 else None
        if self.writer is not None:
            write_run_info(cfg.run_dir, cfg.to_dict(), {"world_size": world})

    def record(
        self, step: int, loss: float, lr: float, step_s: float, data_s: float, mem_gb: float, grad_norm: Any
    ) -> None:
        if self.writer is None:
            return
        tps = self.cfg.tokens_per_step / step_s
        mfu = tps * self.fpt / (self.world * self.peak * 1e12) if self.peak else None
        m = StepMetrics(
            step=step,
            total_steps=self.cfg.steps,
            loss=_finite_or_none(loss),
            lr=lr,
            tokens_per_s=tps,
            tokens_per_s_per_gpu=tps / self.world if self.gpu else None,
            mfu=mfu,
            step_time_s=step_s,
            data_wait_s=data_s,
            peak_mem_gb=mem_gb,
            grad_norm=_finite_or_none(grad_norm_value(grad_norm)),
            micro_batch=self.cfg.micro_batch,
            grad_accum=self.cfg.grad_accum,
        )
        self.writer.write(m)

    def close(self) -> None:
        """Close the file and, when the run's storage is remote (s3://...), copy it there too."""
        if self.writer is None:
            return
        self.writer.close()
        if "://" in self.cfg.storage_path:
            copy_to_storage(self.cfg.run_dir, f"{self.cfg.storage_path.rstrip('/')}/{self.cfg.name}")


def copy_to_storage(run_dir: str | Path, uri: str) -> list[str]:
    """Copy the metrics and run-info files to `uri` (e.g. s3://bucket/prefix/<name>) with pyarrow's
    filesystems, which Ray Train uses for the same storage path
    (https://docs.ray.io/en/latest/train/user-guides/persistent-storage.html)."""
    import pyarrow.fs

    fs, root = pyarrow.fs.FileSystem.from_uri(uri)
    fs.create_dir(root, recursive=True)
    copied = []
    for name in (METRICS_FILE, RUN_INFO_FILE):
        src = Path(run_dir) / name
        if src.is_file():
            with fs.open_output_stream(f"{root}/{name}") as out:
                out.write(src.read_bytes())
            copied.append(f"{root}/{name}")
    return copied


# ---- reading --------------------------------------------------------------------------------------
def parse_echo(line: str) -> dict | None:
    """The record in one job-log line that rank 0 echoed, else None (any other line, or a cut one)."""
    at = line.find(ECHO_PREFIX)
    if at < 0:
        return None
    try:
        rec = json.loads(line[at + len(ECHO_PREFIX) :])
    except json.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) and rec.get("schema") == SCHEMA_VERSION else None


def read_metrics(path: str | Path) -> list[dict]:
    """Every record of a metrics file, in file order. A cut last line (the run was killed while
    writing it) is dropped; a bad line anywhere else, or a line of another schema, is a MetricsError."""
    p = Path(path)
    lines = p.read_text(encoding="utf-8").split("\n")
    out = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            if n == len(lines):
                break  # the line being written when the run was killed
            raise MetricsError(
                f"{p}:{n}: not a JSON line ({e.msg}): the file is damaged, re-run or delete it"
            ) from None
        if not isinstance(rec, dict) or rec.get("schema") != SCHEMA_VERSION:
            got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
            raise MetricsError(f"{p}:{n}: schema {got!r}, expected {SCHEMA_VERSION}: written by another version")
        out.append(rec)
    return out


def latest_per_step(records: list[dict]) -> list[dict]:
    """One record per step, the last one written (a resumed run redoes the steps after its checkpoint)."""
    by_step = {r["step"]: r for r in records}
    return [by_step[s] for s in sorted(by_step)]
