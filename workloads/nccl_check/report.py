"""check_logs: read the logs of one run and return a Report (verdict, cause, evidence)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .parser import ScanState
from .records import Evidence, FileStatus
from .scope import discover
from .stream import scan_stream
from .verdict import REQUIREMENTS, decide

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 2, "bad-input": 3}
_READ_BUFFER = 1 << 20  # large reads: the parser's cost per line, not I/O, should dominate


@dataclass(frozen=True)
class Report:
    """The outcome of one check. ``exit_code`` follows ``EXIT_CODES``."""

    verdict: str
    cause: str
    evidence: list[Evidence]
    require: str
    run_id: str | None
    files: tuple[FileStatus, ...]
    state: ScanState | None = field(default=None, repr=False, compare=False)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def notes(self) -> list[str]:
        """Cautions that do not change the verdict (e.g. several runs read together)."""
        st = self.state
        out = []
        if st is not None and self.run_id is None and len(st.markers) > 1:
            out.append(
                f"the logs hold run markers of {len(st.markers)} runs ({', '.join(sorted(st.markers))}); "
                "pass --run-id to check one of them"
            )
        if st is not None and st.warning_count > len(st.warnings):
            out.append(f"{st.warning_count} NCCL WARN lines, the first {len(st.warnings)} kept")
        return out

    def to_dict(self) -> dict:
        """A JSON-serialisable report: verdict, cause, evidence, files, and what was parsed."""
        st = self.state or ScanState()
        conns = list(st.connections.values())
        by_transport: dict[str, int] = {}
        for c in conns:
            key = f"{c.scope}:{c.transport.kind}" + (f"/{c.transport.net_name}" if c.transport.net_name else "")
            by_transport[key] = by_transport.get(key, 0) + 1
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "require": self.require,
            "run_id": self.run_id,
            "cause": self.cause,
            "notes": self.notes,
            "evidence": [e.to_dict() for e in self.evidence],
            "files": [f.to_dict() for f in self.files],
            "summary": {
                "processes": len(st.processes),
                "communicators": len(st.comms),
                "connections": len(conns),
                "intra_node": sum(1 for c in conns if c.scope == "intra"),
                "inter_node": sum(1 for c in conns if c.scope == "inter"),
                "by_transport": dict(sorted(by_transport.items())),
                "warnings": st.warning_count,
            },
            "processes": [p.to_dict() for p in st.processes.values()],
            "communicators": [
                {
                    "host": c.proc[0],
                    "pid": c.proc[1],
                    "comm": c.ptr,
                    "comm_id": c.comm_id,
                    "rank": c.rank,
                    "nranks": c.nranks,
                    "nnodes": c.nnodes,
                    "local_ranks": c.local_ranks,
                }
                for c in st.comms.values()
            ],
            "connections": [
                {
                    "host": c.proc[0],
                    "pid": c.proc[1],
                    "comm": c.comm,
                    "channel": c.channel,
                    "src": c.src,
                    "dst": c.dst,
                    "direction": c.direction,
                    "via": c.transport.raw,
                    "kind": c.transport.kind,
                    "net": c.transport.net,
                    "gdrdma": c.transport.gdrdma,
                    "scope": c.scope,
                    "scope_reason": c.scope_reason,
                    "file": c.evidence.file,
                    "line": c.evidence.line,
                }
                for c in conns
            ],
            "warnings": [e.to_dict() for e in st.warnings],
            "run_markers": {rid: ev.to_dict() for rid, ev in sorted(st.markers.items())},
        }

    def render(self) -> str:
        """Human text: the verdict, the cause, then the evidence as 'file:line: text'."""
        out = [
            f"NCCL check (require={self.require}"
            + (f", run {self.run_id}" if self.run_id else "")
            + f"): {self.verdict.upper()}",
            f"cause: {self.cause}",
        ]
        out += [f"note: {n}" for n in self.notes]
        if self.evidence:
            out.append("evidence:")
            out += [f"  {e.render()}" for e in self.evidence]
        read = [f for f in self.files if f.status == "read"]
        others = [f for f in self.files if f.status != "read"]
        out.append(f"files: {len(read)} read" + (f", {len(others)} not used" if others else ""))
        for f in others[:10]:
            out.append(f"  {f.path}: {f.status}" + (f" ({f.detail})" if f.detail else ""))
        return "\n".join(out)


def check_logs(paths: Sequence[str | os.PathLike], require: str = "efa", run_id: str | None = None) -> Report:
    """Check NCCL_DEBUG=INFO logs (files or directories) of one run against ``require``.

    Never raises for bad input: missing, unreadable or empty paths, or no NCCL content in
    scope, give the verdict 'bad-input'. ``require`` outside ('efa', 'socket', 'any') raises
    ValueError.
    """
    if require not in REQUIREMENTS:
        raise ValueError(f"require must be one of {REQUIREMENTS}, got {require!r}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]  # one path, not a sequence of characters
    state = ScanState()
    statuses: list[FileStatus] = []
    if not paths:
        return Report("bad-input", "no log path given", [], require, run_id, (), state)
    candidates, problems, skipped = discover(paths, run_id)
    for path, why in problems:
        statuses.append(FileStatus(str(path), why, True, detail="no such file or directory"))
    for path in skipped:
        statuses.append(FileStatus(str(path), "out-of-scope", False, detail=f"path does not name run {run_id}"))
    for cand in candidates:
        status = FileStatus(str(cand.path), "read", cand.named)
        try:
            with open(cand.path, "rb", buffering=_READ_BUFFER) as stream:
                scan_stream(stream, str(cand.path), state, status, run_id, cand.whole)
        except OSError as exc:
            status.status, status.detail = "unreadable", exc.strerror or str(exc)
        else:
            if status.bytes == 0:
                status.status = "empty"
            elif status.nccl_lines == 0 and status.out_of_scope_lines > 0:
                status.status, status.detail = "out-of-scope", f"no line after a marker of run {run_id}"
            elif status.nccl_lines == 0:
                status.status, status.detail = "not-nccl", "no NCCL_DEBUG=INFO line"
        statuses.append(status)

    files = tuple(statuses)
    broken = [f for f in files if f.named and f.status in ("missing", "unreadable")]
    if broken:
        cause = "cannot read " + ", ".join(f"{f.path} ({f.status}: {f.detail})" for f in broken)
        return Report("bad-input", cause, [], require, run_id, files, state)
    if not any(f.status == "read" for f in files):
        if not files:
            cause = "no files found under " + ", ".join(str(p) for p in paths)
        elif run_id is not None and any(f.status == "out-of-scope" for f in files):
            cause = (
                f"no NCCL output of run {run_id}: no file path names it and no combined log holds its "
                f"marker line; check --run-id and the run directory"
            )
        else:
            cause = "no NCCL_DEBUG=INFO output in " + ", ".join(f"{f.path} ({f.status})" for f in files[:5])
        return Report("bad-input", cause, [], require, run_id, files, state)
    decision = decide(state, require)
    return Report(decision.verdict, decision.cause, list(decision.evidence), require, run_id, files, state)
