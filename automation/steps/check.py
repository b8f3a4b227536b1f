"""check: the NCCL assertion over this run's worker logs, held to what the target can prove.

On the cluster every worker pod's `<run_dir>/nccl/*.log` is checked with `require="efa"` (`bench`'s TCP run:
"socket"): a fallback to sockets fails the pipeline. Locally there is no EFA to prove (gloo has no NCCL; local GPUs
talk within one node) and the step says so. The target says what it can prove (`nccl_expectation`) and hands over
the logs (`nccl_logs`); the verdict is this step's. Where there is EFA, the NICs' byte counters (read by `counters`
before the job and here after it: automation/efa_witness.py) are a second witness: the step passes only when both
agree (workloads/nccl_check/witnesses.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

from automation import efa_witness
from automation.efa_witness import CounterRecord, Snapshot
from automation.errors import DriverError
from automation.pipeline import Finding, Prior, Status, StepResult, TransportVerdict
from automation.targets import Target
from workloads.nccl_check import check_logs
from workloads.nccl_check.verdict import ChannelClaim
from workloads.nccl_check.witnesses import NOT_APPLICABLE, not_applicable

CPU_SKIP_REASON = "no NCCL on CPU/gloo, EFA not applicable"


def assert_transport(paths: Sequence[Path], require: str, run_id: str | None) -> TransportVerdict:
    """Run `workloads.nccl_check.check_logs` over `paths` and keep its verdict, cause and evidence."""
    report = check_logs([str(p) for p in paths], require=require, run_id=run_id)
    return TransportVerdict(
        verdict=report.verdict,
        require=require,
        cause=report.cause,
        evidence=tuple(f"{Path(e.file).name}:{e.line}: {e.text} ({e.why})" for e in report.evidence),
        report=report.to_dict(),
        files=len(paths),
    )


def check_result(v: TransportVerdict, note: str = "") -> StepResult:
    """pass for a passing verdict, skip when not applicable, fail otherwise (sockets, no logs, bad input)."""
    detail = v.cause + (f" ({note})" if note else "")
    status: Status
    evidence: tuple[Finding, ...] = ()
    if v.verdict == "not-applicable":
        status, said, detail = "skip", v.cause, v.cause
    elif v.verdict == "pass" and not note:
        status, said = "pass", f"NCCL over {v.require}: {v.cause}"
    elif v.verdict in ("pass", "inconclusive") and note:
        # Locally a pass or an inconclusive answer is all there is to have; say it is not EFA proof.
        status, said = "skip", f"{v.verdict}: {detail}"
    else:
        status, said = "fail", f"NCCL check {v.verdict} (require={v.require}): {v.cause}"
        evidence = tuple(Finding("evidence", "fail", e) for e in v.evidence[:10])
    transport = Finding("NCCL transport", status, detail, v.cause if status == "fail" else "")
    return StepResult("check", status, said, (transport, *evidence), v)


def not_applicable_on_cpu() -> TransportVerdict:
    no_efa = not_applicable(efa_witness.NO_EFA_HERE).to_dict()
    return TransportVerdict("not-applicable", None, CPU_SKIP_REASON, counters={"witnesses": no_efa})


def with_counters(v: TransportVerdict, record: CounterRecord, note: str = "") -> StepResult:
    """The step's result with the counter witness: the log's own result (held to `note`) where the witness
    does not apply (no EFA here), else pass only when both witnesses pass, and a failure naming the
    witness that did not."""
    w = record.witnesses
    v = dataclasses.replace(v, counters=record.to_dict())
    if w.outcome == NOT_APPLICABLE:
        return check_result(v, note)
    counted = Finding("EFA counters", "pass" if w.ok else "fail", w.message, "" if w.ok else w.message)
    if w.ok and v.verdict == "pass":
        said = f"NCCL over {v.require}, and {w.message}"
        return StepResult("check", "pass", said, (*check_result(v).findings, counted), v)
    said = f"NCCL check {v.verdict} (require={v.require}), counter witness {w.outcome}: {w.message}"
    return StepResult("check", "fail", said, (counted, *check_result(v).findings), v)


def before_of(prior: Prior, target: Target, run_id: str) -> Snapshot | None:
    """The counters the `counters` step read before the job: this command's, else the reading it kept for a
    later command (`attach`, `check` on its own), else None."""
    if prior.counters is not None and prior.counters.data is not None:
        return prior.counters.data
    kept = target.kept_counters(run_id)
    try:
        return Snapshot.from_dict(kept) if kept is not None else None
    except (KeyError, TypeError, ValueError):  # a kept file this version cannot read: no reading
        return None


# ---- the step ------------------------------------------------------------------------------------
def run(target: Target, prior: Prior) -> StepResult:
    """check: the NCCL verdict on the logs of this command's job (else the run the target names),
    held to what the target can prove."""
    require, note = target.nccl_expectation()
    if require is None:
        return check_result(not_applicable_on_cpu())
    outcome = prior.follow.data if prior.follow is not None else None
    run_id = outcome.job_id if outcome is not None else target.checked_run_id()
    with tempfile.TemporaryDirectory(prefix="nccl-") as tmp:
        # Keep the run id in the local paths: the NCCL check scopes files to a run by their path.
        files = target.nccl_logs(run_id, Path(tmp) / run_id)
        v = assert_transport(files, require, run_id)
    job = outcome.job if outcome is not None else None
    steps = efa_witness.steps_run(outcome.summary if outcome is not None else None, job)
    claims = [ChannelClaim.from_dict(c) for c in (v.report or {}).get("channel_claims", [])]
    before = before_of(prior, target, run_id)
    try:
        names = target.host_nodes() if claims else {}
    except DriverError:  # the pods are gone: the cross-check falls back to matching host names to nodes
        names = {}
    record = efa_witness.weigh(target, before, job, steps, (require, v.verdict, v.cause), claims, names)
    return with_counters(v, record, note)
