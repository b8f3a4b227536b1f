"""Goodput under injected failures on the local target, and the checkpoint interval the Young/Daly rule chooses.

    PYTHONPATH=$PWD .venv/bin/python bench/goodput.py                       # 500 steps, intervals 5,25,150, MTBF 7 s
    PYTHONPATH=$PWD .venv/bin/python bench/goodput.py --steps 200 --intervals 10,50 --mtbf-s 15

What it measures is what Clockwork's fault-tolerance benchmark reports: wall time to a fixed number of steps with
failures injected at random (https://clockwork.io/blog/keeping-distributed-training-running-through-failures: 3,000
steps of TorchTitan on 64 H200s, a failure every 2,700-4,500 s, a checkpoint every 100 steps; checkpoint restart took
818 min against torchft's 930 and TorchPass's 405). torchft's own run injected a failure every 15 s and showed the
loss through them, with no checkpoints (https://pytorch.org/blog/fault-tolerant-llama-training-with-2000-synthetic-
failures-every-15-seconds-and-no-checkpoints-on-crusoe-l40s/). Here: one local Ray head, then for each
checkpoint interval one run of the local job (tiny preset, 2 CPU workers, gloo) of `--steps` steps, during which a
Ray Train worker is SIGKILLed (automation drill's machinery) at exponentially distributed times of mean `--mtbf-s`
seconds of training, the same seeded schedule for every interval. Ray Train restarts the worker group from the last
registered checkpoint. The failure clock runs while the workers train: it is armed again at the first step done
after a restart, so a restart is never itself interrupted (the model below assumes the same).

From each run's metrics.jsonl (rank 0's record per step; a redone step appears again):
- step_s: the failure-free step time, the median time between two consecutive records with no checkpoint or
  kill between them;
- checkpoint_s: the median gap across a checkpoint less step_s (the save and Ray Train's report, measured);
- wall_s: from the start of the first step to the record of step N (the job's start-up before it is not counted);
- steps_lost_per_failure: records beyond N (each a step done again) over the failures injected;
- goodput = N x step_s / wall_s.
Beside each, `predicted_goodput` from the measured checkpoint cost, restart time and MTBF: the first-order model
whose optimum is Young's interval sqrt(2 x C x MTBF) (J. W. Young, "A first order approximation to the optimum
checkpoint interval", CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22(3), 2006). The JSON goes to bench/results/<date>-local/goodput.json with machine, date and
command.

The cluster's interval (`cluster_interval`) uses the same rule with inputs stated in `CLUSTER`; automation/storage.py's
CHECKPOINT_EVERY is its output and tests/bench/test_goodput.py holds the two equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# ---- the pure parts ----------------------------------------------------------------------------------------


def young_daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """The optimum compute time between checkpoints to first order, sqrt(2 x C x M) (Young 1974; Daly 2006 eq. 19's
    leading term, accurate while C is much less than M)."""
    if checkpoint_s <= 0 or mtbf_s <= 0:
        raise ValueError(f"checkpoint cost {checkpoint_s} s and MTBF {mtbf_s} s must both be positive")
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def interval_steps(checkpoint_s: float, mtbf_s: float, step_s: float) -> int:
    """Young/Daly's interval in whole steps of `step_s` seconds (at least 1)."""
    return max(1, round(young_daly_interval_s(checkpoint_s, mtbf_s) / step_s))


def failure_gaps(mtbf_s: float, count: int, seed: int) -> list[float]:
    """`count` seconds of training between failures, exponential with mean `mtbf_s` (a Poisson process), seeded."""
    rng = random.Random(seed)
    return [rng.expovariate(1 / mtbf_s) for _ in range(count)]


def goodput(steps: int, step_s: float, wall_s: float) -> float:
    """The share of the wall time that made progress: N steps at the failure-free step time over the wall time."""
    return steps * step_s / wall_s


def predicted_goodput(interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float) -> float:
    """First-order goodput with a checkpoint every `interval_s` s of compute costing `checkpoint_s`, failures at rate
    1/`mtbf_s` while training (each losing half an interval and its checkpoint on average) and `restart_s` per
    failure: (1 - (tau + C) / 2M) / ((1 + C / tau)(1 + R / M)). Its maximum over tau is near sqrt(2CM)."""
    tau, c, m = interval_s, checkpoint_s, mtbf_s
    return max(0.0, 1 - (tau + c) / (2 * m)) / ((1 + c / tau) * (1 + restart_s / m))


@dataclasses.dataclass(frozen=True)
class RunTimes:
    """What one run's metrics records say (see the module docstring)."""

    step_s: float
    checkpoint_s: float | None
    wall_s: float
    redone_steps: int


