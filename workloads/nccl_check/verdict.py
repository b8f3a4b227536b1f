"""From the parsed aggregates to a verdict with its cause and evidence (pure functions).

Rules (``require``):
- Each channel connection is classed intra-node (P2P, SHM, NVLS; or NET inside a communicator
  whose nNodes is 1; or NET between two ranks known to be on one host) or inter-node (NET or
  CollNet otherwise: NCCL uses the network between nodes unless P2P and SHM are disabled).
- efa: pass only when at least one inter-node connection went over NET through Libfabric
  (aws-ofi-nccl) with the libfabric provider efa, and no inter-node connection went over Socket,
  IB/RoCE, another network or another provider. The provider is the process's own "Selected
  provider is ..." line; a process that did not log one borrows the run's only provider.
- socket: pass only when inter-node connections exist and all went over NET/Socket.
- any: pass when any inter-node connection exists.
- No inter-node connection: inconclusive ("no inter-node traffic, EFA not proven"), never a
  pass. Two exceptions, both failures, where a process chose a network the requirement rules out
  (Socket, IB, a failed aws-ofi-nccl, a non-efa provider) and no process chose one it allows:
  the logs show several hosts (processes on two hosts or more, or a communicator with nNodes > 1),
  for a multi-host communicator whose only network is, say, Socket cannot have used EFA; or no
  channel line was logged at all and not every communicator logged says nNodes 1.
A process's network is what it named ("Using network X", NCCL 2.4's "X NIC distance"), else
Socket when NCCL's socket transport started ("NET/Socket : Using [0]eth0") and no libfabric
provider was selected.
"""

from __future__ import annotations

from dataclasses import dataclass

from .parser import ScanState, network_family
from .records import CommInfo, Connection, Evidence, ProcessInfo, ProcKey

REQUIREMENTS = ("efa", "socket", "any")
MAX_EVIDENCE_CONNECTIONS = 6

FIX_PLUGIN_MISSING = (
    "NCCL found no net plugin and fell back to TCP sockets: the image lacks aws-ofi-nccl "
    "(libnccl-net.so / libnccl-net-ofi.so) or NCCL_NET_PLUGIN names a library that is not on "
    "LD_LIBRARY_PATH"
)
FIX_OFI_FAILED = (
    "aws-ofi-nccl is installed but failed to start, so NCCL fell back to TCP sockets: the pod "
    "sees no EFA device (request vpc.amazonaws.com/efa and check /dev/infiniband/uverbs*) or "
    "FI_PROVIDER excludes efa"
)
FIX_SOCKET = (
    "NCCL sent inter-node traffic over TCP sockets (NET/Socket): the pod requests no "
    "vpc.amazonaws.com/efa, the image lacks aws-ofi-nccl, or NCCL_NET=Socket is set"
)
FIX_COLLNET = (
    "NCCL reduced through a CollNet plugin (in-network reduction such as SHARP on InfiniBand), not "
    "over EFA: EFA has no CollNet; unset NCCL_COLLNET_ENABLE and drop the CollNet plugin from the image"
)
FIX_IB = (
    "NCCL used InfiniBand/RoCE verbs (NET/IB), not EFA: EFA is reached only through "
    "aws-ofi-nccl (NET/Libfabric); this is an IB/RoCE fabric or NCCL_NET=IB is forced"
)


@dataclass(frozen=True)
class Decision:
    """The verdict, its one-line cause with the usual fix, and the deciding lines."""

    verdict: str
    cause: str
    evidence: tuple[Evidence, ...]


