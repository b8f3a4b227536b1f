"""The capacity command's arguments as its parser gives them (automation/commands/capacity.py), with overrides."""

from __future__ import annotations

import argparse

from _shared_env import MOTO_REGION

REGION = MOTO_REGION
G6 = "g6.12xlarge"


def args_for(project_dir, **kw) -> argparse.Namespace:
    base = dict(
        instance_type=G6,
        count=2,
        regions=[REGION],
        all_regions=False,
        probe=False,
        yes=False,
        write_stack=None,
        cleanup=False,
        json=True,
        project_dir=project_dir,
    )
    return argparse.Namespace(**{**base, **kw})
