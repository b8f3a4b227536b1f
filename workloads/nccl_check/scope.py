"""Which files, and which lines of them, belong to the run being checked.

- A directory is read recursively (sorted, hidden files skipped).
- Without a run id every file found is in scope.
- With a run id, a file is in scope as a whole when one of the folders on its path is named
  after the run id or its file name contains it (the training module writes
  ``runs/<run_id>/nccl/nccl.<run_id>.rank<R>.<host>.<pid>.log``). Any other file found in a directory is
  skipped; any other file named on the command line is read as a combined log (a Ray job log,
  ``kubectl logs`` output) in which only the lines after ``run_marker(run_id)`` count, up to a
  marker of another run. A combined log without this run's marker contributes nothing.
- Only regular files are read: a FIFO, a device or a socket named or found in scope is bad input.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Candidate:
    """A file to read and how: whole (in scope from its first line) or from this run's marker."""

    path: Path
    named: bool
    whole: bool


# The per-rank log's name the training module gives NCCL_DEBUG_FILE (workloads/loop.py, route_nccl_log):
# nccl.<run_id>.rank<R>.<host>.<pid>.log; a run id holds no '/' (workloads/config.py, _RUN_ID).
_RUN_LOG = re.compile(r"nccl\.(?P<run>.+?)\.rank\d+\.")


def run_of_log_file(name: str) -> str | None:
    """The run id a per-rank log's file name carries, or None for any other name."""
    match = _RUN_LOG.match(name)
    return match["run"] if match else None


def path_matches_run(path: Path, run_id: str) -> bool:
    """True when a folder on ``path`` is named ``run_id`` or the file name contains it."""
    return run_id in path.name or run_id in path.parent.parts


def discover(
    paths: Sequence[str | os.PathLike], run_id: str | None
) -> tuple[list[Candidate], list[tuple[Path, str, str]], list[Path]]:
    """Expand ``paths`` into candidates.

    Returns (candidates, problems, skipped): problems are (path, status, detail) for named paths
    that do not exist or cannot be looked at and for anything in scope that is not a regular file
    (a FIFO would block the reader forever, a device such as /dev/zero never ends); skipped are
    files found in directories that belong to another run.
    """
    candidates: list[Candidate] = []
    problems: list[tuple[Path, str, str]] = []
    skipped: list[Path] = []
    for p in paths:
        path = Path(p)
        kind, detail = file_kind(path)
        if kind == "directory":
            for f in sorted(_walk(path)):
                if run_id is not None and not (
                    path_matches_run(f.resolve(), run_id) or path_matches_run(path.resolve(), run_id)
                ):
                    skipped.append(f)
                    continue
                f_kind, f_detail = file_kind(f)
                if f_kind in ("file", "missing"):  # a dangling link is reported when it fails to open
                    candidates.append(Candidate(f, False, True))
                else:
                    problems.append((f, f_kind, f_detail))
        elif kind == "file":
            whole = run_id is None or path_matches_run(path.resolve(), run_id)
            candidates.append(Candidate(path, True, whole))
        else:
            problems.append((path, kind, detail))
    return candidates, problems, skipped


def file_kind(path: Path) -> tuple[str, str]:
    """("file" | "directory" | "missing" | "unreadable" | "not-regular", detail), from stat."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing", "no such file or directory"
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        return "unreadable", getattr(exc, "strerror", None) or str(exc)
    if stat.S_ISDIR(mode):
        return "directory", ""
    if stat.S_ISREG(mode):
        return "file", ""
    return "not-regular", f"{special_kind(mode)}, not a regular file: name NCCL log files or the folders holding them"


def special_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"


def _walk(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                found.append(Path(dirpath) / name)
    return found
