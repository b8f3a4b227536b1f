"""`python -m automation clean`: delete the local target's run directories under ./runs.

Every run leaves `runs/<run-id>/` (summary.json, checkpoints, NCCL logs) in the directory the
driver ran in, marked by the file `workloads.metrics.RUN_MARKER_FILE` the run writes as it starts.
This deletes those runs, keeping the newest `--keep`, after listing them and asking (or --yes).
A folder without the marker is no run and is never touched, whatever its name.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable

from automation.commands import Subparsers
from automation.errors import DriverError
from automation.flags import count, resolve_target
from automation.ui import Ui, tty_confirm
from workloads.config import runs_root
from workloads.metrics import RUN_MARKER_FILE, local_runs


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    help = "delete the local runs' directories under ./runs, keeping the newest --keep"
    p = sub.add_parser("clean", help=help, description=help, parents=parents)
    p.add_argument("--keep", type=count, default=0, help="clean: how many of the newest runs to keep (default: 0)")
    p.add_argument("--yes", action="store_true", help="do not ask before changes that cost money")


def run(args: argparse.Namespace, ui: Ui, confirm: Callable[[str], bool] = tty_confirm) -> int:
    args.target = resolve_target(args)
    root = runs_root().absolute()
    runs = local_runs(root)
    doomed = runs[args.keep :]
    others = sorted(p.name for p in root.iterdir() if p not in runs) if root.is_dir() else []
    doc = {"runs_dir": str(root), "runs": len(runs), "kept": len(runs) - len(doomed), "deleted": [], "not_runs": others}
    if others and not args.json:
        ui.note(f"left alone under {root} (no {RUN_MARKER_FILE}, so no run): {', '.join(others)}")
    if doomed:
        mib = sum(f.stat().st_size for p in doomed for f in p.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20
        if not args.json:
            ui.note(f"would delete, oldest last: {', '.join(p.name for p in doomed)}")
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
