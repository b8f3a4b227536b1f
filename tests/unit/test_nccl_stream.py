"""The block reader (scan_stream) against the line reader (scan_lines), on real NCCL lines: the
same aggregates whatever the block size, the order of the lines, their repeats or the scope."""

from __future__ import annotations

import dataclasses
import io
import random

import pytest
from conftest import FIXTURES as FIXTURE_ROOT

from workloads.nccl_check import ScanState, parser, run_marker, stream
from workloads.nccl_check.records import FileStatus

FIXTURES = FIXTURE_ROOT / "nccl"
LOGS = sorted(FIXTURES.glob("*.log"))
ALL = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOGS)


@pytest.fixture(autouse=True, params=["auto", "lines", "hits"])
def block_mode(request, monkeypatch):
    """Every test runs with the reader choosing how to read each block, and with each way forced."""
    monkeypatch.setattr(stream._Scan, "mode", request.param)
    return request.param


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


# Timestamps as they come in front of NCCL lines: kubectl logs --timestamps, a CloudWatch export
# (as in ofi_init_failed_cloudwatch.log) and NCCL 2.28 (as in h200_socket.log).
KUBECTL = b"2026-12-03T20:%02d:%02d.%09dZ "
CLOUDWATCH = b"  | 2025-05-16T16:%02d:%02d.%03d-07:00 | "
NCCL_228 = b"[2026-12-02 16:%02d:%02d] "


def stamped(lines: list[bytes], form: bytes) -> bytes:
    """``lines``, each with a distinct time of ``form`` in front (one per millisecond, or second)."""
    fields = form.count(b"%")
    return b"".join(form % (i // 60000 % 60, i // 1000 % 60, i % 1000)[:fields] + line for i, line in enumerate(lines))


@pytest.mark.parametrize("form", [KUBECTL, CLOUDWATCH, NCCL_228], ids=["kubectl", "cloudwatch", "nccl2.28"])
@pytest.mark.parametrize("block_bytes", [4096, 1 << 20])
def test_lines_that_differ_only_in_their_timestamp_read_as_line_by_line(monkeypatch, form, block_bytes):
    # A repeat with another time in front takes the reader's shortcut (the time is not part of
    # what the line says), yet its evidence keeps its own time and line number.
    monkeypatch.setattr(stream, "BLOCK_BYTES", block_bytes)
    lines = ALL.splitlines(keepends=True) * 3
    random.Random(7).shuffle(lines)
    data = stamped(lines, form)
    got, want = by_blocks(data), by_lines(data)
    assert got == want, f"{form!r}: {first_difference(got, want)}"
    # and the times change nothing but the evidence's text (checked against the lines without
    # them, since both readers share the cache of prefixes)
    timeless = by_lines(b"".join(lines))
    assert without_texts(got) == without_texts(timeless), first_difference(without_texts(got), without_texts(timeless))


def without_texts(snap: dict | list) -> dict | list:
    """A snapshot without the text of its evidence and the file's size in bytes."""
    if isinstance(snap, list):
        return [without_texts(v) for v in snap]
    if not isinstance(snap, dict):
        return snap
    return {k: without_texts(v) for k, v in snap.items() if k not in ("text", "bytes")}


@pytest.mark.parametrize("block_bytes", [256, 1 << 20])
def test_lines_without_nccl_tag_count_in_and_out_of_scope_as_line_by_line(monkeypatch, block_bytes):
    # Lines of an excerpt without NCCL's prefix are counted one by one, also when they repeat
    # out of the run's scope.
    monkeypatch.setattr(stream, "BLOCK_BYTES", block_bytes)
    bare = (FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes()
    marker = lambda rid: (run_marker(rid, 0) + "\n").encode()  # noqa: E731
    data = marker("r2") + bare * 2 + marker("r3") + bare * 3 + marker("r2") + bare
    got, want = by_blocks(data, "r2", whole=False), by_lines(data, "r2", whole=False)
    assert got == want, first_difference(got, want)
    n = len(bare.splitlines())
    counts = (got["status"]["nccl_lines"], got["status"]["out_of_scope_lines"])
    assert counts == (3 * n, 3 * n), f"expected {3 * n} NCCL lines in scope and {3 * n} out, got {counts}"


@pytest.mark.parametrize("block_mode", ["auto"], indirect=True)
def test_the_reader_reads_repeats_by_lines_and_unique_lines_by_hits(monkeypatch, block_mode):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 16)  # more than ALL: its lines repeat in each
    used: list[str] = []
    for name in ("_by_lines", "_by_hits"):
        real = getattr(stream._Scan, name)
        monkeypatch.setattr(stream._Scan, name, lambda self, *a, _r=real, _n=name: (used.append(_n), _r(self, *a))[1])
    lines = ALL.splitlines(keepends=True)

    def share_by_lines(data: bytes) -> float:
        used.clear()
        by_blocks(data)
        return used.count("_by_lines") / len(used)

    unique = stamped(lines * 40, KUBECTL)
    repeated, once = share_by_lines(ALL * 40), share_by_lines(unique)
    assert repeated > 0.8 and once < 0.2, (
        f"blocks read by lines: {repeated:.0%} of a log that repeats its lines (expected most), "
        f"{once:.0%} of one whose lines are all distinct (expected few)"
    )


def test_every_line_the_reader_uses_holds_one_of_the_literals_it_looks_for():
    literals = parser.ALL_LITERALS
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
    assert (got["status"]["lines"], lines) == (2, [2]), (
        f"expected 2 lines, the WARN on line 2; got {got['status']['lines']}, {lines}"
    )


def test_a_last_line_without_a_newline_is_read():
    warn = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14]
    got = by_blocks(b"first line\n" + warn)
    assert (got["status"]["lines"], got["state"]["warning_count"]) == (2, 1), (
        f"expected 2 lines and 1 WARN, got {got['status']['lines']} and {got['state']['warning_count']}"
    )


def test_the_caches_stay_within_their_bounds_and_a_full_cache_changes_no_result(monkeypatch):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 8192)
    monkeypatch.setattr(stream, "_CACHE_ENTRIES", 64)
    monkeypatch.setattr(stream, "_CACHE_BYTES", 4096)
    lines = ALL.splitlines(keepends=True)
    data = ALL * 2 + stamped(lines * 2, KUBECTL) + ALL * 2  # lines that repeat, then ones that do not
    scan = stream._Scan("log", ScanState(), None, True)
    for blk in stream._blocks(io.BytesIO(data)):
        scan.block(blk)
        kept = sum(map(len, scan._repeats))
        assert kept == scan._repeat_bytes, f"the cache counts {scan._repeat_bytes} B of lines, holds {kept}"
        sizes = (kept, len(scan._repeats), len(scan._ident_cache))
        assert sizes[0] <= 4096 and max(sizes[1:]) <= 64, f"(bytes, lines, prefixes) kept {sizes}, over (4096, 64, 64)"
    got, want = by_blocks(data), by_lines(data)
    assert got == want, first_difference(got, want)
