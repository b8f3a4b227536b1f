"""automation/steps/place.py: a step picks the AWS or the local work by the target's class."""

from __future__ import annotations

from automation.steps import preflight, verify
from automation.steps.place import by_place
from automation.targets.aws import AwsTarget
from automation.targets.local import LocalTarget


def _step():
    return by_place("verify: the doc", lambda t, p: ("aws", t, p), lambda t, p: ("local", t, p))


def test_an_aws_target_gets_the_aws_work_and_a_local_target_the_local_work():
    aws, local = AwsTarget.__new__(AwsTarget), LocalTarget.__new__(LocalTarget)
    assert _step()(aws, {"a": 1}) == ("aws", aws, {"a": 1})
    assert _step()(local, {}) == ("local", local, {})


def test_the_pipeline_steps_keep_their_names_and_docs():
    assert (verify.run.__name__, preflight.run.__name__) == ("run", "run")
    assert verify.run.__doc__.startswith("verify: ") and preflight.run.__doc__.startswith("preflight: ")
