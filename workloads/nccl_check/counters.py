"""The EFA kernel driver's per-port byte counters: where they are, how a pod reads them, and what moved.

The second witness of a run's transport (the first is NCCL's log): the NIC's own hardware counters,
read before the job starts and after it ends on every GPU node. Standard library only.

Facts, each from a source:
- The counters are the EFA driver's port statistics, `EFA_DEFINE_PORT_STATS` in
  `kernel/linux/efa/src/efa_verbs.c` of amzn/amzn-drivers at tag efa_linux_3.1.0 (commit
  64788ef7c182a9383445942b5f5f77fe1d25a290): tx_bytes, tx_pkts, rx_bytes, rx_pkts, rx_drops,
  send_bytes, send_wrs, recv_bytes, recv_wrs, rdma_read_*, rdma_write_* (only where the device has
  RDMA write), retrans_* and two event counts. Upstream Linux carries the same driver
  (torvalds/linux `drivers/infiniband/hw/efa/efa_verbs.c`; older trees list the same byte counters in one
  `EFA_DEFINE_STATS` table). tx_bytes/rx_bytes come from the device's basic statistics
  (`efa_fill_port_stats`, EFA_ADMIN_GET_STATS_TYPE_BASIC): every byte the port sent or received.
  Which driver release the EKS AL2023 accelerated AMI ships is not pinned by any source found here.
- The RDMA core publishes them as one file per counter under
  `/sys/class/infiniband/<device>/ports/1/hw_counters/<name>`, mode 0444 (world-readable), plus a
  writable `lifespan` (Linux `drivers/infiniband/core/sysfs.c`, `setup_hw_port_stats`): reading needs no
  privilege. Only the initial network namespace's device has them (same file, `setup_port`: `if (port_num
  && is_full_dev)`); a pod of its own namespace sees a compat copy without them (`device.c`,
  `add_one_compat_dev`), so the driver reads them through the host's sysfs mounted read-only in a reader
  pod (`read_script`'s `root`; docs/efa-witnesses.md, "Where the counters are read"). Device names follow
  rdma-core's naming: `rdmap0s31` in the EC2 guide
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-working-monitor.html), `efa_0` on others.
- The values are cumulative "since instance launch or the last driver reset" (same EC2 page): a
  value that goes down between two reads is a reset, and the difference then means nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SYSFS_ROOT = "/sys/class/infiniband"
PORT = 1
# The byte counters kept with a run (the others count packets, work requests and events).
BYTE_COUNTERS = (
    "tx_bytes",
    "rx_bytes",
    "send_bytes",
    "recv_bytes",
    "rdma_read_bytes",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_recv_bytes",
)
# What the judge compares with the model's bytes per NIC in each direction: every byte the port sent.
SENT = "tx_bytes"
BEGIN, END, NONE, DEVICE, UNREADABLE = "EFA_COUNTERS_BEGIN", "EFA_COUNTERS_END", "NO_DEVICES", "DEVICE", "UNREADABLE"


def read_script(root: str = SYSFS_ROOT) -> str:
    """A POSIX sh script printing every device's port-1 counters under `root`, one `name value` line
    each after a `DEVICE <name>` line; `UNREADABLE <name>` for a file `cat` cannot read; `NO_DEVICES`
    when no device has a hw_counters folder."""
    return (
        f'found=0; echo {BEGIN}; for d in "{root}"/*; do c="$d/ports/{PORT}/hw_counters"; '
        f'[ -d "$c" ] || continue; found=1; echo "{DEVICE} ${{d##*/}}"; '
        'for f in "$c"/*; do n="${f##*/}"; [ "$n" = lifespan ] && continue; '
        f'if v=$(cat "$f" 2>/dev/null); then echo "$n $v"; else echo "{UNREADABLE} $n"; fi; done; done; '
        f"[ $found = 1 ] || echo {NONE}; echo {END}"
    )


@dataclass(frozen=True)
class NodeReading:
    """One node's read: counters by device and counter name, the counters that could not be read
    (by device), or why the node could not be read at all (`error`); `advertised`: the EFA devices the
    node advertises to the scheduler, where the reader knows it."""

    devices: dict[str, dict[str, int]] = field(default_factory=dict)
    unreadable: dict[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""
    advertised: int | None = None

    @property
    def short(self) -> str:
        """Why this read cannot be a witness's first half: it failed, or shows no device, or fewer than advertised."""
        found = len(self.devices)
        if self.error or (found and found >= (self.advertised or 0)):
            return self.error
        return f"{found} EFA device(s) with readable hw_counters, the node advertises {self.advertised}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "unreadable": {d: list(n) for d, n in self.unreadable.items()},
            "error": self.error,
            "advertised": self.advertised,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeReading:
        unreadable = {k: tuple(v) for k, v in (d.get("unreadable") or {}).items()}
        devices = {dev: {k: int(v) for k, v in c.items()} for dev, c in (d.get("devices") or {}).items()}
        return cls(devices, unreadable, str(d.get("error") or ""), d.get("advertised"))


