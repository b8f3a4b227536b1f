"""One verdict from two witnesses: NCCL's log (what NCCL chose) and the EFA port counters (what crossed
the wire). Pure: the caller reads the logs, the counters and the model's prediction.

Rules (`require` is the NCCL check's):
- efa: pass only when the log's verdict is pass AND every EFA device sent at least MIN_FRACTION of the
  bytes per NIC that workloads/throughput_model.py predicts for the run's steps. A log that says EFA over
  counters that stayed below is a fail of its own ("the log says EFA, the NIC did not carry it").
  Counters that moved while the log is inconclusive say so, and are no pass.
- socket (bench's TCP run): pass only when the log says sockets AND no EFA device sent more than
  MIN_FRACTION of the prediction (counters that moved mean the run was not the TCP baseline).
- A counter reset, a device missing before or after, an unreadable counter, no reading before the
  job, or no prediction: each its own outcome, never a pass.
- Cross-check (`cross_check`), where the log has inter-node channel lines (verdict.channel_claims) and the
  counters read: a host whose channels say NET/Libfabric on a node whose counters did not move (below
  MIN_FRACTION of the prediction; without one, not a byte), and a log with no inter-node channel via
  NET/Libfabric (all NET/Socket, say) while a node's counters carried the prediction, are contradictions:
  each is named in the message and kept in `contradictions`, and the verdict is no pass.

MIN_FRACTION, from the model's own error: over EFA the model's step rate is 7-19% optimistic against
the AWS sample's published steps/s (bench/results/2026-12-04-h200/README.md, "The AWS sample");
its bytes are counted from the
collectives FSDP2 issues under NCCL's ring accounting (bench/collectives.py), and tree or ring moves
the same bytes per NIC for two nodes. Charging the whole 19% to the bytes, twice over, gives a floor
of 1 - 2 x 0.19 = 0.62; 0.6 keeps a run that matches the model within its known error passing with
margin, while a run whose collectives stayed off the NIC (TCP fallback: a few kB of nothing) or went
half over sockets fails. Counted bytes above the prediction (EFA's packet headers, NCCL's LL
protocols, which send flags beside the data) are shown, never failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .counters import MISSING, OK, RESET, UNREAD, NicDelta
from .records import Evidence
from .verdict import ChannelClaim

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
CONTRADICTION = "witnesses-contradict"  # the log's channel lines and the counters tell two stories

# What a contradiction found by `cross_check` is.
LIBFABRIC_IDLE = "libfabric-channels-on-an-idle-nic"
NO_LIBFABRIC_BUSY = "no-libfabric-channels-on-a-busy-nic"
# Base outcomes a contradiction replaces: they weigh the log against the counters, and the cross-check is finer.
_REPLACED = (PASS, LOG_FAILED, BOTH_NOT_EFA, MOVED_LOG_UNSURE, NO_PREDICTION)
_FAMILY_TEXT = {"libfabric": "NET/Libfabric", "socket": "NET/Socket", "ib": "NET/IB", "other": "another network"}


@dataclass(frozen=True)
class Contradiction:
    """One claim of the log's channel lines that the counters deny: its kind, one line why, the log line, and
    the node whose counters deny it ("" when no log host could be placed on a node)."""

    kind: str
    message: str
    evidence: Evidence
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "node": self.node, "evidence": self.evidence.to_dict()}


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
    contradictions: tuple[Contradiction, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "min_fraction": self.min_fraction,
            "log_verdict": self.log_verdict,
            "nics": [n.to_dict() for n in self.nics],
            "detail": list(self.detail),
            "contradictions": [c.to_dict() for c in self.contradictions],
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
    claims: Sequence[ChannelClaim] = (),
    names: Mapping[str, str] | None = None,
) -> Witnesses:
    """Both witnesses into one verdict (module docstring). `found` is None when no reading was taken
    before the job; `predicted_per_nic` is the model's bytes per NIC for the run's steps, or None;
    `claims` the log's inter-node channel claims and `names` log host -> node, both for `cross_check`."""
    base = _judge(require, log_verdict, log_cause, found, predicted_per_nic)
    return with_contradictions(base, cross_check(claims, found or (), predicted_per_nic, names))


