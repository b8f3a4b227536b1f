"""Environment settings the training module sets in its workers, defined once and imported.

``workloads`` may not import ``infra`` (imports point one way), so the settings it shares with
the cluster's pod spec are defined here for this package and in ``infra/names.py`` for the
cluster; tests/unit/test_shared_names.py proves the two agree. The driver (`automation`) imports
either. Where each shared name lives is listed in CONTRIBUTING.md.
"""

from __future__ import annotations

# The NCCL check reads only INFO output: without it no transport line is logged and the check fails
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug).
NCCL_DEBUG_LEVEL = "INFO"

# What each Ray Train worker needs in its environment before NCCL starts its first communicator.
WORKER_ENV = {"NCCL_DEBUG": NCCL_DEBUG_LEVEL, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