def classify_connections(state: ScanState) -> None:
    """Set ``scope`` ('intra' or 'inter') and ``scope_reason`` on every connection."""
    rank_host = _rank_hosts(state)
    comms_of: dict[ProcKey, list[CommInfo]] = {}
    for c in state.comms.values():
        comms_of.setdefault(c.proc, []).append(c)
    for conn in state.connections.values():
        comm = state.comms.get((conn.proc, conn.comm)) if conn.comm else None
        if comm is None and len(comms_of.get(conn.proc, ())) == 1:
            # NCCL < 2.19 logs the comm line only after the channels ("Init COMPLETE"); a
            # process with a single communicator can only mean that one.
            comm = comms_of[conn.proc][0]
        kind = conn.transport.kind
        if kind in ("P2P", "SHM", "NVLS"):
            conn.scope, conn.scope_reason = "intra", f"{kind} works inside one node"
            continue
        if kind == "OTHER":
            conn.scope, conn.scope_reason = "intra", "transport is not a network"
            continue
        if comm is not None and comm.nnodes == 1:
            conn.scope, conn.scope_reason = "intra", "communicator has nNodes 1"
            continue
        if kind == "COLLNET":
            conn.scope, conn.scope_reason = "inter", "CollNet reduces in the network, across nodes"
            continue
        hosts = _endpoint_hosts(conn, comm, rank_host)
        if hosts is not None and hosts[0] == hosts[1]:
            conn.scope, conn.scope_reason = "intra", f"both ranks on {hosts[0]}"
        elif hosts is not None:
            conn.scope, conn.scope_reason = "inter", f"ranks on {hosts[0]} and {hosts[1]}"
        else:
            conn.scope, conn.scope_reason = "inter", "network transport between ranks"


def _rank_hosts(state: ScanState) -> dict:
    """(commId or (nranks,), rank) -> set of hosts, from the communicator lines."""
    table: dict = {}
    for c in state.comms.values():
        if c.rank is None or c.proc[1] is None or c.proc[0].startswith("file:"):
            continue
        key = (c.comm_id or ("nranks", c.nranks), c.rank)
        table.setdefault(key, set()).add(c.proc[0])
    return table


def _endpoint_hosts(conn: Connection, comm: CommInfo | None, table: dict) -> tuple[str, str] | None:
    group = None
    if comm is not None:
        group = comm.comm_id or ("nranks", comm.nranks)
    if group is None:
        return None

    def host(rank: int) -> str | None:
        hs = table.get((group, rank))
        return next(iter(hs)) if hs and len(hs) == 1 else None

    if conn.dst is None:
        return None
    a, b = host(conn.src), host(conn.dst)
    return (a, b) if a and b else None


def _provider_for(proc: ProcessInfo | None, run_providers: set[str]) -> str | None:
    if proc is not None and proc.provider:
        return proc.provider
    return next(iter(run_providers)) if len(run_providers) == 1 else None


def _is_efa(provider: str | None) -> bool:
    return provider is not None and provider.split(";")[0].lower() == "efa"


def decide(state: ScanState, require: str) -> Decision:
    """Decide pass / fail / inconclusive for ``require`` from scanned, in-scope content."""
    if require not in REQUIREMENTS:
        raise ValueError(f"require must be one of {REQUIREMENTS}, got {require!r}")
    classify_connections(state)
    conns = list(state.connections.values())
    inter = [c for c in conns if c.scope == "inter"]
    run_providers = {p.provider for p in state.processes.values() if p.provider}

    if require == "any":
        if inter:
            return Decision(
                "pass",
                f"{len(inter)} inter-node connection(s) seen ({_transport_summary(inter)})",
                _conn_evidence(inter, "inter-node connection"),
            )
        return _no_inter(state, conns, require)

    good, bad, unknown = _sort_inter(state, inter, require, run_providers)

    if bad:
        cause = _bad_cause(state, bad, run_providers, require)
        if good:
            cause = (
                f"mixed transports: {len(good)} inter-node connection(s) over "
                f"{'EFA' if require == 'efa' else 'Socket'} but {len(bad)} over "
                f"{_transport_summary(bad)}; {cause}"
            )
        evidence = list(_conn_evidence(bad, "inter-node connection not over " + require))
        evidence += _proc_evidence(state, [c.proc for c in bad])
        if good:
            evidence += _conn_evidence(good, f"inter-node connection over {require}", limit=2)
        evidence += state.warnings[:5]
        return Decision("fail", cause, tuple(_dedupe(evidence)))

    if require == "socket":
        if good:
            return Decision(
                "pass",
                f"{len(good)} inter-node connection(s), all over TCP sockets (NET/Socket)",
                _conn_evidence(good, "inter-node connection over Socket"),
            )
        return _no_inter(state, conns, require)

    if good and not unknown:
        provs = sorted({_provider_for(state.processes.get(c.proc), run_providers) or "" for c in good})
        evidence = list(_conn_evidence(good, "inter-node connection over EFA"))
        evidence += [p.provider_evidence for p in state.processes.values() if p.provider_evidence][:3]
        gdr = sum(1 for c in good if c.transport.gdrdma)
        return Decision(
            "pass",
            f"{len(good)} inter-node connection(s), all over aws-ofi-nccl (NET/Libfabric) with provider "
            f"{', '.join(provs)}" + (f", {gdr} with GPUDirect RDMA" if gdr else ", without GPUDirect RDMA"),
            tuple(_dedupe(evidence)),
        )
    if unknown:
        return Decision(
            "inconclusive",
            "inter-node connections went over NET/Libfabric but no process logged which libfabric provider "
            "it selected ('NET/OFI Selected provider is ...'), so EFA is not proven: keep NCCL_DEBUG=INFO with "
            "the INIT and NET subsystems and read every rank's log",
            _conn_evidence(unknown, "provider not logged"),
        )
    return _no_inter(state, conns, require)


