"""The records the check builds from a log (evidence lines, processes, communicators, channel
connections, file statuses) and shares with the verdict and the report (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass, field

# A process is named by the host and pid NCCL prints in its prefix ("host:pid:tid [dev]");
# lines without that prefix fall back to Ray's "(Worker pid=N, ip=A)" prefix, and lines with
# neither to their file (pid None).
ProcKey = tuple[str, "int | None"]


@dataclass(frozen=True)
class Evidence:
    """One log line that supports a conclusion: where it is, what it says, why it matters."""

    file: str
    line: int
    text: str
    why: str = ""

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "text": self.text, "why": self.why}

    def render(self) -> str:
        suffix = f"   <- {self.why}" if self.why else ""
        return f"{self.file}:{self.line}: {self.text}{suffix}"


@dataclass(frozen=True)
class Transport:
    """What a channel connection's 'via ...' says, classified.

    kind: P2P, SHM, NVLS (intra-node by construction), NET or COLLNET (a network), OTHER.
    net: for NET, the family of the network plugin: libfabric (aws-ofi-nccl), socket, ib, other.
    """

    raw: str
    kind: str
    net: str | None
    net_name: str | None
    gdrdma: bool


@dataclass
class Connection:
    """One distinct channel connection seen in the logs (the first line that showed it)."""

    proc: ProcKey
    comm: str | None
    channel: int
    src: int
    dst: int | None  # None for CollNet, whose peer is the network itself
    direction: str | None
    transport: Transport
    evidence: Evidence
    scope: str = "unknown"  # "intra" or "inter", set by the verdict
    scope_reason: str = ""


@dataclass
class CommInfo:
    """A communicator as one process saw it."""

    proc: ProcKey
    ptr: str
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    comm_id: str | None = None
    evidence: Evidence | None = None


@dataclass
class ProcessInfo:
    """What one process's NCCL said about its network stack."""

    key: ProcKey
    nccl_version: str | None = None
    plugin: str | None = None  # e.g. "aws-ofi-nccl 1.11.0-aws"
    plugin_evidence: Evidence | None = None
    plugin_missing: Evidence | None = None
    ofi_failure: Evidence | None = None
    provider: str | None = None
    fabric: str | None = None
    nics: int | None = None
    provider_evidence: Evidence | None = None
    networks: dict[str, Evidence] = field(default_factory=dict)  # network name -> first line
    # "NET/Socket : Using [0]eth0:...": NCCL's socket transport started (the network only when
    # no other is named; see verdict.networks_of)
    socket_interface: Evidence | None = None

    @property
    def host(self) -> str:
        return self.key[0]

    @property
    def pid(self) -> int | None:
        return self.key[1]

    def to_dict(self) -> dict:
        def ev(e: Evidence | None) -> dict | None:
            return e.to_dict() if e else None

        return {
            "host": self.host,
            "pid": self.pid,
            "nccl_version": self.nccl_version,
            "plugin": self.plugin,
            "plugin_missing": ev(self.plugin_missing),
            "ofi_failure": ev(self.ofi_failure),
            "provider": self.provider,
            "fabric": self.fabric,
            "nics": self.nics,
            "networks": sorted(self.networks),
            "socket_interface": ev(self.socket_interface),
        }


@dataclass
class FileStatus:
    """How one input file was read."""

    path: str
    status: str  # read | missing | unreadable | empty | not-nccl | out-of-scope
    named: bool  # named on the command line (True) or found in a directory (False)
    lines: int = 0
    nccl_lines: int = 0  # NCCL messages in scope: one per NCCL INFO/WARN tag, or an untagged NCCL line
    out_of_scope_lines: int = 0  # the same, outside the run's scope
    bytes: int = 0
    detail: str = ""

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "status": self.status,
            "named": self.named,
            "lines": self.lines,
            "nccl_lines": self.nccl_lines,
            "out_of_scope_lines": self.out_of_scope_lines,
            "bytes": self.bytes,
            "detail": self.detail,
        }
