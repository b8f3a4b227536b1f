"""Typed steps run in order; the first failure stops the run and says which step, why, what exists
and what to run next. Each step's result type lives here, beside StepResult."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from automation.errors import DriverError
from workloads.config import TrainConfig
from workloads.summary import RunSummary

if TYPE_CHECKING:
    from infra.config import StackConfig

Status = Literal["pass", "fail", "skip"]
T = TypeVar("T")


@dataclass(frozen=True)
class Clock:
    """Time as the waits see it: seconds since the epoch and a sleep. Tests hand in a fake that moves on sleep."""

    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


SYSTEM_CLOCK = Clock()


def _plain(value: object) -> object:
    """A field as JSON sees it: a nested result as its dict, a tuple as a list."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


class Plain:
    """A frozen result whose dict is its fields in order, through `_plain`."""

    def to_dict(self) -> dict[str, object]:
        return {k: _plain(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Finding(Plain):
    """One checked fact: its verdict, what was seen, and on failure the command that fixes it."""

    check: str
    status: Status
    detail: str
    fix: str = ""

    @classmethod
    def judged(cls, check: str, ok: bool, detail: str, fix: str) -> Finding:
        return cls(check, "pass" if ok else "fail", detail, "" if ok else fix)


@dataclass(frozen=True)
class StepResult(Plain, Generic[T]):
    """What a step returns: its verdict, one line, the findings behind it, and typed data for later steps."""

    step: str
    status: Status
    summary: str
    findings: tuple[Finding, ...] = ()
    data: T | None = None

    @property
    def ok(self) -> bool:
        return self.status != "fail"


def verdict(step: str, findings: Sequence[Finding], data: T | None = None, ok_summary: str = "") -> StepResult[T]:
    """A result that fails when any finding fails, summarised by the failing checks."""
    failed = "; ".join(f"{f.check}: {f.detail}" for f in findings if f.status == "fail")
    summary = failed or ok_summary or f"{len(findings)} checks passed"
    return StepResult(step, "fail" if failed else "pass", summary, tuple(findings), data)


# ---- what each step's result carries -------------------------------------------------------------
@dataclass(frozen=True)
class PreflightFacts(Plain):
    """What preflight learned, for later steps: the account, the AZ to use, the vCPUs needed."""

    account: str | None = None
    gpu_az: str | None = None
    valid_azs: tuple[str, ...] = ()
    vcpus_needed: int | None = None
    vcpus_free: float | None = None
    efa_interfaces: int | None = None


SECRET_OUTPUTS = frozenset({"kubeconfig"})


@dataclass(frozen=True)
class ChangeSummary:
    """Resource counts by operation (create, update, delete, same, ...) and the stack outputs after it."""

    changes: Mapping[str, int]
    outputs: Mapping[str, object] = field(default_factory=dict)

    @property
    def costs_money(self) -> bool:
        return any(self.changes.get(op, 0) for op in ("create", "replace", "create-replacement", "update"))

    def line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.changes.items()) if v) or "no changes"

    def to_dict(self) -> dict[str, object]:
        return {
            "changes": dict(self.changes),
            "outputs": {k: ("[secret]" if k in SECRET_OUTPUTS else v) for k, v in self.outputs.items()},
        }


@dataclass(frozen=True)
class Expectations(Plain):
    """What the stack promises about the cluster (verify's result data)."""

    node_count: int
    gpu_az: str
    gpus_per_node: int
    efa_per_node: int
    namespace: str
    raycluster: str
    worker_replicas: int


def expectations_from(cfg: StackConfig, outputs: Mapping[str, object]) -> Expectations:
    """Expectations from the stack config, with the stack outputs taking precedence where they exist."""
    return Expectations(
        node_count=int(cfg.gpu_nodes.node_count),
        gpu_az=str(outputs.get("gpu_az") or cfg.gpu_nodes.availability_zone),
        gpus_per_node=int(cfg.gpu_nodes.gpus_per_node),
        efa_per_node=int(cfg.gpu_nodes.efa_interfaces),
        namespace=str(outputs.get("raycluster_namespace") or cfg.ray.namespace),
        raycluster=str(outputs.get("raycluster_name") or cfg.ray.cluster_name),
        worker_replicas=int(cfg.ray.worker.replicas),
    )


