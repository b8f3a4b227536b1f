"""What every check shares: the repository root, the three packages, and how a check fails."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("infra", "automation", "workloads")


def finish(name: str, problems: list[str]) -> int:
    """Print the check's verdict; exit status 1 with one line per problem, else 0."""
    if problems:
        print(f"check {name}: FAIL", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check {name}: ok")
    return 0
