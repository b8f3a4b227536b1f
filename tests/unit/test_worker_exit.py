"""A torchrun worker ends without the interpreter's finalization, its output intact
(workloads.train.exit_without_finalizing says why)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, ctypes, sys
from workloads.train import exit_without_finalizing
atexit.register(lambda: print("finalized", flush=True))
print("python line", end="")
ctypes.CDLL(None).printf(b"c line")
exit_without_finalizing(3)
"""


def _run(repo_root) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=repo_root, capture_output=True, text=True, timeout=60)


def test_worker_exit_keeps_the_status_and_the_unflushed_output(repo_root):
    r = _run(repo_root)
    assert r.returncode == 3, f"expected exit status 3, got {r.returncode}: {r.stderr[-2000:]}"
    assert "python line" in r.stdout and "c line" in r.stdout, f"expected both unflushed lines, got {r.stdout!r}"


def test_worker_exit_skips_finalization(repo_root):
    r = _run(repo_root)
    assert "finalized" not in r.stdout, f"expected no atexit handler to run, got {r.stdout!r}"
