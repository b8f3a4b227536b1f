"""Where the pipeline runs: `aws` (the Pulumi stack, EKS, KubeRay) or `local` (a Ray head on 127.0.0.1).

`Target` is what the steps in automation/steps/ ask of a target; a target module holds only what
differs between the two places (its checks, how it submits the job, where the NCCL logs are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from automation.cost import CostEstimate
    from automation.pipeline import Advice, PipelineResult, Prior, StepResult
    from automation.steps.check import TransportVerdict
    from automation.steps.train import TrainOutcome
    from workloads.config import TrainConfig


class Target(Protocol):
    """What every step of the pipeline needs from the place it runs."""

    name: str  # "aws" or "local", as the report names it
    notes: list[str]  # lines for the report's notes, in the order they came

    @property
    def stack_name(self) -> str | None: ...

    def pipeline(self, command: str, plan: bool) -> tuple[str, ...]:
        """The names of the steps `command` runs, in order (automation.steps.STEPS holds each)."""
        ...

    def preflight(self, prior: Prior) -> StepResult: ...

    def verify(self, prior: Prior) -> StepResult: ...

    def train_args(self) -> TrainConfig:
        """The training job of this run, as submitted."""
        ...

    def submit(self, args: TrainConfig) -> TrainOutcome:
        """Run the training job to its end and return what it reported."""
        ...

    def transport(self, prior: Prior) -> tuple[TransportVerdict, str]:
        """The NCCL verdict on this run's logs, and a note when it cannot prove EFA here ("" otherwise)."""
        ...

    def advise(self, failed: str, prior: Prior) -> Advice:
        """After `failed` failed: what exists now and what to run next."""
        ...

    def interrupted(self, advice: Advice | None) -> Advice:
        """After Ctrl-C or SIGTERM: what exists now and what to run next (`advice`: the step's own, if any)."""
        ...

    def where(self) -> str:
        """The words after "interrupted ... " that name what was being worked on ("" for none)."""
        ...

    def cost(self, command: str) -> CostEstimate | None: ...

    def files(self, result: PipelineResult) -> str:
        """Where the run's files are (its summary, its NCCL logs), for a run that reached `train`."""
        ...

    def report_files(self, doc: dict) -> dict[str, str | None]:
        """Write the run's HTML report from its metrics and the driver's ``doc`` (automation/commands/report.py);
        the report's and the metrics file's paths, or ``report_error`` saying why there is none."""
        ...

    def close(self) -> None:
        """Stop whatever this run started and must not outlive it; idempotent."""
        ...
