"""The modules of `workloads` that `infra` may import (workloads.CONTRACT_MODULES: TrainConfig, the path
parser, the shared error, the workers' environment) import only the standard library and each other,
and `infra` imports nothing else of `workloads` (no torch, no ray: Pulumi's virtualenv has neither)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from _repo import REPO, finish


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
    return found


def problems() -> list[str]:
    sys.path.insert(0, str(REPO))
    from workloads import CONTRACT_MODULES

    out = []
    for module in CONTRACT_MODULES:
        path = REPO / (module.replace(".", "/") + ".py")
        for line, name in imports(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and name not in CONTRACT_MODULES:
                out.append(f"{path.relative_to(REPO)}:{line} imports {name}: a contract module takes the stdlib only")
    for path in sorted((REPO / "infra").rglob("*.py")):
        for line, name in imports(path):
            if name.split(".")[0] == "workloads" and name not in CONTRACT_MODULES:
                out.append(f"{path.relative_to(REPO)}:{line} imports {name}: infra may import only {CONTRACT_MODULES}")
    return out


if __name__ == "__main__":
    sys.exit(finish("contract imports", problems()))
