"""check_logs: read the logs of one run and return a Report (verdict, cause, evidence)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .parser import LineReader, ScanState
from .records import Evidence, FileStatus
from .scope import Candidate, discover, run_of_log_file, special_kind
from .verdict import REQUIREMENTS, Decision, channel_claims, decide

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 2, "bad-input": 3}
_READ_BUFFER = 1 << 20  # large reads: the parser's cost per line, not I/O, should dominate
# No log is larger: the per-rank NCCL_DEBUG=INFO logs of the fixtures are a few kB to tens of kB. A
# larger file is named by mistake, or keeps growing.
MAX_LOG_BYTES = 16 << 30
MAX_LINE_BYTES = 1 << 20  # NCCL's longest lines (ring and tree listings) run to a few kB
# Statuses of a file that make the whole input bad, wherever the file came from.
_BAD_ANYWHERE = ("not-regular", "too-large")


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
        """Cautions that do not change the verdict (e.g. NCCL WARN lines beyond those kept)."""
        st = self.state
        out = []
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
            # What the counter witness cross-checks (witnesses.cross_check): inter-node channels by host and network.
            "channel_claims": [c.to_dict() for c in channel_claims(st)],
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

    Never raises for bad input: missing, unreadable or empty paths, FIFOs, devices and other
    files that are not regular, files larger than MAX_LOG_BYTES, or no NCCL content in scope,
    give the verdict 'bad-input'. ``require`` outside ('efa', 'socket', 'any') raises ValueError.
    """
    if require not in REQUIREMENTS:
        raise ValueError(f"require must be one of {REQUIREMENTS}, got {require!r}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]  # one path, not a sequence of characters
    state = ScanState()
    if not paths:
        return Report("bad-input", "no log path given", [], require, run_id, (), state)
    if run_id is not None and not run_id.strip():
        # "" would turn run scoping off and judge other runs' logs: a false pass.
        return Report("bad-input", f"run id {run_id!r} is empty: pass the run's id", [], require, run_id, (), state)
    candidates, problems, skipped = discover(paths, run_id)
    statuses = [FileStatus(str(path), why, True, detail=detail) for path, why, detail in problems]
    statuses += [FileStatus(str(p), "out-of-scope", False, detail=f"path does not name run {run_id}") for p in skipped]
    statuses += [_read(cand, state, run_id) for cand in candidates]
    files = tuple(statuses)
    bad = _bad_input_cause(files, paths, run_id)
    if bad is not None:
        return Report("bad-input", bad, [], require, run_id, files, state)
    if run_id is None:
        runs = runs_seen(state, files)
        if len(runs) > 1:
            return Report("bad-input", _several_runs(runs), [], require, run_id, files, state)
        run_id = next(iter(runs), None)  # the one run the logs name is the run judged, and named
    decision = _with_empty_logs(decide(state, require), [f for f in files if f.status == "empty"])
    return Report(decision.verdict, decision.cause, list(decision.evidence), require, run_id, files, state)


def _read(cand: Candidate, state: ScanState, run_id: str | None) -> FileStatus:
    """Read one candidate into ``state``; its status says how that went."""
    status = FileStatus(str(cand.path), "read", cand.named)
    try:
        # O_NONBLOCK: a FIFO put in place of the file since it was looked at opens at once
        # instead of waiting for a writer, and is turned down below.
        fd = os.open(cand.path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        status.status, status.detail = "unreadable", exc.strerror or str(exc)
        return status
    with open(fd, "rb", buffering=_READ_BUFFER) as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            status.status = "not-regular"
            status.detail = f"{special_kind(info.st_mode)}, not a regular file: name NCCL log files or their folders"
            return status
        if info.st_size > MAX_LOG_BYTES:
            status.status, status.detail = "too-large", _too_large(info.st_size)
            return status
        reader = LineReader(str(cand.path), state, run_id, cand.whole)
        try:
            for raw in _lines(stream):
                reader.line(raw)
                if stream.tell() > MAX_LOG_BYTES:  # a file that keeps growing is not read forever
                    status.status, status.detail = "too-large", _too_large(stream.tell())
                    return status
        except OSError as exc:
            status.status, status.detail = "unreadable", exc.strerror or str(exc)
            return status
        status.lines, status.bytes = reader.lines, stream.tell()
        status.nccl_lines, status.out_of_scope_lines = reader.nccl_lines, reader.skipped
    if status.bytes == 0:
        status.status, status.detail = "empty", "an empty file"
    elif status.nccl_lines == 0 and status.out_of_scope_lines > 0:
        status.status, status.detail = "out-of-scope", f"no line after a marker of run {run_id}"
    elif status.nccl_lines == 0:
        status.status, status.detail = "not-nccl", "no NCCL_DEBUG=INFO line"
    return status


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of ``stream``; a line longer than MAX_LINE_BYTES is cut there and the rest of it
    dropped, so that one line without a newline cannot fill the memory."""
    while raw := stream.readline(MAX_LINE_BYTES):
        if not raw.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
        yield raw


def runs_seen(state: ScanState, files: Sequence[FileStatus]) -> list[str]:
    """The run ids the logs read name: their run markers and the per-rank file names of the files read."""
    named = (run_of_log_file(Path(f.path).name) for f in files if f.status == "read")
    return sorted(set(state.markers) | {r for r in named if r})


def _several_runs(runs: list[str]) -> str:
    shown = ", ".join(runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
    return (
        f"the logs hold {len(runs)} runs ({shown}): pass --run-id ID to check one; a verdict over several runs "
        "would judge one run on another's evidence"
    )


def _too_large(nbytes: int) -> str:
    return f"{nbytes} bytes or more, larger than any NCCL log ({MAX_LOG_BYTES >> 30} GiB at most): name the log files"


def _bad_input_cause(files: tuple[FileStatus, ...], paths: Sequence, run_id: str | None) -> str | None:
    """Why the input as a whole is bad, or None when there is something to decide on."""
    broken = [f for f in files if (f.named and f.status in ("missing", "unreadable")) or f.status in _BAD_ANYWHERE]
    if broken:
        return "cannot read " + ", ".join(f"{f.path} ({f.status}: {f.detail})" for f in broken[:5])
    if any(f.status == "read" for f in files):
        return None
    if not files:
        return "no files found under " + ", ".join(str(p) for p in paths)
    if run_id is not None and any(f.status == "out-of-scope" for f in files):
        return (
            f"no NCCL output of run {run_id}: no file path names it and no combined log holds its "
            f"marker line; check --run-id and the run directory"
        )
    return "no NCCL_DEBUG=INFO output in " + ", ".join(f"{f.path} ({f.status})" for f in files[:5])


def _with_empty_logs(decision: Decision, empty: list[FileStatus]) -> Decision:
    """An empty log in scope is a finding, not a footnote: that rank logged nothing, so whatever
    the other logs prove says nothing about it. It turns a pass into 'inconclusive' (EFA is not
    proven for that rank; nothing shows it fell back either, which a 'fail' would claim) and is
    named in the cause of any other verdict; a fail stays a fail."""
    if not empty:
        return decision
    names = ", ".join(f.path for f in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
    finding = (
        f"{len(empty)} log(s) in scope are empty ({names}): those ranks wrote no NCCL output (NCCL_DEBUG=INFO "
        "not set there, the worker died before NCCL started, or the file was not copied whole)"
    )
    if decision.verdict == "pass":
        return Decision("inconclusive", f"{finding}; the other logs pass: {decision.cause}", decision.evidence)
    return Decision(decision.verdict, f"{decision.cause}; and {finding}", decision.evidence)
