"""Properties of the NCCL verdict's aggregation over processes and nodes (workloads/nccl_check, ``check_logs``
with require=efa): whatever the number, order and layout of the processes' logs, a run passes only when some
process sent inter-node traffic over EFA and none over anything else; no process that proves nothing ever
turns a run into a pass.

Each process is one NCCL process on its own host, logging with NCCL's ``host:pid:tid [dev] NCCL INFO`` prefix.
Its lines are copied from the fixtures in tests/fixtures/nccl (README.md there names each one's source), with
only the ranks changed:
- efa: ``NET/OFI Selected provider is efa, fabric is efa (found 1 nics)`` (efa_unprefixed_ofi1.20.log, line 2)
  and a ``via NET/Libfabric/0`` send channel (the same file, line 3);
- socket: ``Using network Socket`` (h200_socket.log, line 15) and a ``via NET/Socket/0`` channel
  (mixed_efa_socket.log, line 4);
- tcp: ``NET/OFI Selected Provider is tcp;ofi_rxm`` (provider_tcp_nccl2.4.6.log, line 2) and a Libfabric channel;
- unnamed: a Libfabric channel from a process that logged no provider (efa_ring_nccl2.7.8_ofi1.1.2.log has
  such processes);
- local: a ``via P2P/IPC/read`` channel between two GPUs of the host (efa_ring_nccl2.7.8_ofi1.1.2.log, line 1);
- tcp-local: the tcp provider line, and only a local channel (its traffic stayed on its host).
The rule under test is verdict.py's docstring: a process that logged no provider borrows the run's only one, so
beside a process that selected tcp, an unnamed one's Libfabric traffic is not proven EFA.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.nccl_check import check_logs

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True)
NET = "Channel 00/0 : {r}[0] -> {peer}[0] [send] via NET/{net}/0"
LINES = {
    "efa": ["NET/OFI Selected provider is efa, fabric is efa (found 1 nics)", NET.replace("{net}", "Libfabric")],
    "socket": ["Using network Socket", NET.replace("{net}", "Socket")],
    "tcp": ["NET/OFI Selected Provider is tcp;ofi_rxm", NET.replace("{net}", "Libfabric")],
    "unnamed": [NET.replace("{net}", "Libfabric")],
    "local": ["Channel 00/0 : {r}[0] -> {r}[1] via P2P/IPC/read"],
    "tcp-local": ["NET/OFI Selected Provider is tcp;ofi_rxm", "Channel 00/0 : {r}[0] -> {r}[1] via P2P/IPC/read"],
}
NOT_EFA = {"socket", "tcp"}  # a process whose inter-node traffic provably did not go over EFA
PROVES_NOTHING = {"unnamed", "local"}  # alone, neither proves nor refutes EFA


def _process_lines(kind: str, rank: int, world: int) -> list[str]:
    prefix = f"ip-10-0-0-{rank}:{4000 + rank}:{4100 + rank} [0] NCCL INFO "
    peer = (rank + 1) % world if world > 1 else 1
    return [prefix + line.format(r=rank, peer=peer) + "\n" for line in LINES[kind]]


def verdict(kinds: list[str], joined: bool, order: list[int]) -> str:
    """The run's verdict from one log file per process, or from one file where the processes' lines interleave
    (each process's own lines stay in order) as `kubectl logs` of several processes would show them."""
    per = [_process_lines(k, r, len(kinds)) for r, k in enumerate(kinds)]
    with tempfile.TemporaryDirectory() as d:
        if joined:
            queues, lines = [list(p) for p in per], []
            for who in order:
                if queues[who % len(queues)]:
                    lines.append(queues[who % len(queues)].pop(0))
            lines += [line for q in queues for line in q]
            paths = [Path(d) / "all.log"]
            paths[0].write_text("".join(lines))
        else:
            paths = [Path(d) / f"worker-{r}.log" for r in range(len(per))]
            for path, lines in zip(paths, per, strict=True):
                path.write_text("".join(lines))
        return check_logs(paths, require="efa").verdict


run = st.lists(st.sampled_from(sorted(LINES)), min_size=1, max_size=6)
layout = st.tuples(st.booleans(), st.lists(st.integers(min_value=0, max_value=5), max_size=24))


@PROPERTY
@given(kinds=run, how=layout)
def test_a_run_passes_exactly_when_some_process_used_efa_and_none_used_anything_else(kinds, how):
    borrowed_from_several = {"unnamed", "tcp-local"} <= set(kinds)  # the unnamed process's provider is unknown
    expected = "pass" if "efa" in kinds and not NOT_EFA & set(kinds) and not borrowed_from_several else None
    got = verdict(kinds, *how)
    assert (got == "pass") == (expected == "pass"), f"processes {kinds} (joined={how[0]}): got {got}"


@PROPERTY
@given(kinds=run, how=layout)
def test_one_process_off_efa_fails_the_run_wherever_it_is(kinds, how):
    if not NOT_EFA & set(kinds):
        kinds = [*kinds, "socket"]
    got = verdict(kinds, *how)
    assert got == "fail", f"processes {kinds} (joined={how[0]}): expected fail, got {got}"


@PROPERTY
@given(kinds=run, how=layout)
def test_an_unnamed_process_beside_two_providers_never_passes_on_the_efa_one(kinds, how):
    kinds = [k for k in kinds if k not in NOT_EFA] + ["efa", "tcp-local", "unnamed"]
    got = verdict(kinds, *how)
    assert got == "inconclusive", f"processes {kinds} (joined={how[0]}): expected inconclusive, got {got}"


@PROPERTY
@given(kinds=st.lists(st.sampled_from(sorted(PROVES_NOTHING)), min_size=1, max_size=6), how=layout)
def test_processes_that_prove_nothing_never_make_a_pass_however_many(kinds, how):
    got = verdict(kinds, *how)
    assert got == "inconclusive", f"processes {kinds} (joined={how[0]}): expected inconclusive, got {got}"
