"""The names the cluster and the code must agree on, where they meet at run time: the GPU nodes' label and
the selector, the workers' NCCL level, the policy pack's import of infra/names.py. That each name is
spelled once is a check of CI (.ci/checks/shared_names.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from infra import names
from infra.manifests import gpu_node_labels
from workloads import env


def test_worker_env_carries_the_nccl_debug_level():
    assert env.WORKER_ENV.get("NCCL_DEBUG") == env.NCCL_DEBUG_LEVEL, f"WORKER_ENV is {env.WORKER_ENV}"


def test_gpu_node_selector_matches_the_gpu_node_groups_labels():
    key, value = names.GPU_NODE_SELECTOR.split("=")
    labels = gpu_node_labels()
    assert labels.get(key) == value, f"selector {names.GPU_NODE_SELECTOR!r}, GPU node labels {labels}"


def test_policy_pack_run_from_its_directory_imports_names_from_its_own_repository(repo_root):
    """As the pulumi CLI runs it: `__main__.py` from infra/policy, no PYTHONPATH (PolicyPack replaced,
    since constructing it starts the policy server and blocks)."""
    probe = (
        "import runpy, sys, pulumi_policy\n"
        "pulumi_policy.PolicyPack = lambda **kw: print(len(kw['policies']))\n"
        "runpy.run_path('__main__.py')\n"
        "print(sys.modules['infra.names'].__file__)\n"
    )
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo_root / "infra" / "policy", env=env_vars, capture_output=True, text=True
    )
    assert out.returncode == 0, f"the pack failed to load: {out.stderr[-2000:]}"
    loaded_from = out.stdout.split()[-1]
    assert loaded_from == str(repo_root / "infra" / "names.py"), f"infra.names came from {loaded_from}"
