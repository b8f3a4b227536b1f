"""The CLI: exit codes, --json, --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES as FIXTURE_ROOT
from conftest import REPO

from workloads.nccl_check import report
from workloads.nccl_check.__main__ import main

FIXTURES = FIXTURE_ROOT / "nccl"


def test_exit_code_is_0_on_pass(capsys):
    code = main(["--require", "efa", str(FIXTURES / "efa_unprefixed_ofi1.20.log")])
    assert code == 0, f"expected 0, got {code}: {capsys.readouterr().out}"


def test_exit_code_is_1_on_fallback_and_evidence_is_printed(capsys):
    code = main([str(FIXTURES / "socket_cluster_nccl952.log")])
    out = capsys.readouterr().out
    assert code == 1 and "socket_cluster_nccl952.log:3:" in out, f"expected 1 with evidence, got {code}: {out}"


def test_exit_code_is_2_when_inconclusive(capsys):
    code = main([str(FIXTURES / "single_node_shm_nccl1609.log")])
    assert code == 2, f"expected 2, got {code}: {capsys.readouterr().out}"


def test_exit_code_is_3_on_missing_file(capsys, tmp_path):
    code = main([str(tmp_path / "absent.log")])
    assert code == 3, f"expected 3, got {code}: {capsys.readouterr().out}"


def test_json_report_parses_and_holds_the_verdict(capsys):
    main(["--json", "--require", "socket", str(FIXTURES / "socket_plugin_missing_2nodes.log")])
    data = json.loads(capsys.readouterr().out)
    assert (data["verdict"], data["require"]) == ("pass", "socket"), f"got {data['verdict']}, {data['require']}"


def test_run_id_flag_reaches_the_scope(capsys, tmp_path):
    d = tmp_path / "runs" / "abc" / "nccl"
    d.mkdir(parents=True)
    (d / "nccl.rank0.h.1.log").write_text((FIXTURES / "efa_unprefixed_ofi1.20.log").read_text())
    code = main(["--run-id", "zzz", str(tmp_path / "runs")])
    assert code == 3, f"expected 3 (no file of run zzz), got {code}: {capsys.readouterr().out}"


def test_help_documents_the_exit_codes():
    out = subprocess.run(
        [sys.executable, "-m", "workloads.nccl_check", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    missing = [
        s for s in ("0  pass", "1  fail", "2  inconclusive", "3  bad input", "--run-id", "--json") if s not in out
    ]
    assert not missing, f"--help lacks {missing}:\n{out}"


def test_wrong_command_line_exits_3_not_the_inconclusive_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--require", "ib", str(FIXTURES / "h200_socket.log")])
    assert exc.value.code == 3, f"expected exit 3, got {exc.value.code}"


# -- bad input: exit 3 with a one-line cause, never a hang, never a traceback (issue 20) --------


def run_cli(*args: str | bytes, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI in its own process, so that a hang fails the test instead of stalling the run;
    its output strictly UTF-8, as on a terminal with a UTF-8 locale."""
    return subprocess.run(
        [sys.executable, "-m", "workloads.nccl_check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
    )


def test_fifo_named_is_bad_input_not_a_hang(tmp_path):
    fifo = tmp_path / "rank0.log"
    os.mkfifo(fifo)
    r = run_cli(str(fifo))
    assert (r.returncode, "a FIFO" in r.stdout, r.stderr) == (3, True, ""), (
        f"expected exit 3 naming the FIFO and no stderr, got {r.returncode}: {r.stdout} {r.stderr}"
    )


def test_folder_holding_a_fifo_is_bad_input_not_a_hang(tmp_path):
    (tmp_path / "rank0.log").write_bytes((FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes())
    os.mkfifo(tmp_path / "rank1.log")
    r = run_cli(str(tmp_path))
    assert (r.returncode, "rank1.log (not-regular: a FIFO" in r.stdout) == (3, True), (
        f"expected exit 3 naming rank1.log as a FIFO, got {r.returncode}: {r.stdout} {r.stderr}"
    )


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_bad_input_not_read_forever():
    r = run_cli("/dev/zero")
    assert (r.returncode, "a character device" in r.stdout) == (3, True), (
        f"expected exit 3 naming a character device, got {r.returncode}: {r.stdout} {r.stderr}"
    )


def test_file_larger_than_any_log_is_bad_input(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(report, "MAX_LOG_BYTES", 100)
    big = tmp_path / "rank0.log"
    big.write_bytes((FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes() * 10)
    code = main([str(big)])
    out = capsys.readouterr().out
    assert (code, "too-large" in out) == (3, True), f"expected exit 3 with too-large, got {code}: {out}"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc")
def test_file_that_reads_longer_than_its_size_stops_at_the_limit(monkeypatch, capsys):
    # /proc files say size 0 and read on, as a file that keeps growing does
    monkeypatch.setattr(report, "MAX_LOG_BYTES", 10)
    code = main(["/proc/self/status"])
    out = capsys.readouterr().out
    assert (code, "too-large" in out) == (3, True), f"expected exit 3 with too-large, got {code}: {out}"


@pytest.mark.parametrize("path", ["bad\x00name.log", "x" * 5000], ids=["nul-byte", "name-too-long"])
def test_unusable_path_is_bad_input_without_traceback(path, capsys):
    code = main([path])
    out = capsys.readouterr().out
    assert (code, "unreadable" in out) == (3, True), f"expected exit 3 with unreadable, got {code}: {out}"


def test_file_name_that_is_not_utf8_prints_without_traceback(tmp_path):
    name = os.fsencode(tmp_path) + b"/rank\xff.log"
    with open(name, "wb") as f:
        f.write((FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes())
    r = run_cli(name)
    assert (r.returncode, r.stderr) == (0, ""), f"expected exit 0 and no stderr, got {r.returncode}: {r.stderr}"


# -- an empty log in scope is a finding ---------------------------------------------------------


def test_empty_worker_log_beside_a_passing_one_is_inconclusive_and_named(tmp_path, capsys):
    (tmp_path / "rank0.log").write_bytes((FIXTURES / "efa_unprefixed_ofi1.20.log").read_bytes())
    (tmp_path / "rank1.log").write_bytes(b"")
    code = main(["--require", "efa", str(tmp_path)])
    cause = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cause:"))
    assert (code, str(tmp_path / "rank1.log") in cause) == (2, True), (
        f"expected exit 2 naming rank1.log in the cause, got {code}: {cause}"
    )


def test_empty_worker_log_beside_a_failing_one_keeps_the_fail_and_is_named(tmp_path, capsys):
    (tmp_path / "rank0.log").write_bytes((FIXTURES / "socket_cluster_nccl952.log").read_bytes())
    (tmp_path / "rank1.log").write_bytes(b"")
    code = main(["--require", "efa", str(tmp_path)])
    cause = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cause:"))
    assert (code, str(tmp_path / "rank1.log") in cause) == (1, True), (
        f"expected exit 1 naming rank1.log in the cause, got {code}: {cause}"
    )


@pytest.mark.parametrize("value", ["", " ", " abc"])
def test_empty_or_padded_run_id_is_bad_input_not_a_pass_on_other_runs(capsys, value):
    # an unset shell variable (--run-id "$RUN") once turned scoping off and passed on another run's log
    with pytest.raises(SystemExit) as exit_info:
        main(["--require", "efa", "--run-id", value, str(FIXTURES / "efa_unprefixed_ofi1.20.log")])
    code, err = exit_info.value.code, capsys.readouterr().err
    assert code == 3 and "is no run id" in err, f"expected exit 3 naming the run id, got {code}: {err}"


def test_check_logs_with_an_empty_run_id_is_bad_input():
    got = report.check_logs([FIXTURES / "efa_unprefixed_ofi1.20.log"], require="efa", run_id="")
    assert got.verdict == "bad-input", f"expected bad-input for run_id='', got {got.verdict}: {got.cause}"
