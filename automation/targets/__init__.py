"""Where the pipeline runs: `aws` (the Pulumi stack, EKS, KubeRay) or `local` (a Ray head on 127.0.0.1).

A target offers the steps in automation/steps/ capabilities (the job, submit it, ask the job server about it, the
NCCL logs of a run, what exists after a failure, close), never a step's logic. `Target` is either class, so mypy
checks each step against both; what only one has (the AWS target's Kubernetes client and stack, the local
target's Ray head) a step reads through automation/steps/place.py's `by_place`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from automation.targets.aws import AwsTarget
    from automation.targets.local import LocalTarget

# A string, so importing it loads neither target (aws.py and local.py import much of the driver).
Target: TypeAlias = "AwsTarget | LocalTarget"