def with_contradictions(w: Witnesses, found: Sequence[Contradiction]) -> Witnesses:
    """``w`` with the contradictions named first in its message; never a pass. An outcome of its own
    (counters flat, the socket run's NIC busy, a broken reading) keeps its word."""
    if not found:
        return w
    named = "; ".join(c.message for c in found)
    return replace(
        w,
        outcome=CONTRADICTION if w.outcome in _REPLACED else w.outcome,
        ok=False,
        message=f"the NCCL log's channel lines and the EFA counters contradict each other: {named}; {w.message}",
        contradictions=tuple(found),
        detail=(*w.detail, *(c.evidence.render() for c in found)),
    )


def node_of(host: str, nodes: Iterable[str]) -> str | None:
    """The node a log host ran on, by name alone: the same name or the same first DNS label (log host
    `ip-172-31-6-104`, node `ip-172-31-6-104.ec2.internal`); Ray's `ray:<ip>` on the node EC2 names after that
    IP (`ip-10-0-1-5.<region>.compute.internal`, EC2's IP-based hostnames,
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-naming.html). None when no name fits (a
    pod's own hostname): the caller's `names` map says where such a host ran."""
    label = "ip-" + host[4:].replace(".", "-") if host.startswith("ray:") else host.split(".")[0]
    return next((n for n in sorted(nodes) if n == host or n.split(".")[0] == label), None)


def _idle(d: NicDelta, floor: float | None) -> bool:
    return d.sent < floor if floor is not None else d.sent == 0


def _sent(ds: Sequence[NicDelta], predicted: float | None) -> str:
    of = f" of {predicted:,.0f} predicted" if predicted else ""
    return ", ".join(f"{d.device} sent {d.sent:,} B{of}" for d in ds)


def cross_check(
    claims: Sequence[ChannelClaim],
    found: Sequence[NicDelta],
    predicted_per_nic: float | None,
    names: Mapping[str, str] | None = None,
) -> tuple[Contradiction, ...]:
    """What the log's inter-node channel claims and the counters that read (outcome ok) contradict; () where
    either is absent. A node's NIC did not move when every device sent below MIN_FRACTION of the prediction
    (without a prediction: no byte); it carried the run when a device reached that fraction."""
    by_node: dict[str, list[NicDelta]] = {}
    for d in found:
        if d.outcome == OK:
            by_node.setdefault(d.node, []).append(d)
    if not claims or not by_node:
        return ()
    floor = MIN_FRACTION * predicted_per_nic if predicted_per_nic else None
    idle = {n for n, ds in by_node.items() if all(_idle(d, floor) for d in ds)}
    busy = [d for ds in by_node.values() for d in ds if floor is not None and d.sent >= floor]
    fabric = [c for c in claims if c.family == "libfabric"]
    out, unplaced = [], []
    for c in fabric:
        node = (names or {}).get(c.host) or node_of(c.host, by_node)
        if node is None or node not in by_node:
            unplaced.append(c)
        elif node in idle:
            msg = (
                f"{c.host}'s {c.connections} inter-node channel line(s) say NET/Libfabric but the EFA counters of "
                f"{node} did not move ({_sent(by_node[node], predicted_per_nic)})"
            )
            out.append(Contradiction(LIBFABRIC_IDLE, msg, c.evidence, node))
    if unplaced and idle == set(by_node):  # no node moved, so none carried these hosts' channels
        hosts = ", ".join(sorted({c.host for c in unplaced}))
        moved = "; ".join(f"{n}: {_sent(ds, predicted_per_nic)}" for n, ds in sorted(by_node.items()))
        msg = f"the inter-node channel lines of {hosts} say NET/Libfabric but no node's EFA counters moved ({moved})"
        out.append(Contradiction(LIBFABRIC_IDLE, msg, unplaced[0].evidence))
    if not fabric and busy:
        said = ", ".join(_FAMILY_TEXT.get(f, f) for f in sorted({c.family for c in claims}))
        lines = sum(c.connections for c in claims)
        moved = ", ".join(f"{d.node}/{d.device} sent {d.sent:,} B" for d in busy)
        msg = f"all {lines} inter-node channel line(s) say {said}, none NET/Libfabric, but the EFA counters moved: "
        msg += moved
        out.append(Contradiction(NO_LIBFABRIC_BUSY, msg, claims[0].evidence))
    return tuple(out)


def _judge(
    require: str,
    log_verdict: str,
    log_cause: str,
    found: Sequence[NicDelta] | None,
    predicted_per_nic: float | None,
) -> Witnesses:
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
            "counter witness cannot be weighed: workloads/throughput_model.py has no measured row "
            "for this job's layout "
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
