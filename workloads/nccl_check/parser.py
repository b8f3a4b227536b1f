"""What NCCL_DEBUG=INFO messages say (NCCL 2.4 to 2.29, aws-ofi-nccl 1.x), folded into aggregates.

``apply_message`` folds one message into a ScanState, which keeps only aggregates (one record
per process, communicator and distinct channel connection, plus a bounded list of WARN lines), so
memory does not grow with the size of the log, only with the number of distinct things it
describes. ``LineReader`` reads the lines of one file into it, one at a time.

Accepted around the NCCL message, in any combination:
- NCCL's own prefix ``host:pid:tid [dev] NCCL INFO`` / ``... [dev] file.cc:123 NCCL WARN``;
- Ray's worker prefixes, nested or not: ``(RayTrainWorker pid=1234, ip=10.0.1.5)``, and Ray's
  dedup suffix ``[repeated 7x across cluster]``;
- launcher prefixes (``[1,7]<stdout>:``, ``host: ``), timestamps (CloudWatch exports,
  ``kubectl logs --timestamps``, NCCL 2.28's ``[2026-12-02 16:26:37]``) and ANSI colour codes;
- no prefix at all (NCCL prints ``NCCL version ...`` bare in older releases; issue reports
  often trim prefixes).

This module is the one place that knows what a line says: the line grammar (the patterns below)
and the state it folds them into. ``report.py`` opens the files and hands their lines to a
``LineReader``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .records import CommInfo, Connection, Evidence, ProcessInfo, ProcKey, Transport

RUN_MARKER = "ray-efa-eks nccl-run"
MAX_WARNINGS = 50
MAX_LINE_TEXT = 400

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")
REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# host:pid:tid [dev]; the host may be glued to a timestamp in CloudWatch exports, so it excludes
# the characters that separate columns there.
_NCCL_PREFIX = re.compile(r"([^\s:|()\[\]]+):(\d+):(\d+) \[(\d+)\]")
_RAY_PREFIX = re.compile(r"\((?:[\w.-]+ )?pid=(\d+)(?:, ip=([\d.]+|[\w.-]+))?\)")
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
# NCCL of the 2.4 era names the network it chose only here: "CUDA Dev 0[0], Socket NIC distance :  PHB"
# (NVIDIA/nccl#226, a 2019 multi-node log), "..., IB NIC distance : SYS".
_NIC_DISTANCE = re.compile(r"CUDA Dev \d+\[\d+\], (.+?) NIC distance")
_COMM = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
_COMM_INIT = re.compile(
    r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+)\b.*?(?:commId (0x[0-9a-f]+))?.*- Init (?:START|COMPLETE)"
)
# A channel connection: "Channel 00/0 : 3[3] -> 4[0] [send] via ...", older "Ring 00 : 3 -> 4
# via ...", and CollNet's one-rank form "CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA"
# (the peer is the network). Groups 1-5: channel, sub-channel, source, destination, direction.
CHANNEL_WORDS = ("Channel", "Ring", "CollNet", "NVLS")
_CHANNEL_WORD = b"(?:" + b"|".join(w.encode() for w in CHANNEL_WORDS) + b")"
_CONNECTION = (
    _CHANNEL_WORD + rb" (\d+)(?:/(\d+))? : (\d+)(?:\[[0-9a-fx]+\])?(?: -> (\d+)"
    rb"(?:\[[0-9a-fx]+\])?)?(?: \[(send|receive)\])? via "
)
CONNECTION_B = re.compile(_CONNECTION)
MARKER = re.compile(re.escape(RUN_MARKER) + r" run_id=(\S+)")
MARKER_B = RUN_MARKER.encode()

INFO_TAG = b"NCCL INFO "
WARN_TAG = b"NCCL WARN"
# An INFO message apply_message reads, matched at its tag; groups 1-5 as in CONNECTION_B, group 6
# the rest of a connection line after "via ".
TAGGED = re.compile(
    rb"NCCL INFO (?:" + _CONNECTION + rb"([^\n]*)"
    rb"|NET/OFI (?:Selected|Initializing|Using aws|Unable|Couldn't|OFI)|NET/Plugin|Using network"
    rb"|Using internal|NCCL version|comm 0x|ncclComm|Initialized NET plugin|Assigned NET plugin"
    rb"|Failed to initialize NET plugin|NET/Socket : Using|CUDA Dev)"
)
# A tagged communicator line that apply_message reads only with one of COMM_SHAPES in it (not,
# e.g., "comm 0x... Destroy COMPLETE").
COMM_STARTS = (b"comm 0x", b"ncclComm")
COMM_SHAPES = (b"nNodes", b"- Init")
# A line without an NCCL tag that is an NCCL message all the same: from excerpts without
# NCCL's prefix, the bare version line of older releases, the training module's run markers.
# (Ring listings and other lines about IB carry nothing the check uses, so a bare one is not read.)
UNPREFIXED = re.compile(
    _CHANNEL_WORD + rb" \d+(?:/\d+)? : \d[^\n]* via |NCCL version|NET/(?:OFI|Plugin|Socket : Using)"
    rb"|Using network|CUDA Dev \d+\[\d+\], [^\n]*NIC distance|comm 0x[0-9a-f]+ rank [^\n]*(?:nNodes|- Init)|" + MARKER_B
)
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
    # aws-ofi-nccl 1.0-1.1 (ofi_init) when libfabric offers no efa provider: it returns an error
    # and NCCL falls back (https://github.com/aws/aws-ofi-nccl, src/nccl_ofi_net.c of those releases)
    "Only EFA provider is supported",
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
    # (process, thread id) and (process, None) -> the comm pointer that thread (any thread of the
    # process) last initialised: a channel line belongs to it (see comm_at)
    thread_comm: dict[tuple, str] = field(default_factory=dict)

    def process(self, key: ProcKey) -> ProcessInfo:
        info = self.processes.get(key)
        if info is None:
            info = self.processes[key] = ProcessInfo(key)
        return info

    def comm_at(self, thread: tuple, any_thread: tuple) -> str | None:
        """The comm a channel line of ``thread`` = (process, tid) belongs to now: the one that
        thread initialised last, else the one its process (``any_thread`` = (process, None)) did."""
        return self.thread_comm.get(thread) or self.thread_comm.get(any_thread)

    def connect(self, thread: tuple, any_thread: tuple, proc: ProcKey, rest: tuple, line: LazyLine) -> str | None:
        """Keep a channel connection, once per (process, comm, transport, channel, ranks); ``rest``
        is (the transport after "via " as bytes, then CONNECTION_B's groups). Returns its comm."""
        comm = self.comm_at(thread, any_thread)
        key = (proc, comm, *rest)
        if key not in self.connections:
            via, channel, _sub, src, dst, direction = rest
            self.connections[key] = Connection(
                proc,
                comm,
                int(channel),
                int(src),
                int(dst) if dst else None,
                direction.decode() if direction else None,
                classify_transport(via.decode("utf-8", "replace")),
                line.ev(),
            )
        return comm


def clip(text: str) -> str:
    return text if len(text) <= MAX_LINE_TEXT else text[: MAX_LINE_TEXT - 3] + "..."


def identity(prefix: str, file_label: str) -> tuple[ProcKey, int | None]:
    """(process key, thread id) from whatever comes before the NCCL message."""
    # the last match is the one next to the message (launchers add their own before)
    m = next(reversed(list(_NCCL_PREFIX.finditer(prefix))), None)
    if m is not None:
        return (m.group(1), int(m.group(2))), int(m.group(3))
    r = _RAY_PREFIX.search(prefix)
    if r is not None:
        return (f"ray:{r.group(2) or '?'}", int(r.group(1))), None
    return (f"file:{file_label}", None), None


def via_text(rest: bytes) -> bytes:
    """The transport after 'via ', without a trailing comm pointer or Ray's dedup note."""
    end = len(rest)
    for stop in (b" comm 0x", b" [repeated "):
        k = rest.find(stop)
        if 0 <= k < end:
            end = k
    return rest[:end].strip()


class LazyLine:
    """A line whose text is decoded only if it becomes evidence."""

    __slots__ = ("file", "line", "raw")

    def __init__(self, file: str, line: int, raw: bytes) -> None:
        self.file, self.line, self.raw = file, line, raw

    @property
    def text(self) -> str:
        return clip(self.raw.decode("utf-8", "replace").strip())

    def ev(self, why: str = "") -> Evidence:
        return Evidence(self.file, self.line, self.text, why)


def apply_message(state: ScanState, proc: ProcKey, tid: int | None, msg: str, warn: bool, ev: LazyLine) -> None:
    """Fold one NCCL message into the aggregates."""
    if warn:
        why = None
        if "NET/OFI" in msg or "OFI plugin" in msg:
            if _OFI_FAIL_RE.search(msg):
                why = "aws-ofi-nccl failed to start"
        elif "Failed to initialize any NET plugin" in msg:
            why = "no usable network plugin"
        _fold_warning(state, ev, proc, why)
        return
    if msg.startswith(CHANNEL_WORDS):
        raw = msg.encode()
        conn = CONNECTION_B.match(raw)
        if conn is None:
            return  # ring/tree listings ("Channel 00/02 :    0   1 ...") carry no transport
        state.connect((proc, tid), (proc, None), proc, (via_text(raw[conn.end() :]), *conn.groups()), ev)
        return
    if msg.startswith("NCCL version"):
        m = _VERSION.match(msg)
        if m is not None:
            info = state.process(proc)
            if info.nccl_version is None:  # a process prints its version once
                info.nccl_version = m.group(1)
        return
    if msg.startswith("NET/"):
        _apply_net(state, proc, msg, ev)
        return
    if msg.startswith(("Using", "Assigned", "Initialized")):
        m = _NETWORK.match(msg)
        if m is not None:
            name = m.group(1).strip()
            info = state.process(proc)
            if name not in info.networks:
                info.networks[name] = ev.ev("network chosen")
        return
    if msg.startswith("CUDA Dev"):
        m = _NIC_DISTANCE.match(msg)
        if m is not None:
            info = state.process(proc)
            info.networks.setdefault(m.group(1), ev.ev("network chosen"))
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
            ranks = (int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            _fold_comm_nodes(state, ev, proc, tid, m.group(1), *ranks)
        return
    if "comm 0x" in msg:
        m = _COMM_INIT.search(msg)
        if m is not None:
            start = msg.endswith("Init START")
            _fold_comm_init(state, ev, proc, tid, m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), start)


def _apply_net(state: ScanState, proc: ProcKey, msg: str, ev: LazyLine) -> None:
    """A "NET/..." message: aws-ofi-nccl's provider, start or failure, the socket transport's
    start, the net plugin found or not."""
    info = state.process(proc)
    if msg.startswith("NET/OFI"):
        m = _PROVIDER.match(msg)
        if m is not None:
            args = (proc, m.group(1), m.group(2), int(m.group(3)) if m.group(3) else None)
            _fold_provider(state, ev, *args)
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
    if msg.startswith("NET/Socket : Using"):
        if info.socket_interface is None:
            info.socket_interface = ev.ev("NCCL's socket transport started")
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


def _fold_warning(state: ScanState, ev: LazyLine, proc: ProcKey, why: str | None) -> None:
    """An NCCL WARN line; ``why`` when it says the network plugin failed."""
    state.warning_count += 1
    if len(state.warnings) < MAX_WARNINGS:
        state.warnings.append(ev.ev())
    if why is not None:
        info = state.process(proc)
        if info.ofi_failure is None:
            info.ofi_failure = ev.ev(why)


def _fold_provider(
    state: ScanState, ev: LazyLine, proc: ProcKey, provider: str, fabric: str | None, nics: int | None
) -> None:
    """ "NET/OFI Selected provider is ...": the last provider a process names counts."""
    info = state.process(proc)
    if info.provider_evidence is None or info.provider != provider:
        info.provider, info.fabric, info.nics = provider, fabric, nics
        info.provider_evidence = ev.ev("libfabric provider")


def _fold_comm_nodes(
    state: ScanState,
    ev: LazyLine,
    proc: ProcKey,
    tid: int | None,
    ptr: str,
    rank: int,
    nranks: int,
    nnodes: int,
    local_ranks: int,
) -> None:
    """ "comm 0x... rank R nRanks N nNodes M localRanks L": the comm's shape; its thread's
    next channel lines belong to it."""
    c = _comm(state, proc, ptr)
    if c.nnodes != nnodes or c.evidence is None or c.evidence.why == "communicator":
        c.evidence = ev.ev(f"nNodes {nnodes}")
    c.rank, c.nranks = rank, nranks
    c.nnodes, c.local_ranks = nnodes, local_ranks
    state.thread_comm[(proc, tid)] = ptr
    state.thread_comm[(proc, None)] = ptr


def _fold_comm_init(
    state: ScanState,
    ev: LazyLine,
    proc: ProcKey,
    tid: int | None,
    ptr: str,
    rank: int,
    nranks: int,
    comm_id: str | None,
    start: bool,
) -> None:
    """ "ncclCommInitRank... comm 0x... rank R nranks N ... - Init START|COMPLETE"."""
    c = _comm(state, proc, ptr)
    c.rank, c.nranks = rank, nranks
    if comm_id:
        c.comm_id = comm_id
    if c.evidence is None:
        c.evidence = ev.ev("communicator")
    if start or c.nnodes is None:
        state.thread_comm[(proc, tid)] = ptr
        state.thread_comm[(proc, None)] = ptr


def _comm(state: ScanState, proc: ProcKey, ptr: str) -> CommInfo:
    c = state.comms.get((proc, ptr))
    if c is None:
        c = state.comms[(proc, ptr)] = CommInfo(proc, ptr)
    return c


class LineReader:
    """Reads the lines of one file into a ScanState, one at a time, and counts them.

    Only lines in scope count: the whole file when ``in_scope_at_start``; otherwise (a combined
    log given a run id) the lines after a ``run_marker(run_id)`` line and before a marker of
    another run. A plain loop: the largest real log is tens of kB, and bench/results/2026-12-06-local/README.md
    ("NCCL check: the line loop") states the rate it meets.
    """

    def __init__(self, label: str, state: ScanState, run_id: str | None, in_scope_at_start: bool) -> None:
        self.label, self.state, self.run_id = label, state, run_id
        self.scoped = run_id is not None and not in_scope_at_start  # markers move the scope
        self.in_scope = in_scope_at_start
        self.lines = 0  # lines read so far
        self.nccl_lines = 0  # NCCL lines in scope
        self.skipped = 0  # NCCL lines out of scope

    def line(self, raw: bytes) -> None:
        """Read the next line of the file."""
        self.lines += 1
        if b"\x1b" in raw:
            raw = ANSI.sub(b"", raw)
        i = raw.find(INFO_TAG)
        k = raw.find(WARN_TAG) if i < 0 else -1  # a line with both is an INFO line
        if i < 0 and k < 0:
            m = UNPREFIXED.search(raw)
            if m is not None:
                self._untagged(raw, m.start())
            return
        n = raw.count(INFO_TAG) + raw.count(WARN_TAG)
        if not self.in_scope:
            self.skipped += n
            return
        self.nccl_lines += n
        if k >= 0:
            self._message(raw, raw[:k], raw[k + len(WARN_TAG) :], True)
            return
        m = TAGGED.match(raw, i)
        if m is None:
            return
        if m.group(6) is not None:
            self._connection(raw, raw[:i], m.group(1, 2, 3, 4, 5), via_text(m.group(6)))
            return
        j = i + len(INFO_TAG)
        if raw.startswith(COMM_STARTS, j) and all(raw.find(s, j) < 0 for s in COMM_SHAPES):
            return  # e.g. "comm 0x... Destroy COMPLETE": nothing about the network
        self._message(raw, raw[:i], raw[j:], False)

    def _untagged(self, raw: bytes, start: int) -> None:
        """A line without an NCCL tag whose text matched UNPREFIXED at ``start``."""
        if raw.startswith(MARKER_B, start):
            self._marker(raw)
        elif not self.in_scope:
            self.skipped += 1
        else:
            self.nccl_lines += 1
            m = CONNECTION_B.match(raw, start)
            if m is not None:  # a channel connection without NCCL's prefix
                self._connection(raw, raw[:start], m.groups(), via_text(raw[m.end() :]))
            else:
                self._message(raw, raw[:start], raw[start:], False)

    def _marker(self, raw: bytes) -> None:
        """A run-marker line; it moves the scope of a combined log."""
        text = raw.decode("utf-8", "replace").strip()
        mk = MARKER.search(text)
        if mk is None:
            return
        rid = mk.group(1)
        self.state.markers.setdefault(rid, Evidence(self.label, self.lines, clip(text), "run marker"))
        if self.scoped:
            self.in_scope = rid == self.run_id

    def _message(self, raw: bytes, prefix: bytes, msg_b: bytes, warn: bool) -> None:
        msg = msg_b.decode("utf-8", "replace").strip()
        if "[repeated" in msg:
            msg = REPEATED.sub("", msg)
        proc, tid = identity(prefix.decode("utf-8", "replace"), self.label)
        apply_message(self.state, proc, tid, msg, warn, LazyLine(self.label, self.lines, raw))

    def _connection(self, raw: bytes, prefix: bytes, groups: tuple, via: bytes) -> None:
        """A channel connection: it belongs to the comm its thread initialised last (ScanState.connect)."""
        proc, tid = identity(prefix.decode("utf-8", "replace"), self.label)
        self.state.connect((proc, tid), (proc, None), proc, (via, *groups), LazyLine(self.label, self.lines, raw))
