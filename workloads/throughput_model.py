"""Predict step time, tokens/s and MFU of candidate configs on 2 x g6.12xlarge (8 x L4), from measured
compute and counted bytes. A prediction, not a measurement: nobody has run this project on L4s.

bench/throughput_model.py prints its table (`python bench/throughput_model.py`); the driver reads a job's
row and bytes from here (`model_row`, `nic_bytes_per_step`). Standard library only, like the contract modules.

Inputs, each measured or cited:
- per config, from `bench/fake_rank_step.py` on one H200 or H100 as rank 0 of a fake world of 8 (2
  nodes x 4): the compute-only step time `t_h200` (collectives return at once), the bytes each node's NIC
  sends across nodes per optimizer step `B_nic` and each GPU sends inside its node `B_pcie`
  (NCCL ring model, `bench/collectives.py`), and peak allocated/reserved memory per rank;
- the bf16 matmul rate of the card the row was measured on, `R_card`: H200 790 TFLOP/s, H100 798
  (.library device KINDS.md: an 8192^3 bf16 product at 788 and 798 TFLOP/s);
- L4 dense bf16 peak 121 TFLOP/s (NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/,
  242 TFLOP/s with sparsity) and an achievable L4 bf16 matmul rate of 54-71 TFLOP/s (the card is
  capped at 72 W; the range is the published matmul sweep quoted in issue 21);
- float8 (`--float8` rows): the L4's dense FP8 peak is 242.5 TFLOP/s (the same datasheet: 485 with
  sparsity), twice its bf16; the H100's and H200's are 1,979 against 989 dense bf16 (NVIDIA H100 and H200
  datasheets: 3,958 / 1,979 with sparsity), also twice;
- link rates: the g6.12xlarge NIC carries 40 Gbps = 5 GB/s in each direction at once
  (https://aws.amazon.com/ec2/instance-types/g6/ and
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html: "apply to
  both inbound and outbound traffic"); EFA is taken at that rate. TCP sockets are a bracket:
  at best the same 40 Gbps (multi-flow traffic inside a Region "can utilize the full network
  bandwidth"), at worst 10 Gbps (the single-flow limit inside a cluster placement group, same page).
  L4-to-L4 inside a node: PCIe Gen4 x16, 32 GB/s each way (64 GB/s both ways, L4 datasheet).

Formula, per config (k micro-batches per optimizer step, all times per optimizer step):

    t_compute = t_h200 * R_card / R_L4                ASSUMPTION: the whole step scales with the matmul rate
              x (FP8/bf16 of the card) / (FP8/bf16 of the L4)   for a float8 row: its float8 GEMMs scale with
                                                    the FP8 rates; both ratios are 2.0, so the factor is 1.0
    t_nic     = B_nic / bw_nic                      bw_nic: EFA 5 GB/s; TCP 1.25-5 GB/s
    t_pcie    = B_pcie / 32 GB/s
    no overlap: t = t_compute + t_nic + t_pcie
    overlap:    t = max(t_compute + f * t_comm, t_comm + f * t_compute),  t_comm = max(t_nic, t_pcie),
                f = 2 / (L + 1)
                (FSDP2 overlaps each block's collectives with another block's compute, and the NIC
                and PCIe hops of a ring run at once; of the L + 1 FSDP groups, the first gather and
                the last reduction have no compute to hide behind, nor the first and last blocks'
                compute any communication)
    tokens/s  = 8 * tokens per rank per step / t
    MFU       = tokens/s * (6 N + 12 L d T) / (8 * R), R = 121 (peak) or R_L4 (achievable)

Link rates are never fitted to the AWS sample's published steps/s; `predict_aws_sample` checks the
model against them instead. `--bandwidth FILE` replaces the assumed EFA rate with a measured one: the
bus bandwidth of the largest all-reduce in a `bench --collectives` sweep over NCCL across two nodes
or more (workloads/collectives_bench.py), the rate the slowest link of the ring, the NIC, sustained.
No such file exists yet; a sweep on one node or on gloo is refused, since it did not cross a NIC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from workloads.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "2026-12-04-h200"
RESULTS_H100 = REPO / "bench" / "results" / "2026-12-05-h100"
# The candidates of 2026-12-05, all measured on one H100 in two calls, each with full checkpointing's
# row again, so no candidate is compared with a row of another card.
DEFAULT_ROWS = [RESULTS_H100 / "sac-sweep1.jsonl", RESULTS_H100 / "sac-sweep2.jsonl"]
# The cluster default with and without --float8 (tensorwise), one H100, one call (2026-12-06).
FLOAT8_ROWS = [REPO / "bench" / "results" / "2026-12-06-h100" / "run2-fake8.jsonl"]
EXPANDABLE_ROWS = RESULTS / "run2-expandable.jsonl"
SAMPLE_ROWS = [RESULTS / "run1.jsonl"]  # the fsdp bf16-reduce row whose bytes the AWS sample check uses

H200_MATMUL_TFLOPS = 790.0  # measured on this card type (device KINDS.md)
MATMUL_TFLOPS = {"H200": 790.0, "H100": 798.0}  # bf16 8192^3 product measured on each card (device KINDS.md)
L4_PEAK_TFLOPS = 121.0  # NVIDIA L4 datasheet, dense bf16
L4_ACHIEVABLE_TFLOPS = (54.0, 71.0)  # published matmul sweep, as quoted in issue 21
# What the float8 prediction for the L4 assumes, and what would falsify it (`bench --stack`'s precision leg).
L4_POWER_ASSUMPTION = (
    "the L4 is a 72 W card: the model assumes that under its power cap it reaches the same fraction of its FP8 "
    "peak (242.5 TFLOP/s) as of its bf16 peak (121), so float8's gain over bf16 on the L4 is the H100's"
)
L4_POWER_FALSIFIED_BY = (
    "a measured float8/bf16 tokens/s ratio on the cluster below the predicted range: the card then clocks lower "
    "under float8 load than under bf16 (nvidia-smi -q -d PERFORMANCE would show 'SW Power Cap: Active')"
)
# Dense FP8 over dense bf16 peak per card (datasheets above): float8 GEMMs gain the same factor on each.
FP8_OVER_BF16 = {"L4": 242.5 / 121.0, "H100": 1979.0 / 989.0, "H200": 1979.0 / 989.0}
L4_MEMORY_GIB = 22888 / 1024  # EC2 DescribeInstanceTypes: 22888 MiB per L4 on g6.12xlarge

# The L4 budget (bench/results/2026-12-05-h100/README.md, "An honest L4 memory budget"): a config fits
# when its measured reserved peak + CONTEXT_GIB + NCCL_GIB + MARGIN_GIB <= L4_MEMORY_GIB.
CONTEXT_GIB = 0.82  # outside the allocator in the training process, measured (fake_rank_step, H100, 2026-12-05)
# NCCL's receive buffers per connection (NVIDIA/nccl src/include/device.h, comm.h): Simple 4 MiB
# (NCCL_BUFFSIZE), LL128 120 x 640 x 8 steps x 8 B = 4.69 MiB, LL 8 x 512 x 8 x 16 B = 0.5 MiB, so
# 9.19 MiB; x 4 connections (ring and tree peers) x 4 channels x 3 communicators (world, shard,
# replicate) = 441 MiB. An estimate from cited constants with an assumed channel count, unmeasured.
NCCL_GIB = 3 * 4 * 4 * (4 + 4.6875 + 0.5) / 1024
MARGIN_GIB = 0.5  # allocator growth over a long run, other libraries' workspaces: a judgement, not a measurement


def reserved_limit_gib() -> float:
    """The most reserved memory a rank may measure and still fit an L4 under the budget above."""
    return L4_MEMORY_GIB - CONTEXT_GIB - NCCL_GIB - MARGIN_GIB


GB = 1e9
NIC_GBPS = {"efa": 40.0, "tcp_best": 40.0, "tcp_worst": 10.0}
PCIE_BYTES_PER_S = 32e9

# The AWS sample (2 x g6.12xlarge, FSDP1 through Ray Train, bf16 model, 1 x 128 tokens per rank, 20 steps)
AWS_SAMPLE_STEPS_PER_S = {"efa": 0.5173, "tcp": 0.2513}


@dataclass(frozen=True)
class Link:
    nic_bytes: float  # per NIC, each direction, per optimizer step
    pcie_bytes: float  # per GPU, each direction, per optimizer step
    groups: int  # FSDP groups (decoder blocks + root)


def step_time(t_compute: float, link: Link, nic_gbps: float, overlap: bool) -> float:
    """Predicted seconds per optimizer step (see the module docstring)."""
    t_nic = link.nic_bytes / (nic_gbps * GB / 8)
    t_pcie = link.pcie_bytes / PCIE_BYTES_PER_S
    if not overlap:
        return t_compute + t_nic + t_pcie
    t_comm, f = max(t_nic, t_pcie), 2 / link.groups
    return max(t_compute + f * t_comm, t_comm + f * t_compute)


def flops_per_token(row: dict) -> float:
    return 6.0 * row["n_params"] + 12.0 * row["n_layers"] * row["hidden"] * row["seq_len"]


def matmul_tflops(row: dict) -> float:
    """The measured bf16 matmul rate of the card a row was measured on (H200 when the row does not say)."""
    words = row.get("device", "H200").split()
    return next((r for card, r in MATMUL_TFLOPS.items() if card in words), H200_MATMUL_TFLOPS)


def measured_nic_gbps(doc: dict, source: str = "the sweep") -> float:
    """The EFA rate a `bench --collectives` document measured (module docstring), in Gbps; SystemExit
    naming why for a sweep that crossed no NIC."""
    if doc.get("backend") != "nccl" or int(doc.get("nodes") or 0) < 2:
        raise SystemExit(
            f"{source}: backend {doc.get('backend')!r} on {doc.get('nodes')} node(s) crossed no NIC: "
            "pass a sweep run with NCCL across two nodes"
        )
    reduces = [r for r in doc.get("rows") or [] if r.get("op") == "all_reduce"]
    if not reduces:
        raise SystemExit(f"{source}: no all_reduce row")
    return max(reduces, key=lambda r: r["bytes"])["busbw_gbs"] * 8


def compute_scale(row: dict, rate: float) -> float:
    """L4 compute time over the measured card's: the bf16 matmul rates' ratio, and for a float8 row the ratio of
    the two cards' FP8 gains (see the module docstring)."""
    scale = matmul_tflops(row) / rate
    if row.get("float8", "off") != "off":
        words = row.get("device", "H200").split()
        card = next((c for c in ("H100", "H200") if c in words), "H200")
        scale *= FP8_OVER_BF16[card] / FP8_OVER_BF16["L4"]
    return scale


