"""The AWS drill's checkpoint interval: short enough for a kill between two checkpoints."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from automation.commands.drill import with_drill_interval
from automation.job import local_job
from automation.storage import CHECKPOINT_EVERY


def test_aws_drill_checkpoints_every_quarter_of_a_default_length_run():
    job = dataclasses.replace(local_job("r", Path("/tmp/unused"), steps=100), checkpoint_every=CHECKPOINT_EVERY)
    got = with_drill_interval(job).checkpoint_every
    assert got == 25, f"expected a checkpoint every 25 of 100 steps (default interval {CHECKPOINT_EVERY}), got {got}"


def test_aws_drill_keeps_a_shorter_interval_the_stack_set():
    job = dataclasses.replace(local_job("r", Path("/tmp/unused"), steps=100), checkpoint_every=10)
    got = with_drill_interval(job).checkpoint_every
    assert got == 10, f"expected the stack's interval of 10 kept, got {got}"
