"""`python -m automation render --stack NAME`: every resource the Pulumi program declares, and the training
job the stack would run with where each of its values came from (automation/job.py), offline.

A render under Pulumi's mock engine (infra/mock_render.py), not a preview against real state:
no pulumi CLI, no credentials, no cloud call.
"""

from __future__ import annotations

import argparse
from typing import Any

from automation.errors import DriverError
from automation.flags import STACK_PARENT, resolve_target
from automation.job import resolve_cluster_job
from automation.storage import Durability
from automation.targets.aws import load_config
from automation.ui import Ui
from infra.config import StackConfigError
from infra.mock_render import format_render, render_stack
from workloads.config import TrainConfigError

# The run id a rendered job shows: each run chooses its own (a valid id, so the job's checks pass).
RENDERED_RUN_ID = "RUN_ID"


def add_parser(sub: Any, parents: list) -> None:
    help = "list the resources the Pulumi program declares and the job it runs (offline, no CLI)"
    sub.add_parser("render", help=help, description=help, parents=[*parents, STACK_PARENT])


def run(args: argparse.Namespace, ui: Ui) -> int:
    args.target = resolve_target(args)
    cfg = load_config(args.stack, args.project_dir)  # the clear message for a bad stack, before Pulumi's mocks
    try:
        job = resolve_cluster_job(cfg, RENDERED_RUN_ID, vars(Durability()))  # the job preflight would refuse
        # StackConfigError from here: what only the program checks (an empty gpuAvailabilityZone)
        rows = render_stack(args.stack, args.project_dir)
    except (TrainConfigError, StackConfigError) as e:
        raise DriverError(str(e), exit_code=2) from None
    if args.json:
        ui.emit_json({"stack": args.stack, "resources": rows, "job": job.as_dict(), "precision": job.precision()})
    else:
        ui.console.print(format_render(rows), markup=False, highlight=False, soft_wrap=True)
        ui.console.print("\n" + job.text("job"), markup=False, highlight=False, soft_wrap=True)
    return 0
