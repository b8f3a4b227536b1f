"""Streaming parser for NCCL_DEBUG=INFO output (NCCL 2.4 to 2.29, aws-ofi-nccl 1.x).

It reads bytes line by line and keeps only aggregates (one record per process, communicator and
distinct channel connection, plus a bounded list of WARN lines), so memory does not grow with
the size of the log, only with the number of distinct things it describes.

Accepted around the NCCL message, in any combination:
- NCCL's own prefix ``host:pid:tid [dev] NCCL INFO`` / ``... [dev] file.cc:123 NCCL WARN``;
- Ray's worker prefixes, nested or not: ``(RayTrainWorker pid=1234, ip=10.0.1.5)``, and Ray's
  dedup suffix ``[repeated 7x across cluster]``;
- launcher prefixes (``[1,7]<stdout>:``, ``host: ``), timestamps (CloudWatch exports,
  ``kubectl logs --timestamps``, NCCL 2.28's ``[2026-12-02 16:26:37]``) and ANSI colour codes;
- no prefix at all (NCCL prints ``NCCL version ...`` bare in older releases; issue reports
  often trim prefixes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO

from .model import CommInfo, Connection, Evidence, FileStatus, ProcessInfo, ProcKey, Transport

RUN_MARKER = "ray-efa-eks nccl-run"
MAX_WARNINGS = 50
MAX_LINE_TEXT = 400

_ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# host:pid:tid [dev]; the host may be glued to a timestamp in CloudWatch exports, so it excludes
# the characters that separate columns there.
_NCCL_PREFIX = re.compile(r"([^\s:|()\[\]]+):(\d+):(\d+) \[(\d+)\]")
_RAY_PREFIX = re.compile(r"\((?:[\w.-]+ )?pid=(\d+)(?:, ip=([\d.]+|[\w.-]+))?\)")
_UNPREFIXED = re.compile(
    rb"(?:Channel|Ring) \d+(?:/\d+)? : \d|NCCL version|NET/(?:OFI|Plugin|Socket|IB)|Using network"
    rb"|comm 0x[0-9a-f]+ rank|" + RUN_MARKER.encode()
)

_INFO = b"NCCL INFO "
_WARN = b"NCCL WARN"

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+[^\s]*)")
_PROVIDER = re.compile(
    r"NET/OFI Selected [Pp]rovider is ([^\s,(]+)(?:, fabric is ([^\s,(]+))?(?: \(found (\d+) nics\))?"
)
_OFI_INIT = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl (\S+)")
_LOADED = re.compile(r"Loaded (?:net|NET|collnet) plugin (.+?)\s*$")
_NETWORK = re.compile(
    r"(?:Using network|Using internal [Nn]etwork|Assigned NET plugin|Initialized NET plugin) (.+?)"
    r"(?: to comm)?\s*$"
)
_INIT_FAILED = re.compile(r"Failed to initialize NET plugin (.+?)\s*$")
_COMM = re.compile(
    r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)"
)
_COMM_INIT = re.compile(
    r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+)\b.*?(?:commId (0x[0-9a-f]+))?.*- Init (?:START|COMPLETE)"
)
_CONN_STARTS = (b"Channel", b"Ring", b"CollNet", b"NVLS")
# "Channel 00/0 : 3[3] -> 4[0] [send] via ...", older "Ring 00 : 3 -> 4 via ...", and CollNet's
# one-rank form "CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA" (the peer is the network).
_CONN_B = re.compile(
    rb"(?:Channel|Ring|CollNet|NVLS) (\d+)(?:/(\d+))? : (\d+)(?:\[[0-9a-fx]+\])?(?: -> (\d+)"
    rb"(?:\[[0-9a-fx]+\])?)?(?: \[(send|receive)\])? via "
)
_MARKER = re.compile(re.escape(RUN_MARKER) + r" run_id=(\S+)")
_MARKER_B = RUN_MARKER.encode()
# How "NET plugin not found" reads across releases (2.4-2.18: "No plugin found", 2.19+:
# "Could not find: ...", 2.12-2.18 also "Plugin load (...) returned 2 : ...").
_PLUGIN_MISSING = ("No plugin found", "Could not find:", "Plugin load (", "dlerror=")
# aws-ofi-nccl (and NCCL about it) when the plugin loads but cannot start.
_OFI_FAILURES = (
    "initialization failed",
    "Initializing plugin failed",
    "Couldn't find any optimal provider",
    "Unable to find a protocol",
    "OFI plugin initNet() failed",
    "fi_getinfo",
    "No eligible providers",
)
_PLUGIN_MISSING_RE = re.compile("|".join(re.escape(f) for f in _PLUGIN_MISSING))
_OFI_FAIL_RE = re.compile("|".join(re.escape(f) for f in _OFI_FAILURES))


def run_marker(run_id: str, rank: int | None = None) -> str:
    """The line the training module prints on each rank before NCCL starts, so that a combined
    log (Ray job log, kubectl logs) can be cut to one run: ``ray-efa-eks nccl-run run_id=ID``."""
    line = f"{RUN_MARKER} run_id={run_id}"
    return line if rank is None else f"{line} rank={rank}"


def classify_transport(via: str) -> Transport:
    """Class the text after 'via' of a channel line.

    >>> classify_transport("NET/AWS Libfabric/0/GDRDMA").net
    'libfabric'
    """
    raw = via.strip()
    head, _, rest = raw.partition("/")
    upper = head.upper()
    gdr = "/GDRDMA" in raw or "/GDR" in raw
    if upper == "P2P" or upper == "CUMEM":
        return Transport(raw, "P2P", None, None, gdr)
    if upper == "SHM" or raw.startswith("direct shared memory"):
        return Transport(raw, "SHM", None, None, gdr)
    if upper.startswith("NVLS"):
        return Transport(raw, "NVLS", None, None, gdr)
    if upper == "COLLNET":
        return Transport(raw, "COLLNET", "other", rest.split("/")[0] or None, gdr)
    if upper == "NET":
        name = rest.split("/")[0]
        low = name.lower()
        if "libfabric" in low or low.startswith("ofi") or low == "aws ofi":
            family = "libfabric"
        elif low.startswith("socket"):
            family = "socket"
        elif low.startswith("ib") or low.startswith("nccl rdma plugin"):
            # IB, IBext, IBext_v8 and "NCCL RDMA Plugin v8" (the RDMA-SHARP plugin): verbs, IB or RoCE
            family = "ib"
        else:
            family = "other"
        return Transport(raw, "NET", family, name, gdr)
    return Transport(raw, "OTHER", None, None, gdr)


def network_family(name: str) -> str:
    """Family of a network name as 'Using network X' prints it."""
    return classify_transport(f"NET/{name}/0").net or "other"


@dataclass
class ScanState:
    """Aggregates over every in-scope line of every file read."""

    processes: dict[ProcKey, ProcessInfo] = field(default_factory=dict)
    comms: dict[tuple[ProcKey, str], CommInfo] = field(default_factory=dict)
    connections: dict[tuple, Connection] = field(default_factory=dict)
    warnings: list[Evidence] = field(default_factory=list)
    warning_count: int = 0
    markers: dict[str, Evidence] = field(default_factory=dict)  # run id -> first marker line
    # thread -> comm pointer it last initialised, so channel lines can be tied to a comm
    _thread_comm: dict[tuple, str] = field(default_factory=dict)

    def process(self, key: ProcKey) -> ProcessInfo:
        info = self.processes.get(key)
        if info is None:
            info = self.processes[key] = ProcessInfo(key)
        return info


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LINE_TEXT else text[: MAX_LINE_TEXT - 3] + "..."


def _identity(prefix: str, file_label: str) -> tuple[ProcKey, int | None]:
    """(process key, thread id) from whatever comes before the NCCL message."""
    m = None
    for m in _NCCL_PREFIX.finditer(prefix):
        pass  # the last match is the one next to the message (launchers add their own before)
    if m is not None:
        return (m.group(1), int(m.group(2))), int(m.group(3))
    r = _RAY_PREFIX.search(prefix)
    if r is not None:
        return (f"ray:{r.group(2) or '?'}", int(r.group(1))), None
    return (f"file:{file_label}", None), None


# The NCCL INFO messages that matter; every other line is dropped after two substring tests.
_INTERESTING = (
    b"Channel",
    b"Ring",
    b"CollNet",
    b"NVLS",
    b"NET/OFI Selected",
    b"NET/OFI Initializing",
    b"NET/OFI Using aws",
    b"NET/OFI Unable",
    b"NET/OFI Couldn't",
    b"NET/OFI OFI",
    b"NET/Plugin",
    b"Using network",
    b"Using internal",
    b"NCCL version",
    b"comm 0x",
    b"ncclComm",
    b"Initialized NET plugin",
    b"Assigned NET plugin",
    b"Failed to initialize NET plugin",
)
_COMM_STARTS = (b"comm 0x", b"ncclComm")


def _via(raw: bytes, start: int) -> bytes:
    """The transport after 'via ', without a trailing comm pointer or Ray's dedup note."""
    end = len(raw)
    for stop in (b" comm 0x", b" [repeated "):
        k = raw.find(stop, start)
        if 0 <= k < end:
            end = k
    return raw[start:end].strip()