def run_times(records: list[dict], steps: int, every: int, kills: Sequence[float] = ()) -> RunTimes:
    """`RunTimes` from a run's metrics records in file order and the Unix times of its `kills`; ValueError when it
    did not reach `steps`."""
    if not records or records[-1]["step"] != steps:
        raise ValueError(f"the run did not end at step {steps}")
    plain: list[float] = []
    across: list[float] = []
    for a, b in zip(records, records[1:], strict=False):
        if b["step"] != a["step"] + 1 or any(a["time"] < k <= b["time"] for k in kills):
            continue  # a kill and a restart lie between them
        gap = b["time"] - a["time"]
        (across if a["step"] % every == 0 else plain).append(gap)
    step_s = statistics.median(plain)
    wall = records[-1]["time"] - (records[0]["time"] - records[0]["step_time_s"])
    ckpt = max(0.0, statistics.median(across) - step_s) if across else None
    return RunTimes(step_s, ckpt, wall, len(records) - steps)


# ---- the cluster's interval ---------------------------------------------------------------------------------
# Inputs, each with its source; automation/storage.py's CHECKPOINT_EVERY is `cluster_interval()["steps"]`.
CLUSTER = {
    # Llama 3 (arXiv 2407.21783, section 3.3.4): 419 unexpected interruptions in 54 days of pre-training on
    # 16,384 H100s, 78% of them hardware; per GPU one in 54 x 24 x 16,384 / 419 h, so for the job's 8 GPUs:
    "interruptions": 419,
    "days": 54,
    "gpus_observed": 16_384,
    "gpus": 8,
    # The checkpoint: Qwen2.5-1.5B's 1.54e9 parameters as FSDP2 keeps them, fp32 sharded parameters and AdamW's two
    # fp32 moments (12 bytes each); HSDP's two replicas hold the same shards and DCP saves one copy
    # (torch/distributed/checkpoint/_dedup_save_plans.py), so each node writes half.
    "params": 1.54e9,
    "bytes_per_param": 12,
    "nodes": 2,
    # Each rank's DCP save goes to a temporary directory on the node's gp3 root volume first (workloads/loop.py,
    # Checkpointer.save; DCP's FileSystemWriter fsyncs), at gp3's baseline 125 MiB/s (infra sets no throughput;
    # https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html), then Ray Train uploads it to S3 at
    # most at the NIC's 40 Gbps. Not measured: no AWS here; the first cluster run's `checkpoint_s` replaces it.
    "disk_bytes_per_s": 125 * 2**20,
    "nic_bytes_per_s": 40e9 / 8,
    # The slower end of bench/throughput_model.py's prediction of the cluster default over EFA (26,051-34,161
    # tokens/s, BENCHMARKS.md) for 64 x 2048 tokens a step.
    "step_s": 64 * 2048 / 26_051,
}


def cluster_interval(inputs: dict = CLUSTER) -> dict:
    """The cluster's MTBF, checkpoint cost and Young/Daly interval (seconds and steps) from `inputs`."""
    i = inputs
    mtbf_s = i["days"] * 86_400 * i["gpus_observed"] / i["interruptions"] / i["gpus"]
    node_bytes = i["params"] * i["bytes_per_param"] / i["nodes"]
    checkpoint_s = node_bytes / i["disk_bytes_per_s"] + node_bytes / i["nic_bytes_per_s"]
    return {
        "mtbf_s": mtbf_s,
        "checkpoint_s": checkpoint_s,
        "interval_s": young_daly_interval_s(checkpoint_s, mtbf_s),
        "steps": interval_steps(checkpoint_s, mtbf_s, i["step_s"]),
    }


# ---- the measurement ----------------------------------------------------------------------------------------
POLL_S = 0.05


def inject(job, lines: list[str], running: threading.Thread, gaps: list[float]) -> list[dict]:
    """Kill a worker of `job` after each gap of training time while it runs; the kills (time, pid, step)."""
    from automation.commands.drill import kill_worker, last_step, worker_pids
    from workloads.metrics import METRICS_FILE

    metrics = Path(job.run_dir) / METRICS_FILE
    kills: list[dict] = []
    killed: set[int] = set()
    queue = list(gaps)
    armed_at, seen = None, 0
    while running.is_alive() and queue:
        done = last_step(metrics)
        if armed_at is None:  # arm at the first step done since the start or the last restart
            if done and done != seen:
                armed_at = time.monotonic()
        elif time.monotonic() - armed_at >= queue[0] and done < job.steps:
            pids = worker_pids(list(lines), job.run_id)
            rank = max(pids, default=None)
            if rank is not None and pids[rank] not in killed:
                at = time.time()
                kill_worker(pids[rank])
                killed.add(pids[rank])
                kills.append({"time": at, "pid": pids[rank], "step": done})
                queue.pop(0)
                armed_at, seen = None, done
        time.sleep(POLL_S)
    return kills


