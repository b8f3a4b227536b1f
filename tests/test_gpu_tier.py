"""The GPU tier (`pytest -m gpu tests/gpu`) collects on a machine that has only the training dependencies
(torch and transformers; the H200 machine the GPU tier runs on has no Ray and none of the driver's packages):
tests/conftest.py, the shared set-ups it loads and tests/gpu/ import no driver or cloud package."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

# The driver's and the cloud's packages, none of which the GPU machine has. `sys.modules[name] = None` makes
# `import name` (and of any submodule) raise ImportError (the import system's documented behaviour:
# https://docs.python.org/3/reference/import.html#the-module-cache).
ABSENT = ("boto3", "botocore", "moto", "pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "kubernetes", "ray")

COLLECT = f"""
import sys
for name in {ABSENT!r}:
    sys.modules[name] = None
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/gpu"]))
"""


def test_the_gpu_tier_collects_without_the_driver_or_cloud_packages():
    proc = subprocess.run([sys.executable, "-c", COLLECT], cwd=REPO, capture_output=True, text=True, timeout=300)
    tail = proc.stdout[-1500:] + proc.stderr[-1500:]
    assert proc.returncode == 0 and "tests collected" in proc.stdout, f"expected the GPU tests collected, got {tail}"
