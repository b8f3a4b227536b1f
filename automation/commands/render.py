"""`python -m automation render --stack NAME`: every resource the Pulumi program declares, offline.

A render under Pulumi's mock engine (infra/mock_render.py), not a preview against real state:
no pulumi CLI, no credentials, no cloud call.
"""

from __future__ import annotations

from typing import Any

from automation.errors import DriverError
from automation.flags import add_command, resolve_target
from automation.targets.aws import load_config
from infra.config import ConfigError
from infra.mock_render import format_render, render_stack


def add_parser(sub: Any, parents: list) -> None:
    add_command(sub, "render", "list the resources the Pulumi program declares (offline, no CLI)", parents)


def run(args: Any, ui: Any) -> int:
    args.target = resolve_target(args)
    load_config(args.stack, args.project_dir)  # the clear message for a bad stack, before Pulumi's mocks
    try:
        rows = render_stack(args.stack, args.project_dir)
    except ConfigError as e:  # what only the program checks (an empty gpuAvailabilityZone)
        raise DriverError(str(e), exit_code=2) from None
    if args.json:
        ui.emit_json({"stack": args.stack, "resources": rows})
    else:
        ui.console.print(format_render(rows), markup=False, highlight=False, soft_wrap=True)
    return 0