@dataclass(frozen=True)
class Scaled:
    """What a scale did: the desired size before and after, seconds the nodes took (None: not waited), and
    seconds spent waiting for EKS to take the change (the group busy, then the new size reported)."""

    nodegroup: str
    before: int
    after: int
    seconds: float | None = None
    per_node: tuple[tuple[str, float], ...] = ()  # (node, seconds from the scale-up to its Ready)
    waited: float = 0.0
    waited_for: str = ""  # what it waited for, e.g. "UPDATING"

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def text(self) -> str:
        busy = f" (waited {self.waited:.0f} s for the node group to leave {self.waited_for})" if self.waited_for else ""
        if not self.changed:
            return f"GPU node group {self.nodegroup} already at {self.after} node(s){busy}"
        took = f", the nodes were Ready after {self.seconds:.0f} s" if self.seconds is not None else ""
        if self.per_node:
            took += " (" + ", ".join(f"{name} {s:.0f} s" for name, s in self.per_node) + ")"
        return f"GPU node group {self.nodegroup} scaled from {self.before} to {self.after} node(s){took}{busy}"

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__, per_node=dict(self.per_node))


@dataclass(frozen=True)
class GateOutcome(Plain):
    """What the gate did beyond its rows: the GPU nodes it cordoned (none when all were fit)."""

    cordoned: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmittedJob:
    """A job the job server has (submit's and attach's result): its Ray job id and the training job it runs."""

    job_id: str
    train_cfg: TrainConfig

    def to_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "run_id": self.train_cfg.run_id}


@dataclass(frozen=True)
class TrainOutcome(Plain):
    """The submitted job: its id, final status, the training summary (None if none was written), the log tail."""

    job_id: str
    status: str
    summary: RunSummary | None
    log_tail: tuple[str, ...] = field(default_factory=tuple)
    job: TrainConfig | None = None
    start: dict | None = None  # the start's phases in seconds (automation/start_phases.py), where the target reads them
    hang: dict[str, object] | None = None  # automation/hang.py `diagnosis` of a job stopped as hung
    stopped_for_timeout: bool = False  # the driver stopped it at --timeout: the user's limit, no failure


@dataclass(frozen=True)
class TransportVerdict(Plain):
    """What the NCCL assertion said, or why it was not applicable."""

    verdict: str  # pass | fail | inconclusive | bad-input | not-applicable
    require: str | None
    cause: str
    evidence: tuple[str, ...] = ()
    report: dict | None = None
    files: int = 0
    counters: dict | None = None  # the EFA counter witness beside the log (efa_witness.py's CounterRecord, as a dict)


@dataclass
class RunState:
    """What a run carries from step to step, declared in one place as torchtitan's ``Trainer`` declares its state at its
    class head (pytorch/torchtitan, torchtitan/train.py): one typed attribute per step, its result once it has run
    (None before, or when the command has no such step), read by attribute and recorded under the step's name."""

    preflight: StepResult[PreflightFacts] | None = None
    preview: StepResult[ChangeSummary] | None = None
    up: StepResult[ChangeSummary] | None = None
    start: StepResult[dict] | None = None  # the local target's `up`: its Ray head
    scale_up: StepResult[Scaled] | None = None
    verify: StepResult[Expectations] | None = None
    gate: StepResult[GateOutcome] | None = None  # the GPU nodes fit to train (automation/steps/gate.py)
    counters: StepResult[Any] | None = None  # efa_witness.Snapshot (that module's imports lead back here)
    submit: StepResult[SubmittedJob] | None = None
    attach: StepResult[SubmittedJob] | None = None
    follow: StepResult[TrainOutcome] | None = None  # the job followed to its end
    check: StepResult[TransportVerdict] | None = None
    destroy: StepResult[ChangeSummary] | None = None

    def record(self, result: StepResult) -> None:
        setattr(self, result.step.replace("-", "_"), result)

    @property
    def job(self) -> SubmittedJob | None:
        """The job `submit` queued or `attach` found."""
        queued = self.submit or self.attach
        return queued.data if queued is not None else None

    @property
    def cluster_seen(self) -> bool:
        """Whether `up`, `scale-up` or `verify` of this command saw the cluster exist (a config or an unreachable
        kubeconfig is no proof: a command says "up and costs money" only after this)."""
        return any(r is not None and r.status == "pass" for r in (self.up, self.scale_up, self.verify))


