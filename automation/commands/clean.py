"""`python -m automation clean`: delete the local target's run directories under ./runs.

Every local run leaves `runs/<run-id>/` (summary.json, checkpoints, NCCL logs) in the directory the
driver ran in; this deletes them, newest last, keeping the newest `--keep`, after asking (or --yes).
Only directories whose name is a run id are touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from automation.errors import DriverError
from automation.targets.local import RUNS_DIR
from automation.ui import tty_confirm


def run_dirs(root: Path) -> list[Path]:
    """The run directories under `root`, newest first."""
    from workloads.config import _RUN_ID

    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and _RUN_ID.match(p.name)]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def size_of(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file() and not f.is_symlink())


def run(args: Any, ui: Any, confirm: Any = tty_confirm) -> int:
    root = Path.cwd() / RUNS_DIR
    runs = run_dirs(root)
    doomed = runs[args.keep :]
    doc = {"runs_dir": str(root), "runs": len(runs), "kept": len(runs) - len(doomed), "deleted": []}
    if doomed:
        mib = size_of(doomed) / 2**20
        question = (
            f"delete {len(doomed)} of the {len(runs)} runs under {root} ({mib:.1f} MiB), "
            f"keeping the newest {args.keep}?"
        )
        if not args.yes and not confirm(question):
            raise DriverError("not confirmed: nothing was deleted")
        for path in doomed:
            shutil.rmtree(path)
        doc["deleted"] = [p.name for p in doomed]
    if args.json:
        ui.emit_json(doc)
    else:
        ui.note(f"{len(doomed)} runs deleted, {doc['kept']} kept under {root}")
    return 0
