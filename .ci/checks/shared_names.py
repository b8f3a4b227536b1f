"""A name the cluster and the code must spell alike is written once (CONTRIBUTING.md, "Names the cluster
and the code share"): each literal below appears on exactly the line named here, its definition, in the
three packages. The NCCL debug level lives in workloads/env.py, which infra imports (a contract module)."""

from __future__ import annotations

import re
import sys

from _repo import PACKAGES, REPO, finish

# literal (a regular expression over one line) -> the files allowed to spell it, one line each
DEFINED_IN = {
    r'"nvidia\.com/gpu"': ("infra/names.py",),
    r'"vpc\.amazonaws\.com/efa"': ("infra/names.py",),
    r'"gpu-worker"|"role=': ("infra/names.py",),
    r'"/tmp/ray-efa-eks"': ("infra/names.py",),
    r'"eks-node-monitoring-agent"': ("infra/names.py",),
    r'"INFO"': ("workloads/env.py",),
}
# The GPU nodes' taint key is spelled nvidia.com/gpu by convention; it is defined beside the taint.
EXEMPT = "GPU_TAINT_KEY"


def spellings(pattern: str) -> list[str]:
    """`path:line` of every line of the three packages that matches `pattern`."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(pattern, line) and EXEMPT not in line:
                    found.append(f"{path.relative_to(REPO)}:{n}")
    return found


def problems() -> list[str]:
    out = []
    for pattern, homes in DEFINED_IN.items():
        got = spellings(pattern)
        files = sorted(g.split(":")[0] for g in got)
        if files != sorted(homes):
            out.append(f"{pattern} should be spelled once, in {list(homes)}, found at {got}: import the name")
    return out


if __name__ == "__main__":
    sys.exit(finish("shared names", problems()))