def measure(target, job, mtbf_s: float, seed: int) -> dict:
    """One run of `job` with failures injected; its row of the table."""
    from automation.commands.drill import recovery
    from workloads.metrics import METRICS_FILE, read_metrics

    lines: list[str] = []
    target.on_line = lines.append
    outcome: list = []
    running = threading.Thread(target=lambda: outcome.append(target.run_job_to_end(job)), daemon=True)
    running.start()
    kills = inject(job, lines, running, failure_gaps(mtbf_s, 100, seed))
    running.join()
    status = outcome[0].status if outcome else "no outcome"
    records = read_metrics(Path(job.run_dir) / METRICS_FILE)
    t = run_times(records, job.steps, job.checkpoint_every, [k["time"] for k in kills])
    restarts = [recovery(records, k["time"]).recovery_seconds for k in kills]
    restart_s = statistics.mean(restarts) if restarts else None
    return {
        "checkpoint_every": job.checkpoint_every,
        "status": status,
        "run_id": job.run_id,
        "failures": len(kills),
        "wall_s": round(t.wall_s, 2),
        "step_s": round(t.step_s, 4),
        "checkpoint_s": t.checkpoint_s and round(t.checkpoint_s, 3),
        "restart_s": restart_s and round(restart_s, 2),
        "steps_lost": t.redone_steps,
        "steps_lost_per_failure": round(t.redone_steps / len(kills), 1) if kills else None,
        "goodput": round(goodput(job.steps, t.step_s, t.wall_s), 3),
    }


def predictions(rows: list[dict], mtbf_s: float) -> dict:
    """The model's goodput for each row from the medians of the measured costs, and Young/Daly's local interval."""
    c = statistics.median(r["checkpoint_s"] for r in rows if r["checkpoint_s"] is not None)
    r_s = statistics.median(r["restart_s"] for r in rows if r["restart_s"] is not None)
    s = statistics.median(r["step_s"] for r in rows)
    for row in rows:
        row["predicted_goodput"] = round(predicted_goodput(row["checkpoint_every"] * s, c, mtbf_s, r_s), 3)
    return {
        "checkpoint_s": c,
        "restart_s": r_s,
        "step_s": s,
        "interval_s": young_daly_interval_s(c, mtbf_s),
        "interval_steps": interval_steps(c, mtbf_s, s),
    }


def machine() -> dict:
    import psutil

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500, help="N: steps of each run")
    p.add_argument("--intervals", default="5,25,150", help="checkpoint intervals in steps, comma-separated")
    p.add_argument("--mtbf-s", type=float, default=7.0, help="mean seconds of training between injected failures")
    p.add_argument("--seed", type=int, default=46, help="seed of the failure schedule (the same for every interval)")
    p.add_argument("--out", type=Path, help="result file (default: bench/results/<today>-local/goodput.json)")
    a = p.parse_args(argv)
    intervals = [int(x) for x in a.intervals.split(",")]
    from automation.commands.drill import DRILL_HEALTH_CHECK_S, HEALTH_CHECK_ENV
    from automation.job import local_job
    from automation.targets.local import LocalPlan, LocalTarget, durable
    from workloads.config import new_run_id, runs_root

    os.environ[HEALTH_CHECK_ENV] = DRILL_HEALTH_CHECK_S  # as the drill: register checkpoints within 0.2 s
    base = new_run_id()
    jobs = [
        dataclasses.replace(
            durable(local_job(f"{base}-goodput-{k}", runs_root().absolute(), steps=a.steps)),
            checkpoint_every=k,
            max_failures=1000,
        )
        for k in intervals
    ]
    target = LocalTarget(LocalPlan(jobs[0]), on_progress=print, on_note=print)
    rows = []
    started = time.monotonic()
    try:
        target.start()
        for job in jobs:
            rows.append(measure(target, job, a.mtbf_s, a.seed))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        target.close()
    local = predictions(rows, a.mtbf_s)
    today = datetime.date.today().isoformat()
    out = a.out or Path(__file__).parent / "results" / f"{today}-local" / "goodput.json"
    doc = {
        "date": today,
        "machine": machine(),
        "command": "PYTHONPATH=$PWD .venv/bin/python bench/goodput.py " + " ".join(argv or sys.argv[1:]),
        "steps": a.steps,
        "mtbf_s": a.mtbf_s,
        "seed": a.seed,
        "bench_s": round(time.monotonic() - started, 1),
        "rows": rows,
        "local_young_daly": local,
        "cluster": {"inputs": CLUSTER, **cluster_interval()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["status"] == "SUCCEEDED" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
