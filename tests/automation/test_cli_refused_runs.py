"""A refused command starts no run: nothing is left under the runs directory (issue 36: a newcomer's
runs/ filled with empty folders of commands that never ran)."""

from __future__ import annotations

import pytest

from automation import cli
from workloads.config import runs_root

REFUSED = {
    "steps-0": ("run", "--steps", "0"),
    "run-id-dotdot": ("run", "--run-id", "../x"),
    "unknown-stack": ("run", "--stack", "nosuch"),
    "resume-without-stack": ("run", "--resume", "r1"),
    "report-unknown-run": ("report", "no-such-run"),
}


@pytest.mark.parametrize("argv", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_command_leaves_nothing_under_runs(argv, capsys):
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # argparse's refusals
        rc = e.code
    left = sorted(p.name for p in runs_root().rglob("*")) if runs_root().exists() else []
    assert (rc, left) == (2, []), f"{' '.join(argv)}: expected exit 2 and nothing under {runs_root()}, got {rc}, {left}"
