"""check: the NCCL assertion over this run's worker logs, with the expectation that fits the target.

On the cluster every worker pod's `<run_dir>/nccl/*.log` is collected and checked with
`require="efa"`: a fallback to sockets fails the pipeline. Locally there is no EFA to prove: on
CPU (gloo) there is no NCCL at all, and local GPUs talk within one node, so the step says so.
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automation.errors import DriverError
from automation.kube import PodExec
from automation.pipeline import Finding, Prior, StepResult

if TYPE_CHECKING:
    from automation.targets import Target

CPU_SKIP_REASON = "no NCCL on CPU/gloo, EFA not applicable"
LOCAL_GPU_NOTE = "local GPUs talk within one node: the NCCL check is inconclusive for EFA"


@dataclass(frozen=True)
class TransportVerdict:
    """What the NCCL assertion said, or why it was not applicable."""

    verdict: str  # pass | fail | inconclusive | bad-input | not-applicable
    require: str | None
    cause: str
    evidence: tuple[str, ...] = ()
    report: dict | None = None
    files: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, evidence=list(self.evidence))


def _evidence_lines(report: Any) -> tuple[str, ...]:
    ev = getattr(report, "evidence", ()) or ()
    if isinstance(ev, dict):
        return tuple(f"{k}: {v}" for k, v in ev.items())
    return tuple(
        f"{Path(e.file).name}:{e.line}: {e.text} ({e.why})" if hasattr(e, "text") and hasattr(e, "file") else str(e)
        for e in ev
    )


def assert_transport(paths: Sequence[Path], require: str, run_id: str | None) -> TransportVerdict:
    """Run `workloads.nccl_check.check_logs` over `paths` and keep its verdict, cause and evidence."""
    from workloads.nccl_check import check_logs

    report = check_logs([str(p) for p in paths], require=require, run_id=run_id)
    return TransportVerdict(
        verdict=report.verdict,
        require=require,
        cause=report.cause,
        evidence=_evidence_lines(report),
        report=report.to_dict(),
        files=len(paths),
    )


def check_result(v: TransportVerdict, note: str = "") -> StepResult:
    """pass for a passing verdict, skip when not applicable, fail otherwise (sockets, no logs, bad input)."""
    detail = v.cause + (f" ({note})" if note else "")
    if v.verdict == "not-applicable":
        return StepResult("check", "skip", v.cause, (Finding("NCCL transport", "skip", v.cause),), v)
    if v.verdict == "pass" and not note:
        return StepResult(
            "check", "pass", f"NCCL over {v.require}: {v.cause}", (Finding("NCCL transport", "pass", detail),), v
        )
    if v.verdict in ("pass", "inconclusive") and note:
        # Locally a pass or an inconclusive answer is all there is to have; say it is not EFA proof.
        return StepResult("check", "skip", f"{v.verdict}: {detail}", (Finding("NCCL transport", "skip", detail),), v)
    fix = "" if v.verdict == "pass" else v.cause
    return StepResult(
        "check",
        "fail",
        f"NCCL check {v.verdict} (require={v.require}): {v.cause}",
        (Finding("NCCL transport", "fail", detail, fix), *(Finding("evidence", "fail", e) for e in v.evidence[:10])),
        v,
    )


def not_applicable_on_cpu() -> TransportVerdict:
    return TransportVerdict(verdict="not-applicable", require=None, cause=CPU_SKIP_REASON)


# ---- AWS: collect from the worker pods ------------------------------------------------------------
def collect_command(nccl_dir: str) -> list[str]:
    """Print the NCCL log files of one pod as a base64 tar (empty output when there are none)."""
    q = shlex.quote(nccl_dir)
    return ["sh", "-c", f"[ -d {q} ] && ls {q}/*.log >/dev/null 2>&1 && tar -czf - -C {q} . | base64 -w0 || true"]


def collect_logs(pod_exec: PodExec, pods: Sequence[str], namespace: str, nccl_dir: str, dest: Path) -> list[Path]:
    """Copy every `*.log` under `nccl_dir` of each pod into `dest/<pod>/`; return the files copied."""
    files: list[Path] = []
    for pod in pods:
        res = pod_exec(pod, namespace, collect_command(nccl_dir), timeout_s=300)
        if res.rc != 0:
            raise DriverError(
                f"reading {nccl_dir} in {namespace}/{pod} failed (rc {res.rc}): {res.stderr.strip()[-300:]}"
            )
        blob = res.stdout.strip()
        if not blob:
            continue
        target = dest / pod
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(blob)), mode="r:gz") as tar:
            tar.extractall(target, filter="data")
        files += sorted(p for p in target.rglob("*.log") if p.is_file())
    return files


# ---- the step ------------------------------------------------------------------------------------
def run(target: Target, prior: Prior) -> StepResult:
    """check: the NCCL verdict on this run's logs, as the target can give it."""
    verdict, note = target.transport(prior)
    return check_result(verdict, note)
