"""Names the shared set-ups of tests/support/shared_setups.py and the tests that read them agree on, and
what the tests of an interrupted local run judge its files by."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import REPO

from workloads.config import RUNS_DIR_ENV

# An address where no Ray cluster answers, as a shell may have left it: the local run must not use it.
STALE_RAY_ADDRESS = "127.0.0.1:1"
# The one bucket of the shared moto S3 server.
S3_BUCKET = "ray-efa-eks-test-runs"
# The region of the in-process moto account (`moto_aws`), and the GPU node group `moto_eks` makes in it.
MOTO_REGION = "us-west-2"
MOTO_CLUSTER, MOTO_NODEGROUP = "ray-efa-eks", "ray-efa-eks-gpu-ng-1a2b3c"


def driver_env() -> dict[str, str]:
    """The environment of a `python -m automation` subprocess: wide lines, so a path printed on stderr
    is never wrapped, the repository on the path whatever the cwd, and its runs under its own cwd (not
    where tests/conftest.py's `runs_in_tmp` points the test process)."""
    env = dict(os.environ, COLUMNS="400", PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    env.pop(RUNS_DIR_ENV, None)
    return env


def half_written(run_dir: Path) -> list[str]:
    """Files of a run that do not parse whole: JSON that is not a document, JSONL with a broken line."""
    bad = []
    for path in sorted(run_dir.rglob("*")):
        if path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except ValueError:
                bad.append(str(path))
        elif path.suffix == ".jsonl":
            lines = path.read_text().splitlines()
            if path.read_text() and not path.read_text().endswith("\n"):
                bad.append(f"{path} (last line cut)")
            for line in lines:
                try:
                    json.loads(line)
                except ValueError:
                    bad.append(f"{path}: {line[:80]!r}")
                    break
    return bad