def predict(row: dict, rate: float, links: dict[str, float] | None = None) -> dict:
    """One config at one achievable L4 rate: compute-only, and each transport (`links`, Gbps by name,
    default NIC_GBPS) with and without overlap."""
    link = Link(
        row["collectives"]["inter_node_bytes_per_nic"],
        row["collectives"]["intra_node_bytes_per_gpu"],
        row["n_layers"] + 1,
    )
    t_compute = row["step_time_s"] * compute_scale(row, rate)
    tokens = 8 * row["tokens_per_rank_step"]
    out = {"rate": rate, "t_compute": t_compute}
    for name, gbps in (links or NIC_GBPS).items():
        for overlap in (True, False):
            t = step_time(t_compute, link, gbps, overlap)
            key = f"{name}{'' if overlap else '_serial'}"
            tps = tokens / t
            out[key] = {
                "t": t,
                "tokens_per_s": tps,
                "mfu_peak": tps * flops_per_token(row) / (8 * L4_PEAK_TFLOPS * 1e12),
                "mfu_achievable": tps * flops_per_token(row) / (8 * rate * 1e12),
            }
    return out


def predict_aws_sample(fsdp_bf16_row: dict) -> dict:
    """The sample's steps/s over EFA and TCP, from bytes alone (its 128 tokens per rank make compute
    small; the measured H200 step at that size is reported beside it, not scaled:
    see bench/results/2026-12-04-h200/README.md).

    Bytes: FSDP1 FULL_SHARD gathers the bf16 parameters in forward and again in backward (it
    reshards after forward: https://pytorch.org/docs/stable/fsdp.html, ShardingStrategy.FULL_SHARD)
    and reduce-scatters bf16 gradients once, all over the 8 ranks. The gather and reduce-scatter
    sizes are the counted ones of the module's fsdp row with a bf16 reduce (same parameters)."""
    by = fsdp_bf16_row["collectives"]["by_kind"]
    gather = by["all_gather/bfloat16/8-rank"]["bytes"]
    reduce = by["reduce_scatter/bfloat16/8-rank"]["bytes"]
    full = 2 * gather + reduce
    link = Link(7 / 8 * full, 7 / 8 * full * 6 / 8, fsdp_bf16_row["n_layers"] + 1)
    rows = {}
    for name, gbps in NIC_GBPS.items():
        for overlap in (True, False):
            t = step_time(0.0, link, gbps, overlap)
            measured = AWS_SAMPLE_STEPS_PER_S["efa" if name == "efa" else "tcp"]
            rows[f"{name}{'' if overlap else '_serial'}"] = {
                "steps_per_s": 1 / t,
                "measured": measured,
                "error": (1 / t - measured) / measured,
            }
    return {"nic_bytes": link.nic_bytes, "pcie_bytes": link.pcie_bytes, "predictions": rows}


