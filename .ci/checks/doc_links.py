"""BENCHMARKS.md stays a one-page index (at most 150 lines) whose every result file exists under bench/results/,
and every relative link of a Markdown page resolves, so a moved or renamed page cannot leave a dangling link
(issue 45: docs by subject)."""

from __future__ import annotations

import re
import subprocess
import sys

from _repo import REPO, finish

MAX_INDEX_LINES = 150
RESULTS = REPO / "bench" / "results"
# A Markdown link whose target is no URL and no in-page anchor: [text](path) or [text](path#anchor).
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)(?:#[^)\s]*)?\)")


def index_problems() -> list[str]:
    lines = (REPO / "BENCHMARKS.md").read_text().splitlines()
    problems = []
    if len(lines) > MAX_INDEX_LINES:
        problems.append(f"BENCHMARKS.md has {len(lines)} lines; the index holds at most {MAX_INDEX_LINES}")
    for n, line in enumerate(lines, 1):
        if not line.startswith("| ") or line.startswith(("| claim", "| ---")):
            continue
        result_cell = line.rstrip(" |").rsplit(" | ", 1)[-1]
        for name in re.findall(r"`([^`]+)`", result_cell):
            if not (RESULTS / name).exists():
                problems.append(f"BENCHMARKS.md:{n} names bench/results/{name}, which does not exist")
    return problems


def link_problems() -> list[str]:
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    problems = []
    for rel in tracked.stdout.split():
        page = REPO / rel
        if not page.exists():
            continue
        for target in LINK.findall(page.read_text()):
            if not (page.parent / target).exists():
                problems.append(f"{rel} links {target}, which does not exist")
    return problems


if __name__ == "__main__":
    sys.exit(finish("doc links", index_problems() + link_problems()))
