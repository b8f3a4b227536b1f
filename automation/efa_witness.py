"""The second witness of a run's transport: every GPU node's EFA port counters, read before the job starts (`snapshot`,
in the `counters` step) and after it ends (`weigh`, in `check`), weighed against the bytes
workloads/throughput_model.py predicts.

The target reads the counters (`Target.efa_counters`: on AWS `cat` of the sysfs files in each GPU node's
efa-counter-reader pod, which sees the host's sysfs read-only; a Ray worker pod sees no port counters:
docs/efa-witnesses.md, "Where the counters are read"); this module keeps the two readings, their differences
and the verdict together, in the shape stored with the run as `runs/<id>/efa_counters.json`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automation.errors import DriverError
from workloads.nccl_check.counters import UNREAD, NodeReading, deltas
from workloads.nccl_check.verdict import ChannelClaim
from workloads.nccl_check.witnesses import Witnesses, judge, not_applicable
from workloads.summary import RunSummary
from workloads.throughput_model import nic_bytes_per_step

if TYPE_CHECKING:
    from automation.targets import Target
    from workloads.config import TrainConfig

COUNTERS_FILE = "efa_counters.json"
NO_EFA_HERE = "no EFA device where this target runs (local: loopback and gloo or one node's GPUs)"


@dataclass(frozen=True)
class Snapshot:
    """One read of every GPU node's counters (`nodes`), or None where the target has no EFA."""

    taken_at: float
    nodes: dict[str, NodeReading] | None

    def problems(self) -> list[str]:
        """Why this reading cannot be a witness's first half, one line per node ([] when every node was read)."""
        if not self.nodes:
            return [] if self.nodes is None else ["no GPU node to read"]
        return [f"{node}: {r.short}" for node, r in sorted(self.nodes.items()) if r.short]

    @property
    def summary(self) -> str:
        if self.nodes is None:
            return NO_EFA_HERE
        devices = sum(len(n.devices) for n in self.nodes.values())
        bad = [f"{node}: {r.error}" for node, r in sorted(self.nodes.items()) if r.error]
        unread = f"; unread: {'; '.join(bad)}" if bad else ""
        return f"{devices} EFA device(s) on {len(self.nodes)} GPU node(s){unread}"

    def to_dict(self) -> dict[str, object]:
        nodes = None if self.nodes is None else {k: v.to_dict() for k, v in self.nodes.items()}
        return {"taken_at": self.taken_at, "nodes": nodes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        nodes = d.get("nodes")
        return cls(
            float(d["taken_at"]), None if nodes is None else {k: NodeReading.from_dict(v) for k, v in nodes.items()}
        )


def snapshot(target: Target, clock: Callable[[], float] = time.time) -> Snapshot:
    """Every GPU node's counters now, as the target reads them (None: no EFA there)."""
    return Snapshot(clock(), target.efa_counters())


def steps_run(summary: RunSummary | None, job: TrainConfig | None) -> int | None:
    """Optimizer steps this job ran between the two reads: the summary's steps less the step a resumed
    run started from (workloads/loop.py's `resumed_from_step`); the job's steps without a summary."""
    summary = summary or RunSummary()
    total = summary.steps or (job.steps if job is not None else None)
    return None if total is None else total - (summary.resumed_from_step or 0)


def predicted_per_nic(job: TrainConfig, steps: int, nodes: dict[str, NodeReading]) -> float | None:
    """The model's bytes per NIC for `steps` optimizer steps of `job`: its per-node bytes per step, spread
    over the node's EFA devices (NCCL stripes its channels over them); None without a measured row."""
    readable = [r for r in nodes.values() if r.devices]
    if not readable or not steps:
        return None
    gpus_per_node = max(1, round(job.num_workers * job.gpus_per_worker / len(nodes)))
    per_step = nic_bytes_per_step(job, gpus_per_node)
    if per_step is None:
        return None
    return per_step * steps / max(len(r.devices) for r in readable)


@dataclass(frozen=True)
class CounterRecord:
    """What is stored with the run: both readings, what each device did, and the combined verdict."""

    before: Snapshot | None
    after: Snapshot
    witnesses: Witnesses
    steps: int | None = None

    def to_dict(self) -> dict[str, object]:
        found = deltas(self.before.nodes or {}, self.after.nodes or {}) if self.before and self.after.nodes else []
        return {
            "steps": self.steps,
            "before": self.before.to_dict() if self.before else None,
            "after": self.after.to_dict(),
            "deltas": [d.to_dict() for d in found],
            "witnesses": self.witnesses.to_dict(),
        }


def weigh(
    target: Target,
    before: Snapshot | None,
    job: TrainConfig | None,
    steps: int | None,
    log: tuple[str, str, str],
    claims: Sequence[ChannelClaim] = (),
    names: Mapping[str, str] | None = None,
) -> CounterRecord:
    """Read the counters after the job and judge both witnesses; `log` is (require, verdict, cause) of
    the NCCL check and `claims` its inter-node channel claims, which the judge cross-checks with the
    counters (``names``: log host -> node). No EFA here: the counter witness does not apply."""
    require, verdict, cause = log
    try:
        after = snapshot(target)
    except DriverError as e:  # the cluster did not answer the read: unknown, which is no pass
        failed = Witnesses(UNREAD, False, f"counter witness unreadable: the read after the job failed: {e}")
        return CounterRecord(before, Snapshot(time.time(), {}), failed, steps)
    if after.nodes is None:
        return CounterRecord(before, after, not_applicable(NO_EFA_HERE, verdict), steps)
    if before is None or before.nodes is None:
        return CounterRecord(before, after, judge(require, verdict, cause, None, None), steps)
    predicted = predicted_per_nic(job, steps or 0, after.nodes) if job is not None else None
    found = deltas(before.nodes, after.nodes)
    return CounterRecord(before, after, judge(require, verdict, cause, found, predicted, claims, names), steps)


def write(run_dir: Path, record: dict[str, object]) -> Path:
    """`record` (a CounterRecord's dict) as the run's COUNTERS_FILE."""
    path = run_dir / COUNTERS_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def last_witness(runs_root: Path, stack: str) -> dict[str, object] | str:
    """The counter witness of the newest run of `stack` under `runs_root` (by its COUNTERS_FILE's time):
    the run, its outcome, the line why and each NIC's ratio of counted to predicted bytes; or why none."""
    found = []
    for path in runs_root.glob(f"*/{COUNTERS_FILE}") if runs_root.is_dir() else []:
        try:
            driver = json.loads((path.parent / "driver.json").read_text())
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a damaged or half-copied run says nothing about the witness
        if driver.get("stack") == stack:
            found.append((path.stat().st_mtime, path.parent.name, record.get("witnesses") or {}))
    if not found:
        return f"no run of stack {stack} with {COUNTERS_FILE} under {runs_root}"
    _, run, w = max(found)
    ratios = {f"{n['node']}/{n['device']}": n.get("ratio") for n in w.get("nics") or []}
    return {"run": run, "outcome": w.get("outcome"), "message": w.get("message"), "ratio_per_nic": ratios}
