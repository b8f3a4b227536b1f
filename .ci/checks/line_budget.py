"""The driver stays within its line budget (issue 45 item 7, CONTRIBUTING.md "Lint and checks").

`automation/` counts every line of its .py files, as `find automation -name '*.py' | xargs wc -l` does. Issue 45
capped it at 11,282 lines before the code that survives the hardware (issue 46) was added; that code's own modules
are named below, so the check prints both counts. BUDGET is the whole package's ceiling: a change that needs more
makes room first, or raises BUDGET in a commit that says why."""

from __future__ import annotations

import sys
from pathlib import Path

from _repo import REPO, finish

BUDGET = 11_550
ISSUE_45_BUDGET = 11_282  # before the hardware's code: the whole package less HARDWARE_MODULES
HARDWARE_MODULES = ("steps/gate.py", "hang.py", "recovery.py")  # issue 46 items 2-4, whole modules only


def lines(repo: Path) -> dict[str, int]:
    """Each .py file of automation/ (its path under automation/) and its line count."""
    root = repo / "automation"
    return {p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}


def problems(repo: Path = REPO) -> list[str]:
    counts = lines(repo)
    total = sum(counts.values())
    before_hardware = total - sum(counts.get(m, 0) for m in HARDWARE_MODULES)
    print(f"automation/: {total} lines; without {', '.join(HARDWARE_MODULES)}: {before_hardware}")
    found = []
    if total > BUDGET:
        found.append(f"automation/ is {total} lines, over its budget of {BUDGET}: make room first")
    if before_hardware > ISSUE_45_BUDGET:
        found.append(f"automation/ without the hardware's modules is {before_hardware} lines, over {ISSUE_45_BUDGET}")
    return found


if __name__ == "__main__":
    sys.exit(finish(f"line budget (automation/ at most {BUDGET})", problems()))
