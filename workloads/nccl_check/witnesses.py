"""One verdict from two witnesses: NCCL's log (what NCCL chose) and the EFA port counters (what crossed
the wire). Pure: the caller reads the logs, the counters and the model's prediction.

Rules (`require` is the NCCL check's):
- efa: pass only when the log's verdict is pass AND every EFA device sent at least MIN_FRACTION of the
  bytes per NIC that bench/throughput_model.py predicts for the run's steps. A log that says EFA over
  counters that stayed below is a fail of its own ("the log says EFA, the NIC did not carry it").
  Counters that moved while the log is inconclusive say so, and are no pass.
- socket (bench's TCP run): pass only when the log says sockets AND no EFA device sent more than
  MIN_FRACTION of the prediction (counters that moved mean the run was not the TCP baseline).
- A counter reset, a device missing before or after, an unreadable counter, no reading before the
  job, or no prediction: each its own outcome, never a pass.

MIN_FRACTION, from the model's own error: over EFA the model's step rate is 7-19% optimistic against
the AWS sample's published steps/s (BENCHMARKS.md, "The AWS sample"); its bytes are counted from the
collectives FSDP2 issues under NCCL's ring accounting (bench/collectives.py), and tree or ring moves
the same bytes per NIC for two nodes. Charging the whole 19% to the bytes, twice over, gives a floor
of 1 - 2 x 0.19 = 0.62; 0.6 keeps a run that matches the model within its known error passing with
margin, while a run whose collectives stayed off the NIC (TCP fallback: a few kB of nothing) or went
half over sockets fails. Counted bytes above the prediction (EFA's packet headers, NCCL's LL
protocols, which send flags beside the data) are shown, never failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .counters import MISSING, OK, RESET, UNREAD, NicDelta

MIN_FRACTION = 0.6

# Outcomes of the counter witness, and of the two together.
PASS = "pass"
FLAT = "counters-flat"  # the log says EFA, the NICs did not carry the predicted bytes
BOTH_NOT_EFA = "not-efa"  # the log says another transport and the counters agree
DISAGREE = "witnesses-disagree"  # the log says sockets but the EFA counters moved
MOVED_LOG_UNSURE = "counters-moved-log-inconclusive"
LOG_FAILED = "log-failed"
NO_BEFORE = "no-before-reading"
NO_PREDICTION = "no-prediction"
NOT_APPLICABLE = "not-applicable"


@dataclass(frozen=True)
class NicRow:
    """One NIC of one node: bytes predicted for the run, bytes its counters say it sent, their ratio."""

    node: str
    device: str
    predicted: float | None
    counted: int | None
    outcome: str

    @property
    def ratio(self) -> float | None:
        if self.predicted and self.counted is not None:
            return self.counted / self.predicted
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "device": self.device,
            "predicted_bytes": self.predicted,
            "counted_bytes": self.counted,
            "ratio": self.ratio,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class Witnesses:
    """The combined verdict (`ok` only for a pass), its outcome word, one line why, and the NIC rows."""

    outcome: str
    ok: bool
    message: str
    nics: tuple[NicRow, ...] = ()
    min_fraction: float = MIN_FRACTION
    log_verdict: str = ""
    detail: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "min_fraction": self.min_fraction,
            "log_verdict": self.log_verdict,
            "nics": [n.to_dict() for n in self.nics],
            "detail": list(self.detail),
        }


def not_applicable(why: str, log_verdict: str = "") -> Witnesses:
    """No EFA device where the run ran (the local target): the counter witness does not apply."""
    return Witnesses(NOT_APPLICABLE, False, f"counter witness not applicable: {why}", log_verdict=log_verdict)


def nic_rows(found: Sequence[NicDelta], predicted_per_nic: float | None) -> tuple[NicRow, ...]:
    return tuple(
        NicRow(d.node, d.device, predicted_per_nic, d.sent if d.outcome == OK else None, d.outcome) for d in found
    )


def _counters_broken(found: Sequence[NicDelta], rows: tuple[NicRow, ...], log: str) -> Witnesses | None:
    """The outcome when any device's difference means nothing (reset, missing, unreadable), else None."""
    for outcome in (RESET, MISSING, UNREAD):
        bad = [d for d in found if d.outcome == outcome]
        if bad:
            why = "; ".join(d.why for d in bad)
            return Witnesses(outcome, False, f"counter witness {outcome}: {why}", rows, log_verdict=log, detail=(why,))
    if not found:
        return Witnesses(MISSING, False, "counter witness missing: no GPU node was read", rows, log_verdict=log)
    return None


