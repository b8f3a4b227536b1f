"""The CLI: exit codes, --json, --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.nccl_check.__main__ import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
REPO = Path(__file__).resolve().parents[2]


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
