"""The block reader (scan_stream) against the line reader (scan_lines), on real NCCL lines: the
same aggregates whatever the block size, the order of the lines, their repeats or the scope."""

from __future__ import annotations

import dataclasses
import io
import random
from pathlib import Path

import pytest

from workloads.nccl_check import ScanState, run_marker
from workloads.nccl_check import stream
from workloads.nccl_check.model import FileStatus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
LOGS = sorted(FIXTURES.glob("*.log"))
ALL = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOGS)


def snapshot(state: ScanState, status: FileStatus) -> dict:
    """Everything the reader left behind, as plain data (the comm pointers each thread holds
    included, since later lines depend on them)."""
    return {"state": dataclasses.asdict(state), "status": status.to_dict()}


def by_blocks(data: bytes, run_id: str | None = None, whole: bool = True) -> dict:
    state, status = ScanState(), FileStatus("log", "read", True)
    stream.scan_stream(io.BytesIO(data), "log", state, status, run_id, whole)
    return snapshot(state, status)


def by_lines(data: bytes, run_id: str | None = None, whole: bool = True) -> dict:
    state, status = ScanState(), FileStatus("log", "read", True)
    stream.scan_lines(io.BytesIO(data), "log", state, status, run_id, whole)
    return snapshot(state, status)


def first_difference(a: dict, b: dict, path: str = "") -> str:
    """Where two snapshots differ, for the failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=repr):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{path}/{k!r}")
        return path
    return f"{path}: blocks {a!r} != lines {b!r}"


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_block_reader_matches_line_reader_on_each_fixture(log):
    data = log.read_bytes()
    got, want = by_blocks(data), by_lines(data)
    assert got == want, f"{log.name}: {first_difference(got, want)}"


@pytest.mark.parametrize("block_bytes", [64, 1000, 4096, 1 << 20])
def test_block_reader_matches_line_reader_across_block_boundaries(monkeypatch, block_bytes):
    # Three copies: the repeats take the reader's shortcut for lines it has read before.
    monkeypatch.setattr(stream, "BLOCK_BYTES", block_bytes)
    got, want = by_blocks(ALL * 3), by_lines(ALL * 3)
    assert got == want, f"block {block_bytes} B: {first_difference(got, want)}"


@pytest.mark.parametrize("seed", range(5))
def test_block_reader_matches_line_reader_on_shuffled_lines(monkeypatch, seed):
    # Shuffled and repeated, lines come after other comms, providers and scopes than they first
    # did: a repeat must count again (warnings), move the comm again, or join another comm.
    monkeypatch.setattr(stream, "BLOCK_BYTES", 8192)
    lines = ALL.splitlines(keepends=True) * 2
    random.Random(seed).shuffle(lines)
    data = b"".join(lines)
    got, want = by_blocks(data), by_lines(data)
    assert got == want, f"seed {seed}: {first_difference(got, want)}"


@pytest.mark.parametrize("block_bytes", [512, 1 << 20])
def test_markers_move_the_scope_inside_a_block_as_line_by_line(monkeypatch, block_bytes):
    monkeypatch.setattr(stream, "BLOCK_BYTES", block_bytes)
    socket = (FIXTURES / "socket_plugin_missing_2nodes.log").read_bytes()
    efa = (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_bytes()
    marker = lambda rid: (run_marker(rid, 0) + "\n").encode()  # noqa: E731
    data = socket + marker("r2") + efa + socket + marker("r3") + socket + marker("r2") + efa
    got, want = by_blocks(data, "r2", whole=False), by_lines(data, "r2", whole=False)
    assert got == want, first_difference(got, want)
    counts = (got["status"]["nccl_lines"], got["status"]["out_of_scope_lines"])
    tags = lambda b: b.count(b"NCCL INFO ") + b.count(b"NCCL WARN")  # noqa: E731
    expected = (2 * tags(efa) + tags(socket), 2 * tags(socket))
    assert counts == expected, f"expected (in scope, out of scope) NCCL lines {expected}, got {counts}"


def test_every_line_the_reader_uses_holds_one_of_the_literals_it_looks_for():
    literals = stream._LITERALS + (stream._WARN,)
    empty = by_lines(b"")["state"]
    for log in LOGS:
        for n, line in enumerate(log.read_bytes().splitlines(), 1):
            tagged = b"NCCL INFO " in line or b"NCCL WARN" in line
            got = by_lines(line + b"\n")
            used = got["state"] != empty or (not tagged and got["status"]["nccl_lines"] > 0)
            if used:
                assert any(lit in line for lit in literals), (
                    f"{log.name}:{n} changes what the check knows but holds none of {literals}: {line!r}"
                )


def test_a_line_longer_than_the_limit_is_cut_and_later_lines_keep_their_numbers(monkeypatch):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(stream, "MAX_LINE_BYTES", 1 << 18)
    warn = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14] + b"\n"
    data = b"x" * (1 << 20) + b"\n" + warn
    got = by_blocks(data)
    lines = [w["line"] for w in got["state"]["warnings"]]
    assert (got["status"]["lines"], lines) == (2, [2]), f"expected 2 lines, the WARN on line 2; got {got['status']['lines']}, {lines}"


def test_a_last_line_without_a_newline_is_read():
    warn = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14]
    got = by_blocks(b"first line\n" + warn)
    assert (got["status"]["lines"], got["state"]["warning_count"]) == (2, 1), (
        f"expected 2 lines and 1 WARN, got {got['status']['lines']} and {got['state']['warning_count']}"
    )
