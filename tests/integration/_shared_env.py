"""Names the shared set-ups of tests/integration/conftest.py and the tests that read them agree on."""

from __future__ import annotations

import os

from conftest import REPO

# An address where no Ray cluster answers, as a shell may have left it: the local run must not use it.
STALE_RAY_ADDRESS = "127.0.0.1:1"
# The one bucket of the shared moto S3 server.
S3_BUCKET = "ray-efa-eks-test-runs"


def driver_env() -> dict[str, str]:
    """The environment of a `python -m automation` subprocess: wide lines, so a path printed on stderr
    is never wrapped, and the repository on the path whatever the cwd."""
    return dict(os.environ, COLUMNS="400", PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
