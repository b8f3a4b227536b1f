"""The modules of `workloads` that `infra` may import (workloads.CONTRACT_MODULES: TrainConfig, the path
parser, the shared error, the workers' environment) import only the standard library and each other,
and `infra` imports nothing else of `workloads` (no torch, no ray: Pulumi's virtualenv has neither). No product
package (infra, automation, workloads) imports `bench`: its scripts print numbers over the product, never under it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from _repo import PACKAGES, REPO, finish


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
    return found


def problems(repo: Path = REPO, contract: tuple[str, ...] | None = None) -> list[str]:
    """Every import that breaks a rule of the module docstring in the tree at `repo` (`contract`: the
    contract modules, default workloads.CONTRACT_MODULES)."""
    if contract is None:
        sys.path.insert(0, str(repo))
        from workloads import CONTRACT_MODULES as contract

    out = []
    for module in contract:
        path = repo / (module.replace(".", "/") + ".py")
        for line, name in imports(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and name not in contract:
                out.append(f"{path.relative_to(repo)}:{line} imports {name}: a contract module takes the stdlib only")
    for path in sorted((repo / "infra").rglob("*.py")):
        for line, name in imports(path):
            if name.split(".")[0] == "workloads" and name not in contract:
                out.append(f"{path.relative_to(repo)}:{line} imports {name}: infra may import only {contract}")
    for path in sorted(p for package in PACKAGES for p in (repo / package).rglob("*.py")):
        for line, name in imports(path):
            if name.split(".")[0] == "bench":
                out.append(f"{path.relative_to(repo)}:{line} imports {name}: a product package never imports bench/")
    return out


if __name__ == "__main__":
    sys.exit(finish("contract imports", problems()))