Prior = RunState  # what a step sees: the results of the steps before it


@dataclass(frozen=True)
class Step:
    """A named unit of the pipeline; `run` sees the results of the steps before it (RunState)."""

    name: str
    run: Callable[[Prior], StepResult]


@dataclass(frozen=True)
class Timed:
    result: StepResult
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {**self.result.to_dict(), "seconds": round(self.seconds, 2)}


@dataclass(frozen=True)
class Advice:
    """What exists after a failure, and the commands to resume or to tear down."""

    exists: str
    next_commands: tuple[str, ...]


@dataclass(frozen=True)
class PipelineResult:
    steps: tuple[Timed, ...]
    failed_step: str | None = None
    reason: str = ""
    advice: Advice | None = None
    not_run: tuple[str, ...] = field(default_factory=tuple)
    state: RunState = field(default_factory=RunState)

    @property
    def ok(self) -> bool:
        return self.failed_step is None

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "failed_step": self.failed_step,
            "reason": self.reason,
            "exists": self.advice.exists if self.advice else None,
            "next": list(self.advice.next_commands) if self.advice else [],
            "not_run": list(self.not_run),
            "steps": [t.to_dict() for t in self.steps],
        }


class StepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while `step` ran; `advice` says what exists and how to resume or tear down. ``job_id``: a
    job the step followed, which goes on on the cluster: nothing may scale down under it."""

    def __init__(self, step: str, advice: Advice | None, job_id: str | None = None):
        super().__init__(step)
        self.step, self.advice, self.job_id = step, advice, job_id


def run_pipeline(
    steps: Sequence[Step],
    advise: Callable[[str, Prior], Advice],
    on_start: Callable[[str], None] = lambda name: None,
    on_finish: Callable[[Timed], None] = lambda timed: None,
) -> PipelineResult:
    """Run `steps` in order and stop at the first that fails: by a "fail" result or by raising (a DriverError keeps
    its message, another exception is shown as type and message, never a traceback). Exit code 2 from the first step
    is bad input (no kubeconfig, ...): it propagates for the CLI's one line; from a later step it is that step's
    failure with `advise`'s advice (earlier steps may have created resources). Ctrl-C propagates as StepInterrupted
    (still a KeyboardInterrupt, so the caller's cleanup runs) naming the step, with `advise`'s advice for it."""
    done = RunState()
    timed: list[Timed] = []
    for i, step in enumerate(steps):
        on_start(step.name)
        t0 = time.monotonic()
        try:
            result = step.run(done)
        except KeyboardInterrupt as e:
            if isinstance(e, StepInterrupted):
                raise
            try:
                advice = advise(step.name, done)
            except Exception:  # noqa: BLE001 - the interrupt must propagate even if advice cannot be built
                advice = None
            raise StepInterrupted(step.name, advice) from e
        except DriverError as e:
            if e.exit_code == 2 and not timed:
                raise
            result = StepResult(step.name, "fail", str(e))
        except Exception as e:  # noqa: BLE001 - any step error becomes a clear failed row
            result = StepResult(step.name, "fail", f"{type(e).__name__}: {e}")
        t = Timed(result, time.monotonic() - t0)
        timed.append(t)
        done.record(result)
        on_finish(t)
        if not result.ok:
            return PipelineResult(
                steps=tuple(timed),
                failed_step=step.name,
                reason=result.summary,
                advice=advise(step.name, done),
                not_run=tuple(s.name for s in steps[i + 1 :]),
                state=done,
            )
    return PipelineResult(steps=tuple(timed), state=done)