def scan_stream(
    stream: BinaryIO,
    label: str,
    state: ScanState,
    status: FileStatus,
    run_id: str | None,
    in_scope_at_start: bool,
) -> None:
    """Read one binary stream line by line into ``state`` and ``status``.

    Only lines in scope count: the whole file when ``in_scope_at_start``; otherwise (a combined
    log given a run id) the lines after a ``run_marker(run_id)`` line and before a marker of
    another run. Memory: one line plus the aggregates.
    """
    in_scope = in_scope_at_start
    lineno = 0
    nccl_lines = 0
    skipped = 0
    interesting, conn_starts, comm_starts = _INTERESTING, _CONN_STARTS, _COMM_STARTS
    info_tag = _INFO
    conn_match = _CONN_B.match
    connections = state.connections
    thread_comm = state._thread_comm
    ident_cache: dict[bytes, tuple[ProcKey, int | None]] = {}

    def ident(prefix_b: bytes) -> tuple[ProcKey, int | None]:
        found = ident_cache.get(prefix_b)
        if found is None:
            clean = _ANSI.sub(b"", prefix_b) if b"\x1b" in prefix_b else prefix_b
            found = _identity(clean.decode("utf-8", "replace"), label)
            if len(ident_cache) > 4096:
                ident_cache.clear()  # timestamps in prefixes make every prefix unique
            ident_cache[prefix_b] = found
        return found

    for lineno, raw in enumerate(stream, 1):
        # Substring tests first: most lines of a big log never reach a regex.
        i = raw.find(info_tag)
        if i < 0:
            if b"NCCL" not in raw and not (b"via " in raw or b"NET/" in raw or b"network" in raw
                                           or b"nNodes" in raw or b"nccl-run" in raw):
                continue
            if b"\x1b" in raw:
                raw = _ANSI.sub(b"", raw)
                i = raw.find(info_tag)
        if i >= 0:
            if not in_scope:
                skipped += 1
                continue
            nccl_lines += 1
            j = i + 10
            if raw.startswith(conn_starts, j):
                # Channel lines are the bulk of an init log: parse them in bytes, decode only
                # the first line of each distinct connection. Ring and tree listings
                # ("Channel 00/02 :    0   1") name no transport: one substring test drops them.
                if b" via " not in raw:
                    continue
                m = conn_match(raw, j)
                if m is None:
                    continue
                via = _via(raw, m.end())
                prefix = raw[:i]
                found = ident_cache.get(prefix)
                proc, tid = found if found is not None else ident(prefix)
                comm = thread_comm.get((proc, tid)) or thread_comm.get((proc, None))
                key = (proc, comm, via, *m.groups())
                if key not in connections:
                    channel, _sub, src, dst, direction = m.groups()
                    connections[key] = Connection(
                        proc, comm, int(channel), int(src), int(dst) if dst else None,
                        direction.decode() if direction else None,
                        classify_transport(via.decode("utf-8", "replace")),
                        Evidence(label, lineno, _clip(raw.decode("utf-8", "replace").strip())),
                    )
                continue
            if not raw.startswith(interesting, j):
                continue
            if raw.startswith(comm_starts, j) and b"nNodes" not in raw and b"- Init" not in raw:
                continue  # e.g. "comm 0x... Destroy COMPLETE": nothing about the network
            msg_b, prefix_b, warn = raw[j:], raw[:i], False
        else:
            k = raw.find(_WARN)
            if k >= 0:
                if not in_scope:
                    skipped += 1
                    continue
                nccl_lines += 1
                msg_b, prefix_b, warn = raw[k + 9:], raw[:k], True
            else:
                m = _UNPREFIXED.search(raw)
                if m is None:
                    continue
                msg_b, prefix_b, warn = raw[m.start():], raw[: m.start()], False
                if msg_b.startswith(_MARKER_B):
                    text = raw.decode("utf-8", "replace").strip()
                    mk = _MARKER.search(text)
                    if mk is not None:
                        rid = mk.group(1)
                        state.markers.setdefault(rid, Evidence(label, lineno, _clip(text), "run marker"))
                        if run_id is not None and not in_scope_at_start:
                            in_scope = rid == run_id
                    continue
                if not in_scope:
                    skipped += 1
                    continue
                nccl_lines += 1
        msg = msg_b.decode("utf-8", "replace").strip()
        if "[repeated" in msg:
            msg = _REPEATED.sub("", msg)
        proc, tid = ident(prefix_b)
        _apply(state, proc, tid, msg, warn, _LazyLine(label, lineno, raw))
    status.lines = lineno
    status.bytes = stream.tell()
    status.nccl_lines = nccl_lines
    status.out_of_scope_lines = skipped


