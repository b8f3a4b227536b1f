"""Run scoping (a run directory, a run id, a combined log with markers) and bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import FIXTURES as FIXTURE_ROOT

from workloads.nccl_check import check_logs, run_marker

FIXTURES = FIXTURE_ROOT / "nccl"
SOCKET = (FIXTURES / "socket_plugin_missing_2nodes.log").read_text()
EFA = (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_text()


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """runs/old (a Socket fallback) and runs/new (an EFA run), laid out as the training module does."""
    for run_id, text in (("old", SOCKET), ("new", EFA)):
        d = tmp_path / "runs" / run_id / "nccl"
        d.mkdir(parents=True)
        (d / "nccl.rank0.ip-10-0-1-5.4242.log").write_text(text)
    return tmp_path / "runs"


def test_run_id_scopes_a_directory_of_runs_to_one_run(runs):
    r = check_logs([runs], run_id="new")
    assert r.verdict == "pass", f"expected only runs/new to count (pass), got {r.verdict}: {r.cause}"


def test_files_of_other_runs_are_listed_as_out_of_scope(runs):
    files = {Path(f.path).parts[-3]: f.status for f in check_logs([runs], run_id="new").files}
    assert files == {"old": "out-of-scope", "new": "read"}, f"got {files}"


def test_stale_run_fails_when_it_is_the_one_asked_for(runs):
    r = check_logs([runs], run_id="old")
    assert r.verdict == "fail", f"expected runs/old to fail, got {r.verdict}: {r.cause}"


def test_without_run_id_every_run_counts(runs):
    r = check_logs([runs])
    assert r.verdict == "fail" and r.cause.startswith("mixed"), (
        f"expected the two runs mixed (fail), got {r.verdict}: {r.cause}"
    )


def test_a_run_directory_given_directly_is_read_whole(runs):
    r = check_logs([runs / "new"], run_id="new")
    assert r.verdict == "pass", f"got {r.verdict}: {r.cause}"


def test_unknown_run_id_is_bad_input(runs):
    r = check_logs([runs], run_id="nope")
    assert (r.verdict, r.exit_code) == ("bad-input", 3) and "nope" in r.cause, f"got {r.verdict}: {r.cause}"


def combined(tmp_path: Path, *parts: str) -> Path:
    path = tmp_path / "job.log"
    path.write_text("".join(p if p.endswith("\n") else p + "\n" for p in parts))
    return path


def test_stale_lines_before_the_run_marker_are_ignored(tmp_path):
    log = combined(tmp_path, SOCKET, run_marker("r2", 0), EFA)
    r = check_logs([log], run_id="r2")
    assert r.verdict == "pass", f"expected the Socket lines of the earlier run ignored, got {r.verdict}: {r.cause}"


def test_stale_lines_count_without_a_run_id(tmp_path):
    log = combined(tmp_path, SOCKET, run_marker("r2", 0), EFA)
    r = check_logs([log])
    assert r.verdict == "fail", f"expected both runs read (fail), got {r.verdict}: {r.cause}"


def test_a_marker_of_another_run_ends_the_scope(tmp_path):
    log = combined(tmp_path, run_marker("r2", 0), EFA, run_marker("r3", 0), SOCKET)
    r = check_logs([log], run_id="r2")
    assert r.verdict == "pass", f"expected the later run r3 ignored, got {r.verdict}: {r.cause}"


def test_combined_log_without_this_runs_marker_is_bad_input(tmp_path):
    log = combined(tmp_path, run_marker("r1", 0), SOCKET)
    r = check_logs([log], run_id="r2")
    assert r.verdict == "bad-input" and log.name in str([f.path for f in r.files]), f"got {r.verdict}: {r.cause}"


def test_out_of_scope_lines_are_counted(tmp_path):
    log = combined(tmp_path, SOCKET, run_marker("r2", 0), EFA)
    status = check_logs([log], run_id="r2").files[0]
    assert status.out_of_scope_lines == len(SOCKET.splitlines()), (
        f"expected {len(SOCKET.splitlines())} lines out of scope, got {status.out_of_scope_lines}"
    )


def test_missing_path_is_bad_input(tmp_path):
    r = check_logs([tmp_path / "absent.log"])
    assert (r.verdict, r.exit_code) == ("bad-input", 3) and "absent.log" in r.cause, f"got {r.verdict}: {r.cause}"


def test_missing_path_beside_a_good_one_is_still_bad_input(tmp_path):
    r = check_logs([FIXTURES / "efa_unprefixed_ofi1.20.log", tmp_path / "absent.log"])
    assert r.verdict == "bad-input", f"expected bad-input, got {r.verdict}: {r.cause}"


def test_empty_file_is_bad_input(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    r = check_logs([tmp_path / "empty.log"])
    assert r.verdict == "bad-input" and "empty" in r.cause, f"got {r.verdict}: {r.cause}"


def test_text_that_is_not_an_nccl_log_is_bad_input(tmp_path):
    (tmp_path / "notes.txt").write_text("Ray job started\nepoch 1 loss 2.3\n")
    r = check_logs([tmp_path / "notes.txt"])
    assert r.verdict == "bad-input" and "not-nccl" in r.cause, f"got {r.verdict}: {r.cause}"


def test_empty_directory_is_bad_input(tmp_path):
    (tmp_path / "d").mkdir()
    r = check_logs([tmp_path / "d"])
    assert r.verdict == "bad-input" and "no files found" in r.cause, f"got {r.verdict}: {r.cause}"


def test_no_paths_is_bad_input():
    r = check_logs([])
    assert r.verdict == "bad-input", f"got {r.verdict}: {r.cause}"


def test_a_single_path_string_is_one_path_not_characters():
    r = check_logs(str(FIXTURES / "efa_unprefixed_ofi1.20.log"))
    assert r.verdict == "pass", f"expected the one file read (pass), got {r.verdict}: {r.cause}"


def test_several_runs_read_together_without_a_run_id_are_refused(tmp_path):
    # r1 fell back to sockets, r2 used EFA: judging both together would let r2's evidence speak for r1
    log = combined(tmp_path, run_marker("r1", 0), SOCKET, run_marker("r2", 0), EFA)
    r = check_logs([log])
    assert (r.verdict, r.exit_code) == ("bad-input", 3) and "2 runs (r1, r2)" in r.cause, f"{r.verdict}: {r.cause}"


def test_a_directory_of_per_rank_files_is_read_recursively():
    r = check_logs([FIXTURES / "h200_debugfile"])
    got = (r.verdict, [Path(f.path).name for f in r.files if f.status == "read"])
    assert got == ("inconclusive", ["nccl.rank0.vm.686.log"]), f"got {got}: {r.cause}"


def test_fifo_in_another_runs_folder_is_skipped_not_bad_input(runs):
    os.mkfifo(runs / "old" / "nccl" / "stray.fifo")
    r = check_logs([runs], run_id="new")
    assert r.verdict == "pass", f"expected the FIFO of run old to be out of scope (pass), got {r.verdict}: {r.cause}"


def test_empty_log_of_another_run_is_no_finding(runs):
    (runs / "old" / "nccl" / "nccl.rank1.ip-10-0-1-6.4243.log").write_bytes(b"")
    r = check_logs([runs], run_id="new")
    assert r.verdict == "pass", (
        f"expected the empty log of run old to be out of scope (pass), got {r.verdict}: {r.cause}"
    )
