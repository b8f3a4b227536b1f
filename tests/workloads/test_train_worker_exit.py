"""A torchrun worker ends without the interpreter's finalization, its output intact
(workloads.train.exit_without_finalizing says why)."""

from __future__ import annotations

import subprocess
import sys

# The C stream stands for NCCL's debug file: a FILE* that os._exit alone would not flush.
SCRIPT = """
import atexit, ctypes, sys
from workloads.train import exit_without_finalizing
atexit.register(lambda: print("finalized", flush=True))
sys.stdout.write("python line")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fputs(b"c line", ctypes.c_void_p(libc.fopen(sys.argv[1].encode(), b"w")))
exit_without_finalizing(3)
"""


def _run(repo_root, c_file) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", SCRIPT, str(c_file)]
    return subprocess.run(cmd, cwd=repo_root, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)


def test_worker_exit_keeps_the_status_and_the_unflushed_output(repo_root, tmp_path):
    r = _run(repo_root, tmp_path / "c.log")
    assert r.returncode == 3, f"expected exit status 3, got {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout == "python line", f"expected the unflushed Python line alone, got {r.stdout!r}"
    c_text = (tmp_path / "c.log").read_text()
    assert c_text == "c line", f"expected the C stream's unflushed line in its file, got {c_text!r}"


def test_worker_exit_skips_finalization(repo_root, tmp_path):
    r = _run(repo_root, tmp_path / "c.log")
    assert "finalized" not in r.stdout, f"expected no atexit handler to run, got {r.stdout!r}"
