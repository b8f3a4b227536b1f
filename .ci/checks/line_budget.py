"""The driver stays within its line budget (issue 45 item 7, CONTRIBUTING.md "Lint and checks").

`automation/` counts every line of its .py files, as `find automation -name '*.py' | xargs wc -l` does. Issue 45
capped it at 11,282 lines; BUDGET is that ceiling. A change that needs more makes room first, or raises BUDGET in a
commit that says why."""

from __future__ import annotations

import sys
from pathlib import Path

from _repo import REPO, finish

BUDGET = 11_282


def lines(repo: Path) -> dict[str, int]:
    """Each .py file of automation/ (its path under automation/) and its line count."""
    root = repo / "automation"
    return {p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def problems(repo: Path = REPO) -> list[str]:
    total = sum(lines(repo).values())
    print(f"automation/: {total} lines")
    if total > BUDGET:
        return [f"automation/ is {total} lines, over its budget of {BUDGET}: make room first"]
    return []


if __name__ == "__main__":
    sys.exit(finish(f"line budget (automation/ at most {BUDGET})", problems()))