@dataclass(frozen=True)
class ChannelClaim:
    """What the log's inter-node channel lines claim of one host: how many went over one network family
    (``classify_transport``'s net: libfabric, socket, ib, other) and the first line that says so. The host is
    the process's as the log names it (NCCL's prefix, ``ray:<ip>`` from Ray's, ``file:<name>`` without)."""

    host: str
    family: str
    connections: int
    evidence: Evidence

    def to_dict(self) -> dict:
        return {
            "host": self.host,
            "family": self.family,
            "connections": self.connections,
            "evidence": self.evidence.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> ChannelClaim:
        e = d["evidence"]
        evidence = Evidence(str(e["file"]), int(e["line"]), str(e["text"]), str(e.get("why", "")))
        return cls(str(d["host"]), str(d["family"]), int(d["connections"]), evidence)


def channel_claims(state: ScanState) -> tuple[ChannelClaim, ...]:
    """The inter-node channel connections of ``state`` by host and network family (NET only: CollNet's peer is
    the network itself), in host order; what the counter witness cross-checks (witnesses.cross_check)."""
    classify_connections(state)
    found: dict[tuple[str, str], list[Connection]] = {}
    for c in state.connections.values():
        if c.scope == "inter" and c.transport.kind == "NET":
            found.setdefault((c.proc[0], c.transport.net or "other"), []).append(c)
    claims = []
    for (host, family), conns in sorted(found.items()):
        first = min(conns, key=lambda c: (c.evidence.file, c.evidence.line)).evidence
        why = f"inter-node channel via NET/{conns[0].transport.net_name}"
        claims.append(ChannelClaim(host, family, len(conns), Evidence(first.file, first.line, first.text, why)))
    return tuple(claims)


def networks_of(p: ProcessInfo) -> dict[str, Evidence]:
    """The networks a process chose (name -> first line), see the module's docstring."""
    if p.networks or p.socket_interface is None or p.provider is not None:
        return p.networks
    return {"Socket": p.socket_interface}


def multi_host(state: ScanState) -> tuple[list[str], list[Evidence]]:
    """Hosts the logged processes ran on (when two or more) and communicators with nNodes > 1."""
    hosts = sorted({p.host for p in state.processes.values() if not p.host.startswith("file:") and p.host != "ray:?"})
    wide = [c.evidence for c in state.comms.values() if c.nnodes and c.nnodes > 1 and c.evidence]
    return (hosts if len(hosts) > 1 else []), wide


def _sort_inter(
    state: ScanState, inter: list[Connection], require: str, run_providers: set[str]
) -> tuple[list[Connection], list[Connection], list[Connection]]:
    """Inter-node connections as (good, bad, unknown) for ``require`` 'efa' or 'socket'; unknown:
    over Libfabric with no provider logged."""
    good: list[Connection] = []
    bad: list[Connection] = []
    unknown: list[Connection] = []
    for c in inter:
        t = c.transport
        if require == "socket":
            (good if t.net == "socket" else bad).append(c)
            continue
        if t.net == "libfabric":
            prov = _provider_for(state.processes.get(c.proc), run_providers)
            if prov is None:
                unknown.append(c)
            elif _is_efa(prov):
                good.append(c)
            else:
                bad.append(c)
        else:
            bad.append(c)
    return good, bad, unknown


def _no_inter(state: ScanState, conns: list[Connection], require: str) -> Decision:
    """No inter-node connection: fail on a ruled-out network when the logs show several hosts, or
    show no channel line and not every comm says nNodes 1; else inconclusive."""
    nnodes = [c.nnodes for c in state.comms.values() if c.nnodes is not None]
    single_node = bool(nnodes) and all(n == 1 for n in nnodes)
    procs = list(state.processes.values())
    offenders = [p for p in procs if _rules_out(p, require)] if require != "any" else []
    allowed = [p for p in procs if _allows(p, require)]
    hosts, wide = multi_host(state)
    if offenders and not allowed and (hosts or wide):
        # Several hosts and no network but a ruled-out one: their traffic cannot have gone over
        # what is required, channel lines or not (a PASS still needs them).
        where = f"processes on {len(hosts)} hosts ({', '.join(hosts[:4])})" if hosts else "a communicator"
        span = " with nNodes > 1" if wide else ""
        chosen = ", ".join(sorted({c for p in offenders for c in _choices(p)}))
        cause = (
            f"{where}{span} chose only {chosen}, so this multi-host run cannot have used {_what(require)}: "
            + _proc_cause(offenders[0], require)
        )
        evidence = _proc_evidence(state, [p.key for p in offenders], limit=3) + wide[:2] + state.warnings[:5]
        return Decision("fail", cause, tuple(_dedupe(evidence)))
    if offenders and not single_node and not conns:
        # Without channel lines the network each process chose is the only evidence; it fails
        # the run unless the communicators show a single node.
        cause = _proc_cause(offenders[0], require)
        evidence = _proc_evidence(state, [p.key for p in offenders]) + state.warnings[:5]
        return Decision(
            "fail",
            cause + " (no channel lines were logged; this is what the processes chose)",
            tuple(_dedupe(evidence)),
        )
    what = _what(require)
    evidence = [c.evidence for c in state.comms.values() if c.evidence and c.nnodes is not None][:4]
    evidence += _conn_evidence([c for c in conns if c.scope == "intra"], "intra-node connection", limit=4)
    evidence += _proc_evidence(state, list(state.processes), limit=2)
    if single_node:
        reason = "every communicator reports nNodes 1"
    elif conns:
        reason = "all connections are intra-node"
    else:
        reason = "no channel connection was logged (was NCCL_DEBUG=INFO set, and did a collective run?)"
    if offenders:
        networks = sorted({n for p in offenders for n in networks_of(p)}) or ["a failed net plugin"]
        reason += f"; and a multi-node run would use {', '.join(networks)}, not {what}"
    return Decision("inconclusive", f"no inter-node traffic, {what} not proven: {reason}", tuple(_dedupe(evidence)))


def _choices(p: ProcessInfo) -> list[str]:
    """What a process chose, in words: its networks, else its provider or its failed plugin."""
    if networks_of(p):
        return list(networks_of(p))
    if p.provider:
        return [f"libfabric provider {p.provider}"]
    return ["a failed aws-ofi-nccl" if p.ofi_failure else "no network"]


def _what(require: str) -> str:
    return "EFA" if require == "efa" else ("TCP sockets" if require == "socket" else "the transport")


def _allows(p: ProcessInfo, require: str) -> bool:
    """The process chose a network the requirement allows (whatever else it says)."""
    families = {network_family(n) for n in networks_of(p)}
    if require == "socket":
        return "socket" in families
    return "libfabric" in families or _is_efa(p.provider)


def _rules_out(p: ProcessInfo, require: str) -> bool:
    families = {network_family(n) for n in networks_of(p)}
    if require == "socket":
        return bool(families) and "socket" not in families
    if p.ofi_failure is not None:
        return True
    if p.provider and not _is_efa(p.provider):
        return True
    return bool(families) and "libfabric" not in families


def _proc_cause(p: ProcessInfo, require: str) -> str:
    if require == "socket":
        return (
            f"expected TCP sockets for the baseline but {p.host} chose {', '.join(sorted(networks_of(p)))}: "
            "set NCCL_NET=Socket for the TCP side of the benchmark"
        )
    if p.plugin_missing is not None and p.plugin is None and p.provider is None:
        return FIX_PLUGIN_MISSING
    if p.ofi_failure is not None:
        return FIX_OFI_FAILED
    if p.provider and not _is_efa(p.provider):
        return _provider_cause(p.provider)
    families = {network_family(n) for n in networks_of(p)}
    if "ib" in families:
        return FIX_IB
    if p.plugin_missing is not None:
        return FIX_PLUGIN_MISSING
    return FIX_SOCKET


def _provider_cause(provider: str) -> str:
    return (
        f"aws-ofi-nccl ran on libfabric provider '{provider}', not efa: no EFA device is visible in the pod "
        f"(no vpc.amazonaws.com/efa request, or /dev/infiniband not mounted) or FI_PROVIDER is set to "
        f"'{provider.split(';')[0]}'"
    )


def _bad_cause(state: ScanState, bad: list[Connection], run_providers: set[str], require: str) -> str:
    # The point-to-point network is the cause to name; CollNet comes on top of one.
    c = next((b for b in bad if b.transport.kind != "COLLNET"), bad[0])
    proc = state.processes.get(c.proc)
    if require == "socket":
        return (
            f"expected TCP sockets for the baseline but inter-node traffic went over "
            f"{_transport_summary(bad)}: set NCCL_NET=Socket for the TCP side of the benchmark"
        )
    fam = c.transport.net
    if fam == "socket":
        if proc is not None and proc.plugin_missing is not None and proc.plugin is None:
            return FIX_PLUGIN_MISSING
        if proc is not None and proc.ofi_failure is not None:
            return FIX_OFI_FAILED
        return FIX_SOCKET
    if fam == "ib":
        return FIX_IB
    if c.transport.kind == "COLLNET":
        return FIX_COLLNET
    if fam == "libfabric":
        return _provider_cause(_provider_for(proc, run_providers) or "?")
    return (
        f"inter-node traffic went over {c.transport.raw}, not aws-ofi-nccl with provider efa: "
        "check NCCL_NET and NCCL_NET_PLUGIN"
    )


def _transport_summary(conns: list[Connection]) -> str:
    counts: dict[str, int] = {}
    for c in conns:
        t = c.transport
        name = f"NET/{t.net_name}" if t.kind == "NET" else t.kind
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x{k}" for n, k in sorted(counts.items()))


def _conn_evidence(conns: list[Connection], why: str, limit: int = MAX_EVIDENCE_CONNECTIONS) -> tuple[Evidence, ...]:
    out = []
    for c in sorted(conns, key=lambda c: (c.evidence.file, c.evidence.line))[:limit]:
        out.append(Evidence(c.evidence.file, c.evidence.line, c.evidence.text, f"{why} ({c.scope_reason})"))
    return tuple(out)


def _proc_evidence(state: ScanState, keys: list[ProcKey], limit: int = 2) -> list[Evidence]:
    out: list[Evidence] = []
    seen = []
    for k in keys:
        if k in seen:
            continue
        seen.append(k)
        p = state.processes.get(k)
        if p is None:
            continue
        for e in (p.plugin_missing, p.ofi_failure, p.provider_evidence):
            if e is not None:
                out.append(e)
        out += list(networks_of(p).values())[:2]
        if len(seen) >= limit:
            break
    return out


def _dedupe(items: list[Evidence]) -> list[Evidence]:
    seen = set()
    out = []
    for e in items:
        key = (e.file, e.line)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out
