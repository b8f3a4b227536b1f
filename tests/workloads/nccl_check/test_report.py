"""Reading a log file line by line (report._read with parser.LineReader), on real NCCL lines: the
scope a run marker moves, what is counted in and out of it, and the lines that are cut or lack
their newline."""

from __future__ import annotations

import dataclasses
import random

from conftest import FIXTURES as FIXTURE_ROOT

from workloads.nccl_check import ScanState, report, run_marker
from workloads.nccl_check.scope import Candidate

FIXTURES = FIXTURE_ROOT / "nccl"
LOGS = sorted(FIXTURES.glob("*.log"))
ALL = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in LOGS)


def read(tmp_path, data: bytes, run_id: str | None = None, whole: bool = True) -> dict:
    """What reading ``data`` as one log file leaves behind, as plain data."""
    path = tmp_path / "log"
    path.write_bytes(data)
    state = ScanState()
    status = report._read(Candidate(path, True, whole), state, run_id)
    return {"state": dataclasses.asdict(state), "status": status.to_dict()}


def marker(run_id: str) -> bytes:
    return (run_marker(run_id, 0) + "\n").encode()


def tags(data: bytes) -> int:
    return data.count(b"NCCL INFO ") + data.count(b"NCCL WARN")


def test_markers_move_the_scope_of_a_combined_log(tmp_path):
    socket = (FIXTURES / "socket_plugin_missing_2nodes.log").read_bytes()
    efa = (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_bytes()
    data = socket + marker("r2") + efa + socket + marker("r3") + socket + marker("r2") + efa
    got = read(tmp_path, data, "r2", whole=False)["status"]
    counts = (got["nccl_lines"], got["out_of_scope_lines"])
    expected = (2 * tags(efa) + tags(socket), 2 * tags(socket))
    assert counts == expected, f"expected (in scope, out of scope) NCCL lines {expected}, got {counts}"


def test_lines_without_nccl_tag_count_in_and_out_of_scope(tmp_path):
    bare = (FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes()
    data = marker("r2") + bare * 2 + marker("r3") + bare * 3 + marker("r2") + bare
    got = read(tmp_path, data, "r2", whole=False)["status"]
    n = len(bare.splitlines())
    counts = (got["nccl_lines"], got["out_of_scope_lines"])
    assert counts == (3 * n, 3 * n), f"expected {3 * n} NCCL lines in scope and {3 * n} out, got {counts}"


# Timestamps as they come in front of NCCL lines: kubectl logs --timestamps.
KUBECTL = b"2026-12-03T20:%02d:%02d.%09dZ "


def without_texts(snap):
    """A snapshot without the text of its evidence, the file's size in bytes and its path."""
    if isinstance(snap, list):
        return [without_texts(v) for v in snap]
    if not isinstance(snap, dict):
        return snap
    return {k: without_texts(v) for k, v in snap.items() if k not in ("text", "bytes")}


def test_a_time_in_front_of_every_line_changes_only_the_evidence_text(tmp_path):
    lines = ALL.splitlines(keepends=True) * 2
    random.Random(7).shuffle(lines)
    stamped = b"".join(KUBECTL % (i // 60000 % 60, i // 1000 % 60, i % 1000) + line for i, line in enumerate(lines))
    got, plain = without_texts(read(tmp_path, stamped)), without_texts(read(tmp_path, b"".join(lines)))
    assert got == plain, "the same lines with a time in front of each read differently"


def test_a_line_longer_than_the_limit_is_cut_and_later_lines_keep_their_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "MAX_LINE_BYTES", 1 << 12)
    warn = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14] + b"\n"
    got = read(tmp_path, b"x" * (1 << 16) + b"\n" + warn)
    lines = [w["line"] for w in got["state"]["warnings"]]
    assert (got["status"]["lines"], lines) == (2, [2]), (
        f"expected 2 lines, the WARN on line 2; got {got['status']['lines']}, {lines}"
    )


def test_a_last_line_without_a_newline_is_read(tmp_path):
    warn = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14]
    got = read(tmp_path, b"first line\n" + warn)
    assert (got["status"]["lines"], got["state"]["warning_count"]) == (2, 1), (
        f"expected 2 lines and 1 WARN, got {got['status']['lines']} and {got['state']['warning_count']}"
    )


# Non-ASCII text in NCCL lines: what NCCL copies from elsewhere, such as a strerror in a French locale (glibc's
# po/fr.po: ECONNREFUSED is "Connexion refusée") or a Ray actor's own name in its prefix; UTF-8 in the file.
REFUSED = " (Connexion refusée, 接続拒否)".encode()
WARN_952 = (FIXTURES / "socket_cluster_nccl952.log").read_bytes().splitlines()[14]


def with_non_ascii(data: bytes) -> bytes:
    return b"".join(line + REFUSED + b"\n" for line in data.splitlines())


def test_non_ascii_text_across_every_read_buffer_boundary_reads_as_with_one_large_buffer(tmp_path, monkeypatch):
    data = with_non_ascii(ALL)
    whole = read(tmp_path, data)
    for size in (5, 7, 64, 1021):  # odd sizes put the boundary inside the 2- and 3-byte characters
        monkeypatch.setattr(report, "_READ_BUFFER", size)
        assert read(tmp_path, data) == whole, f"a read buffer of {size} bytes read the log differently"


def test_non_ascii_text_in_a_line_is_kept_in_its_evidence(tmp_path):
    got = read(tmp_path, WARN_952 + REFUSED + b"\n")
    text = got["state"]["warnings"][0]["text"]
    assert text.endswith(REFUSED.decode().strip()), f"expected the line to end in {REFUSED.decode()!r}, got {text!r}"


def test_a_line_cut_inside_a_multibyte_character_is_read_and_the_next_line_keeps_its_number(tmp_path, monkeypatch):
    long_line = WARN_952 + " é".encode() * 100 + b"\n"
    monkeypatch.setattr(report, "MAX_LINE_BYTES", len(WARN_952) + 2)  # " " then the first byte of "é"
    got = read(tmp_path, long_line + WARN_952 + b"\n")
    lines = [w["line"] for w in got["state"]["warnings"]]
    tail = got["state"]["warnings"][0]["text"][-1]
    assert (got["status"]["lines"], lines, tail) == (2, [1, 2], "\ufffd"), (
        f"expected 2 lines, WARNs on lines 1 and 2, the cut half character shown as U+FFFD; got "
        f"{got['status']['lines']}, {lines}, {tail!r}"
    )
