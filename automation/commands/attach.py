"""`attach --stack S [RUN]`: follow a job that a `run` left (--detach, a closed laptop, Ctrl-C) from any
machine with the stack's credentials, then `check` and the report, as if that `run` had stayed.

A job that fails for the infrastructure is resumed as under `run` (--max-recoveries, --recovery-minutes). The
job is found on the head pod's job server (RUN: its run or Ray job id; default: the newest job
submitted). When it has ended, the GPU nodes go back to gpuIdleNodes as at the end of `run`, unless
--keep-nodes. The local target cannot be attached to: its Ray cluster ends with its run.
"""

from __future__ import annotations

import argparse

from automation.commands import Subparsers, run_steps
from automation.flags import add_kubeconfig, run_id
from automation.ui import Ui

HELP = "follow a job a `run` left running (--detach, Ctrl-C, a closed laptop), then check and report"


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = run_steps.pipeline_command(sub, "attach", HELP, parents)
    add_kubeconfig(p)
    run_steps.add_keep_nodes(p)
    run_steps.add_timeout(p)
    run_steps.add_hang(p)
    run_steps.add_recovery(p)
    what = "the run (its Ray job id) to follow (default: the newest job submitted)"
    p.add_argument("job", nargs="?", type=run_id, metavar="RUN", help=what)


def run(args: argparse.Namespace, ui: Ui) -> int:
    """The steps attach, train (the job followed to its end) and check, then the report and the scale-down."""
    return run_steps.run(args, ui)
