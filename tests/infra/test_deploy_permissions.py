"""docs/aws-first-run.md's IAM permissions against what the program declares: every resource type of the mock
render of both example stacks has its IAM actions (or makes no AWS call of its own). The page against its generator
and the generator against known-good output are in the default tier (tests/test_generated_pages.py)."""

from __future__ import annotations

import pytest
from conftest import REPO

from infra.config import stack_config_values
from infra.deploy_permissions import uncovered
from infra.mock_render import run_program

# Program renders under Pulumi's mock engine take tens of seconds on 2 cores: the slow tier runs them.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("stack", ["us-east-2", "us-west-2"])
def test_every_resource_type_of_the_render_has_its_permissions(stack):
    types = {r.type for r in run_program(stack, REPO, config=stack_config_values(stack, REPO)).records}
    assert uncovered(types) == [], f"no IAM actions listed for {uncovered(types)} (infra/deploy_permissions.py)"
