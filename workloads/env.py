"""Environment settings the training module sets in its workers, defined once and imported.

The cluster's pod spec (``infra/manifests.py``) and the driver import them from here: this is one of
the standard-library-only contract modules ``infra`` may import (``workloads/__init__.py``). Where
each shared name lives is listed in CONTRIBUTING.md.
"""

from __future__ import annotations

# The NCCL check reads only INFO output: without it no transport line is logged and the check fails
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug).
NCCL_DEBUG_LEVEL = "INFO"

# What each Ray Train worker needs in its environment before NCCL starts its first communicator.
WORKER_ENV = {"NCCL_DEBUG": NCCL_DEBUG_LEVEL, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
