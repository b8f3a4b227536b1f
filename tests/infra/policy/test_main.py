"""`infra/policy/__main__.py` run by a user explains itself and exits 2; run the way the pulumi CLI
runs a Python policy pack (`python -m pulumi.policy ENGINE_ADDRESS PACK_DIR`, pulumi 3.272's
pulumi/policy/__main__.py) it still serves: it prints the port the CLI reads."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_python_m_infra_policy_explains_itself_instead_of_blocking():
    got = subprocess.run(
        [sys.executable, "-m", "infra.policy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert got.returncode == 2 and "pulumi preview --stack" in got.stderr and not got.stdout, (
        f"expected exit 2 naming pulumi preview, no port; got {got.returncode}: {got.stdout!r} {got.stderr!r}"
    )


def test_the_pulumi_policy_host_still_gets_a_port_number():
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulumi.policy", "127.0.0.1:1", str(REPO / "infra" / "policy")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert line.isdigit(), f"expected the policy server's port on stdout, got {line!r}"
