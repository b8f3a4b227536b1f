"""No function of the three packages is longer than 80 lines (CONTRIBUTING.md, "Lint and tests"):
a longer one is split into named helpers."""

from __future__ import annotations

import ast

from conftest import REPO

MAX_LINES = 80
PACKAGES = ("infra", "automation", "workloads")


def _long_functions() -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_LINES:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_infra_automation_or_workloads_exceeds_80_lines():
    long = _long_functions()
    assert not long, f"expected every function to be at most {MAX_LINES} lines; split these: {long}"
