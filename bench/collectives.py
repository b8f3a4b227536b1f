"""Record the collectives a training step issues, and what they put on each link of a cluster.

`CollectiveRecorder` wraps the `torch.distributed` calls FSDP2 makes (all-gather, reduce-scatter,
all-reduce, broadcast) and records each one's kind, dtype, bytes and process group before passing
it on. Under the `fake` backend (`torch.testing._internal.distributed.fake_pg`) nothing is sent, so
one process can play rank 0 of a world of 8 and count the real module's traffic.

`wire_bytes` turns one recorded collective into bytes on the wire, assuming NCCL's ring algorithm,
in which each rank of an n-rank group sends (n-1)/n of the full buffer for an all-gather or a
reduce-scatter and 2(n-1)/n for an all-reduce (NCCL's own accounting of "bus bandwidth":
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). Assumptions, stated once:

- the ring visits each node's ranks together, so a group spanning m > 1 nodes has m edges that
  cross nodes, and a group inside one node has none;
- the groups of one kind partition the world the same way on every node (true of FSDP2's 1-D and
  2-D device meshes), so the traffic of rank 0's group, times the number of such groups, divided
  over the nodes, is what each node's NIC carries in each direction;
- every byte of a rank's outgoing ring edge goes over one link: the NIC for an edge that leaves the
  node, the GPU's PCIe link for one that stays inside it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

# The torch.distributed entry points FSDP2 (torch 2.11-2.13) uses, by the kind they count as.
# Deprecated aliases call the new names internally; only the outermost call is recorded.
_KINDS = {
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
}


@dataclass(frozen=True)
class Collective:
    """One collective as rank 0 issued it: `nbytes` is the full (unsharded) buffer."""

    kind: str
    dtype: str
    nbytes: int
    ranks: tuple[int, ...]


class CollectiveRecorder:
    """Context manager: while active, every wrapped collective is appended to `self.calls`."""

    def __init__(self) -> None:
        self.calls: list[Collective] = []
        self._depth = 0

    def _wrap(self, kind: str, fn):
        def wrapper(*args, **kwargs):
            if self._depth == 0:
                tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
                big = max(tensors, key=lambda t: t.numel())
                group = kwargs.get("group") or next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
                ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
                self.calls.append(Collective(kind, str(big.dtype).removeprefix("torch."), big.nbytes, ranks))
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1

        return wrapper

    @contextlib.contextmanager
    def recording(self) -> Iterator[CollectiveRecorder]:
        saved = {name: getattr(dist, name) for name in _KINDS if hasattr(dist, name)}
        for name, fn in saved.items():
            setattr(dist, name, self._wrap(_KINDS[name], fn))
        try:
            yield self
        finally:
            for name, fn in saved.items():
                setattr(dist, name, fn)


def ring_factor(kind: str, n: int) -> float:
    """Bytes each rank sends per byte of the full buffer, in an n-rank ring (nccl-tests' busbw factor)."""
    if n <= 1:
        return 0.0
    if kind in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective kind {kind!r}")


def wire_bytes(c: Collective, world: int, gpus_per_node: int) -> tuple[float, float]:
    """(bytes each node's NIC sends across nodes, bytes each GPU sends inside its node) for `c`.

    Received bytes are the same in a ring, so each is also the bytes in the other direction."""
    n = len(c.ranks)
    per_edge = ring_factor(c.kind, n) * c.nbytes
    nodes_spanned = len({r // gpus_per_node for r in c.ranks})
    crossing = nodes_spanned if nodes_spanned > 1 else 0  # ring edges that leave a node
    groups = world // n
    n_nodes = world // gpus_per_node
    per_nic = groups * crossing * per_edge / n_nodes
    per_gpu_intra = per_edge * (n - crossing) / n
    return per_nic, per_gpu_intra


def summarise(calls: list[Collective], world: int, gpus_per_node: int) -> dict:
    """Totals of one optimizer step: per kind and dtype, and per link."""
    by_kind: dict[str, dict] = {}
    nic = intra = 0.0
    for c in calls:
        key = f"{c.kind}/{c.dtype}/{len(c.ranks)}-rank"
        row = by_kind.setdefault(key, {"calls": 0, "bytes": 0})
        row["calls"] += 1
        row["bytes"] += c.nbytes
        a, b = wire_bytes(c, world, gpus_per_node)
        nic += a
        intra += b
    return {"by_kind": by_kind, "inter_node_bytes_per_nic": nic, "intra_node_bytes_per_gpu": intra}
