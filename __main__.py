"""The Pulumi program: stack config -> infra.stack.build -> stack outputs.

pulumi stack select us-east-2 && pulumi preview
python -m automation render --stack us-east-2   # offline render under Pulumi's mocks
"""

from pathlib import Path

import pulumi

from infra.config import StackConfigError, from_pulumi_config
from infra.stack import build, export


class ProgramConfigError(StackConfigError, pulumi.RunError):
    """Pulumi's Python host prints a RunError as one error line, any other exception with its traceback
    (https://github.com/pulumi/pulumi/blob/master/sdk/python/cmd/pulumi-language-python-exec)."""


try:
    cfg = from_pulumi_config(Path(__file__).resolve().parent)
    for note in cfg.warnings:
        pulumi.log.warn(note)
    export(build(cfg))
except StackConfigError as e:
    raise ProgramConfigError(str(e)) from None