def _moved(rows: Sequence[NicRow]) -> tuple[list[NicRow], list[NicRow]]:
    """(rows at or above MIN_FRACTION of the prediction, rows below it)."""
    above = [r for r in rows if r.ratio is not None and r.ratio >= MIN_FRACTION]
    return above, [r for r in rows if r not in above]


def _span(rows: Sequence[NicRow]) -> str:
    return ", ".join(f"{r.node}/{r.device} sent {r.counted:,} of {r.predicted:,.0f} ({r.ratio:.0%})" for r in rows)


def judge(
    require: str,
    log_verdict: str,
    log_cause: str,
    found: Sequence[NicDelta] | None,
    predicted_per_nic: float | None,
) -> Witnesses:
    """Both witnesses into one verdict (module docstring). `found` is None when no reading was taken
    before the job; `predicted_per_nic` is the model's bytes per NIC for the run's steps, or None."""
    if found is None:
        return Witnesses(
            NO_BEFORE,
            False,
            "counter witness absent: the EFA counters were not read before the job, so what moved is unknown "
            "(`efa_witness.snapshot` runs before the job in `python -m automation run`)",
            log_verdict=log_verdict,
        )
    rows = nic_rows(found, predicted_per_nic)
    broken = _counters_broken(found, rows, log_verdict)
    if broken is not None:
        return broken
    if not predicted_per_nic:
        return Witnesses(
            NO_PREDICTION,
            False,
            "counter witness cannot be weighed: bench/throughput_model.py has no measured row for this job's layout "
            f"(counted: {', '.join(f'{r.node}/{r.device} {r.counted:,} B' for r in rows)})",
            rows,
            log_verdict=log_verdict,
        )
    above, below = _moved(rows)
    return (_judge_socket if require == "socket" else _judge_efa)(log_verdict, log_cause, rows, above, below)


def _judge_efa(log: str, cause: str, rows: tuple[NicRow, ...], above: list, below: list) -> Witnesses:
    floor = f"at least {MIN_FRACTION:.0%} of the predicted bytes"
    if log == "pass" and not below:
        return Witnesses(PASS, True, f"both witnesses say EFA: {_span(rows)}", rows, log_verdict=log)
    if log == "pass":
        return Witnesses(
            FLAT,
            False,
            f"the NCCL log says EFA but the EFA counters did not move {floor}: {_span(below)}; the collectives did "
            "not cross the EFA device (check NCCL_NET / FI_PROVIDER in the job's env and which NIC carried them)",
            rows,
            log_verdict=log,
        )
    if log == "inconclusive" and not below:
        return Witnesses(
            MOVED_LOG_UNSURE,
            False,
            f"the EFA counters moved ({_span(rows)}) but the NCCL log is inconclusive ({cause}): bytes on the NIC "
            "without a log naming the transport is no proof of which path NCCL took; not a pass",
            rows,
            log_verdict=log,
        )
    word = BOTH_NOT_EFA if not above else LOG_FAILED
    return Witnesses(
        word,
        False,
        f"the NCCL log says {log} ({cause}); the EFA counters "
        + ("did not move either: " + _span(rows) if not above else "moved: " + _span(above)),
        rows,
        log_verdict=log,
    )


def _judge_socket(log: str, cause: str, rows: tuple[NicRow, ...], above: list, below: list) -> Witnesses:
    if log == "pass" and not above:
        return Witnesses(PASS, True, f"both witnesses say TCP sockets: {_span(rows)}", rows, log_verdict=log)
    if log == "pass":
        return Witnesses(
            DISAGREE,
            False,
            f"the NCCL log says sockets but the EFA counters moved: {_span(above)}: this run is no TCP baseline",
            rows,
            log_verdict=log,
        )
    return Witnesses(LOG_FAILED, False, f"the NCCL log says {log} ({cause})", rows, log_verdict=log)