def load_rows(paths: list[Path]) -> list[dict]:
    rows = []
    for p in paths:
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return [r for r in rows if "oom" not in r and "error" not in r]


def candidate_table(rows: list[dict], expandable: dict[str, dict], links: dict[str, float] | None = None) -> list[dict]:
    """Every config with its counted bytes, measured memory and predictions at both L4 rates."""
    table = []
    for row in rows:
        exp = expandable.get(row["config"], {})
        table.append(
            {
                "config": row["config"],
                "tokens_per_rank_step": row["tokens_per_rank_step"],
                "nic_gb": row["collectives"]["inter_node_bytes_per_nic"] / GB,
                "pcie_gb": row["collectives"]["intra_node_bytes_per_gpu"] / GB,
                "t_h200": row["step_time_s"],
                "alloc_gib": row["peak_allocated_gib"],
                "reserved_gib": row["peak_reserved_gib"],
                "reserved_expandable_gib": exp.get("peak_reserved_gib"),
                "fits": min(row["peak_reserved_gib"], exp.get("peak_reserved_gib") or 1e9) <= reserved_limit_gib(),
                "low": predict(row, L4_ACHIEVABLE_TFLOPS[0], links),
                "high": predict(row, L4_ACHIEVABLE_TFLOPS[1], links),
            }
        )
    return table


def choose_default(table: list[dict]) -> dict:
    """Among configs that fit with margin and whose EFA step (overlap, slow L4) is within 15% of
    compute-only, the one with the most predicted tokens/s at the TCP worst case, then over EFA."""

    def hidden(c: dict) -> bool:
        return c["low"]["efa"]["t"] <= 1.15 * c["low"]["t_compute"]

    ok = [c for c in table if c["fits"] and hidden(c)]
    if not ok:
        raise SystemExit("no candidate fits an L4 with margin and hides the network over EFA")
    return max(ok, key=lambda c: (c["low"]["tcp_worst"]["tokens_per_s"], c["low"]["efa"]["tokens_per_s"]))


def model_rows() -> list[dict]:
    """The model's measured rows: the bf16 candidates, then the float8 rows of the module's rule (the MLP's
    projections: the `f8only=mlp` rows of 2026-12-06; that run's other float8 rows converted every eligible layer,
    a rule since dropped)."""
    float8 = [r for r in load_rows(FLOAT8_ROWS) if r["float8"] != "off" and "f8only=mlp" in r["config"]]
    return load_rows(DEFAULT_ROWS) + float8


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