def parse_reading(text: str) -> NodeReading:
    """The output of `read_script`; a truncated output (no END line) is an error, not a partial read."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if BEGIN not in lines or END not in lines:
        return NodeReading(error="the counter read did not finish (no end marker in its output)")
    body = lines[lines.index(BEGIN) + 1 : lines.index(END)]
    devices: dict[str, dict[str, int]] = {}
    unreadable: dict[str, list[str]] = {}
    current = None
    for line in body:
        word, _, rest = line.partition(" ")
        if word == DEVICE:
            current = rest
            devices[current] = {}
        elif current is not None and word == UNREADABLE:
            unreadable.setdefault(current, []).append(rest)
        elif current is not None and rest.isdigit():
            devices[current][word] = int(rest)
        elif current is not None:
            unreadable.setdefault(current, []).append(word)  # a value that is not a count reads as unreadable
    return NodeReading(devices, {d: tuple(n) for d, n in unreadable.items()})


# ---- before and after ----------------------------------------------------------------------------
OK, RESET, MISSING, UNREAD = "ok", "reset", "missing", "unreadable"


@dataclass(frozen=True)
class NicDelta:
    """What one device's byte counters did between the two reads, or why that is unknown (`outcome`)."""

    node: str
    device: str
    outcome: str  # ok | reset | missing | unreadable
    moved: dict[str, int] = field(default_factory=dict)  # byte counter -> after - before (outcome ok)
    why: str = ""

    @property
    def sent(self) -> int:
        return self.moved.get(SENT, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "device": self.device, "outcome": self.outcome, "moved": self.moved, "why": self.why}


def _device_delta(node: str, device: str, before: NodeReading, after: NodeReading) -> NicDelta:
    b, a = before.devices.get(device), after.devices.get(device)
    if b is None or a is None:
        when = "before the job" if b is None else "after the job"
        return NicDelta(node, device, MISSING, why=f"{device} on {node} was not there {when}")
    bad = sorted(set(before.unreadable.get(device, ())) | set(after.unreadable.get(device, ())))
    bad += sorted(c for c in BYTE_COUNTERS if (c in a) != (c in b) and c not in bad)
    if SENT in bad or SENT not in a:
        return NicDelta(node, device, UNREAD, why=f"{device} on {node}: {', '.join(bad) or SENT} could not be read")
    moved = {c: a[c] - b[c] for c in BYTE_COUNTERS if c in a and c in b}
    dropped = [c for c, v in moved.items() if v < 0]
    if dropped:
        return NicDelta(
            node,
            device,
            RESET,
            moved,
            f"{device} on {node}: {', '.join(dropped)} went down ({b[dropped[0]]} -> {a[dropped[0]]}): the counters "
            "were reset during the job (driver reload or instance replaced), so the difference means nothing",
        )
    return NicDelta(node, device, OK, moved)


def deltas(before: dict[str, NodeReading], after: dict[str, NodeReading]) -> list[NicDelta]:
    """Every device of every node read before or after, with what its counters did in between."""
    out = []
    for node in sorted(set(before) | set(after)):
        b, a = before.get(node), after.get(node)
        if b is None or a is None or b.error or a.error:
            why = (b.error if b is not None else "") or (a.error if a is not None else "") or "not read"
            out.append(NicDelta(node, "*", UNREAD if (b and a) else MISSING, why=f"{node}: {why}"))
            continue
        names = sorted(set(b.devices) | set(a.devices))
        if not names:
            out.append(NicDelta(node, "*", MISSING, why=f"{node}: no EFA device under {SYSFS_ROOT}"))
        out += [_device_delta(node, name, b, a) for name in names]
    return out
