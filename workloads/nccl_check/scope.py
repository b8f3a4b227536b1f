"""Which files, and which lines of them, belong to the run being checked.

- A directory is read recursively (sorted, hidden files skipped).
- Without a run id every file found is in scope.
- With a run id, a file is in scope as a whole when one of the folders on its path is named
  after the run id or its file name contains it (the training module writes
  ``runs/<run_id>/nccl/nccl.<run_id>.rank<R>.<host>.<pid>.log``). Any other file found in a directory is
  skipped; any other file named on the command line is read as a combined log (a Ray job log,
  ``kubectl logs`` output) in which only the lines after ``run_marker(run_id)`` count, up to a
  marker of another run. A combined log without this run's marker contributes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Candidate:
    """A file to read and how: whole (in scope from its first line) or from this run's marker."""

    path: Path
    named: bool
    whole: bool


def path_matches_run(path: Path, run_id: str) -> bool:
    """True when a folder on ``path`` is named ``run_id`` or the file name contains it."""
    return run_id in path.name or run_id in path.parent.parts


def discover(
    paths: Sequence[str | os.PathLike], run_id: str | None
) -> tuple[list[Candidate], list[tuple[Path, str]], list[Path]]:
    """Expand ``paths`` into candidates.

    Returns (candidates, problems, skipped): problems are named paths that do not exist, with
    the reason; skipped are files found in directories that belong to another run.
    """
    candidates: list[Candidate] = []
    problems: list[tuple[Path, str]] = []
    skipped: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            for f in sorted(_walk(path)):
                if run_id is None:
                    candidates.append(Candidate(f, False, True))
                elif path_matches_run(f.resolve(), run_id) or path_matches_run(path.resolve(), run_id):
                    candidates.append(Candidate(f, False, True))
                else:
                    skipped.append(f)
        elif path.exists():
            whole = run_id is None or path_matches_run(path.resolve(), run_id)
            candidates.append(Candidate(path, True, whole))
        else:
            problems.append((path, "missing"))
    return candidates, problems, skipped


def _walk(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                found.append(Path(dirpath) / name)
    return found
