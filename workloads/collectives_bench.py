"""Collective bandwidth over the wire the job uses: all-reduce, all-gather and reduce-scatter over a sweep of
message sizes, with algorithm and bus bandwidth as nccl-tests reports them.

    torchrun --nproc-per-node 2 -m workloads.collectives_bench --max-mib 16 --out c.json   # gloo on loopback
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-endpoint HOST:29500 -m workloads.collectives_bench --out c.json

Backend NCCL on GPUs (each rank on cuda:LOCAL_RANK), gloo on CPU. Sizes are nccl-tests' "size": the
whole buffer of an all-reduce, the gathered output of an all-gather, the input of a reduce-scatter
(each rank holds size/n of the latter two). For each: algbw = size / time, busbw = algbw x 2(n-1)/n
for all-reduce and algbw x (n-1)/n for all-gather and reduce-scatter, the bytes each rank's link
carries under the ring algorithm (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md),
so busbw is comparable to a link's rate: here the g6.12xlarge NIC's 40 Gbps = 5 GB/s each way
(https://aws.amazon.com/ec2/instance-types/g6/). Rank 0 writes one JSON document (`--out`) and prints
the table. Whether the cluster's image also ships nccl-tests' `all_reduce_perf` is looked up on PATH at
run time and recorded: no public source found says either way for the DLC Ray image.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time
from typing import Any

OPS = ("all_reduce", "all_gather", "reduce_scatter")
MIB = 1 << 20
LINK_GBPS = 40.0  # the g6.12xlarge network (module docstring)
ELEMENT_BYTES = 4  # float32, nccl-tests' default type


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for `op` over `n` ranks (nccl-tests doc/PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"a collective needs at least one rank, got {n}")
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from `min_bytes` to `max_bytes`, both included when they are powers of two."""
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def row(op: str, size: int, n: int, seconds: float) -> dict[str, Any]:
    """One measured point: time per call, algorithm and bus bandwidth in GB/s, busbw against the link."""
    algbw = size / seconds / 1e9
    busbw = algbw * bus_factor(op, n)
    return {
        "op": op,
        "bytes": size,
        "time_s": seconds,
        "algbw_gbs": algbw,
        "busbw_gbs": busbw,
        "of_link": busbw / (LINK_GBPS / 8),
    }


def table(doc: dict[str, Any]) -> list[str]:
    """The human form of a result document: one line per op and size."""
    head = (
        f"{doc['backend']} over {doc['world']} ranks on {doc['nodes']} node(s); link {LINK_GBPS:g} Gbps = "
        f"{LINK_GBPS / 8:g} GB/s; nccl-tests all_reduce_perf: {doc.get('nccl_tests') or 'not in this image'}"
    )
    lines = [head, f"{'op':<15}{'size':>10}{'time ms':>11}{'algbw GB/s':>12}{'busbw GB/s':>12}{'of link':>9}"]
    for r in doc["rows"]:
        size = f"{r['bytes'] // MIB} MiB" if r["bytes"] >= MIB else f"{r['bytes']} B"
        lines.append(
            f"{r['op']:<15}{size:>10}{r['time_s'] * 1e3:>11.3f}{r['algbw_gbs']:>12.3f}{r['busbw_gbs']:>12.3f}"
            f"{r['of_link']:>9.0%}"
        )
    return lines


# ---- the measurement (torch from here on) -----------------------------------------------------------------
def _call(dist: Any, op: str, buf: Any, part: Any) -> None:
    # torch 2.13 renames the tensor forms to *_single and deprecates the old names; 2.11 has only those
    if op == "all_reduce":
        dist.all_reduce(buf)
    elif op == "all_gather":
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(buf, part)
    else:
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(part, buf)


def measure(op: str, size: int, iters: int, device: Any) -> float:
    """Seconds per call of `op` on a buffer of `size` bytes (after two warm-up calls), the slowest rank's."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    buf = torch.ones(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
    part = torch.ones(size // ELEMENT_BYTES // n, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        _call(dist, op, buf, part)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        _call(dist, op, buf, part)
    sync()
    took = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return float(took.item())


def sweep(min_bytes: int, max_bytes: int, iters: int) -> dict[str, Any]:
    """Every op at every size on the process group torchrun set up; the result document."""
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpu else "gloo", device_id=device if gpu else None)
    n = dist.get_world_size()
    hosts: list[Any] = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    rows = [row(op, s, n, measure(op, s, iters, device)) for op in OPS for s in sizes(min_bytes, max_bytes)]
    doc = {
        "backend": dist.get_backend(),
        "world": n,
        "nodes": len(set(hosts)),
        "nccl_tests": shutil.which("all_reduce_perf"),
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpu else None,
        "rows": rows,
    }
    dist.destroy_process_group()
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--min-mib", type=int, default=1, help="smallest message in MiB (default 1)")
    p.add_argument("--max-mib", type=int, default=1024, help="largest message in MiB (default 1024 = 1 GiB)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("--out", help="write the result document here (rank 0)")
    a = p.parse_args(argv)
    if not 1 <= a.min_mib <= a.max_mib:
        p.error(f"--min-mib {a.min_mib} --max-mib {a.max_mib}: need 1 <= min <= max")
    doc = sweep(a.min_mib * MIB, a.max_mib * MIB, a.iters)
    if int(os.environ.get("RANK", "0")) == 0:
        if a.out:
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=2)
        print("\n".join(table(doc)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
