"""counters: every GPU node's EFA port counters before the job, the counter witness's first half (`check` reads
them again and judges: automation/efa_witness.py). It fails, naming the node, when a reading cannot serve (no Running
counter reader, no readable hw_counters, fewer EFA devices than advertised): a run started then would end in a `check`
that cannot tell whether EFA carried it.
"""

from __future__ import annotations

from automation.efa_witness import Snapshot, snapshot
from automation.errors import DriverError
from automation.pipeline import Finding, Prior, Status, StepResult
from automation.targets import Target
from infra.names import APP_LABEL, EFA_COUNTER_READER, EFA_COUNTER_READER_NAMESPACE

READER_FIX = (
    f"kubectl -n {EFA_COUNTER_READER_NAMESPACE} get pods -l {APP_LABEL}={EFA_COUNTER_READER} -o wide "
    "(one Running per GPU node; run `up` again if the DaemonSet is missing)"
)


def run(target: Target, prior: Prior) -> StepResult[Snapshot]:
    """The counters now, as the result's data for `check`; skip where the target has no EFA."""
    try:
        before = snapshot(target)
    except DriverError as e:  # the cluster did not answer: check will say the witness is absent
        return StepResult("counters", "skip", f"EFA counters not read before the job: {e}")
    if problems := before.problems():
        rows = tuple(Finding("EFA counters before", "fail", p, READER_FIX) for p in problems)
        return StepResult("counters", "fail", f"EFA counters unreadable before the job: {'; '.join(problems)}", rows)
    status: Status = "skip" if before.nodes is None else "pass"
    line = f"EFA counters before the job: {before.summary}"
    if before.nodes is not None:
        try:
            if kept := target.keep_counters(before.to_dict()):
                line = f"{line}; kept at {kept} for `attach`"
        except DriverError as e:  # this command's check still has the reading; only a later `attach` lacks it
            line = f"{line} (not kept for `attach`: {e})"
    return StepResult("counters", status, line, (Finding("EFA counters before", status, before.summary),), before)
