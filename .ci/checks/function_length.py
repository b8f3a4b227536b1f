"""No function of the three packages is longer than 80 lines (CONTRIBUTING.md, "Lint and checks"):
a longer one is split into named helpers."""

from __future__ import annotations

import ast
import sys

from _repo import PACKAGES, REPO, finish

MAX_LINES = 80


def long_functions() -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_LINES:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} is {lines} lines: split it")
    return found


if __name__ == "__main__":
    sys.exit(finish(f"function length (at most {MAX_LINES} lines)", long_functions()))