class _LazyLine:
    """A line whose text is decoded only if it becomes evidence."""

    __slots__ = ("file", "line", "raw")

    def __init__(self, file: str, line: int, raw: bytes) -> None:
        self.file, self.line, self.raw = file, line, raw

    @property
    def text(self) -> str:
        return _clip(self.raw.decode("utf-8", "replace").strip())

    def ev(self, why: str = "") -> Evidence:
        return Evidence(self.file, self.line, self.text, why)


def _apply(state: ScanState, proc: ProcKey, tid: int | None, msg: str, warn: bool, ev: _LazyLine) -> None:
    """Fold one NCCL message into the aggregates."""
    if warn:
        state.warning_count += 1
        if len(state.warnings) < MAX_WARNINGS:
            state.warnings.append(ev.ev())
        if "NET/OFI" in msg or "OFI plugin" in msg:
            if _OFI_FAIL_RE.search(msg):
                info = state.process(proc)
                if info.ofi_failure is None:
                    info.ofi_failure = ev.ev("aws-ofi-nccl failed to start")
        elif "Failed to initialize any NET plugin" in msg:
            info = state.process(proc)
            if info.ofi_failure is None:
                info.ofi_failure = ev.ev("no usable network plugin")
        return
    first = msg[:4]
    if first in ("Chan", "Ring", "Coll", "NVLS"):
        raw = msg.encode()
        m = _CONN_B.match(raw)
        if m is None:
            return  # ring/tree listings ("Channel 00/02 :    0   1 ...") carry no transport
        via_b = _via(raw, m.end())
        channel, _sub, src, dst, direction = (g.decode() if g is not None else None for g in m.groups())
        via = via_b.decode("utf-8", "replace")
        comm = state._thread_comm.get((proc, tid)) or state._thread_comm.get((proc, None))
        # the same key as scan_stream's fast path, so a connection is kept once
        key = (proc, comm, via_b) + m.groups()
        if key not in state.connections:
            transport = classify_transport(via)
            state.connections[key] = Connection(
                proc, comm, int(channel), int(src), int(dst) if dst else None, direction, transport, ev.ev()
            )
        return
    if msg.startswith("NCCL version"):
        m = _VERSION.match(msg)
        if m is not None:
            state.process(proc).nccl_version = m.group(1)
        return
    if msg.startswith("NET/"):
        info = state.process(proc)
        if msg.startswith("NET/OFI"):
            m = _PROVIDER.match(msg)
            if m is not None:
                if info.provider_evidence is None or info.provider != m.group(1):
                    info.provider = m.group(1)
                    info.fabric = m.group(2)
                    info.nics = int(m.group(3)) if m.group(3) else None
                    info.provider_evidence = ev.ev("libfabric provider")
                return
            m = _OFI_INIT.match(msg)
            if m is not None:
                if info.plugin is None:
                    info.plugin = f"aws-ofi-nccl {m.group(1)}"
                    info.plugin_evidence = ev.ev("net plugin loaded")
                return
            if info.ofi_failure is None and _OFI_FAIL_RE.search(msg):
                info.ofi_failure = ev.ev("aws-ofi-nccl failed to start")
            return
        if msg.startswith("NET/Plugin"):
            if "ncclCollNetPlugin" in msg or "CollNet" in msg:
                return  # a missing CollNet symbol says nothing about the net plugin
            if _PLUGIN_MISSING_RE.search(msg):
                if info.plugin_missing is None:
                    info.plugin_missing = ev.ev("net plugin not found")
                return
            m = _LOADED.search(msg)
            if m is not None and info.plugin is None:
                info.plugin = m.group(1)
                info.plugin_evidence = ev.ev("net plugin loaded")
            return
        return
    if msg.startswith(("Using", "Assigned", "Initialized")):
        m = _NETWORK.match(msg)
        if m is not None:
            name = m.group(1).strip()
            info = state.process(proc)
            if name not in info.networks:
                info.networks[name] = ev.ev("network chosen")
        return
    if msg.startswith("Failed to initialize NET plugin"):
        m = _INIT_FAILED.match(msg)
        if m is not None:
            name = m.group(1)
            if network_family(name) == "libfabric":
                info = state.process(proc)
                if info.ofi_failure is None:
                    info.ofi_failure = ev.ev("aws-ofi-nccl failed to start")
        return
    if "nNodes" in msg:
        m = _COMM.search(msg)
        if m is not None:
            ptr = m.group(1)
            c = _comm(state, proc, ptr)
            nnodes = int(m.group(4))
            if c.nnodes != nnodes or c.evidence is None or c.evidence.why == "communicator":
                c.evidence = ev.ev(f"nNodes {nnodes}")
            c.rank, c.nranks = int(m.group(2)), int(m.group(3))
            c.nnodes, c.local_ranks = nnodes, int(m.group(5))
            state._thread_comm[(proc, tid)] = ptr
            state._thread_comm[(proc, None)] = ptr
        return
    if "comm 0x" in msg:
        m = _COMM_INIT.search(msg)
        if m is not None:
            ptr = m.group(1)
            c = _comm(state, proc, ptr)
            c.rank, c.nranks = int(m.group(2)), int(m.group(3))
            if m.group(4):
                c.comm_id = m.group(4)
            if c.evidence is None:
                c.evidence = ev.ev("communicator")
            if msg.endswith("Init START") or c.nnodes is None:
                state._thread_comm[(proc, tid)] = ptr
                state._thread_comm[(proc, None)] = ptr
    

def _comm(state: ScanState, proc: ProcKey, ptr: str) -> CommInfo:
    c = state.comms.get((proc, ptr))
    if c is None:
        c = state.comms[(proc, ptr)] = CommInfo(proc, ptr)
    return c
