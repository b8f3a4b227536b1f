"""Reading a log into a ScanState: in blocks of whole lines, with the search left to C.

A Python loop over every line of a log costs several times more than reading it (each call of a
``bytes`` method costs about as much on a short line as a search through a megabyte does), so
``scan_stream`` reads 1 MiB blocks of whole lines and looks in each for a few literals
(``_LITERALS``) with ``bytes.find``, which runs in C over the whole block. Every line the check
uses holds one of them: channel connections (`` via ``), networks, plugins, communicators,
versions, warnings, run markers. Only those lines are read in Python, in order, by the same code
that ``scan_lines`` runs on every line; the NCCL tags of the other lines (ring listings,
topology, tuning: the bulk of an init log) are only counted. A line read before is not parsed
again: what its repeat does (nothing, or a fold of what was parsed) is kept with it. So both
give the same result, and the tests hold the block reader to the line reader.

Memory: one block, one line of at most ``MAX_LINE_BYTES`` (longer lines are cut there), and the
aggregates.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from typing import BinaryIO, Iterable, Iterator

from .model import Connection, Evidence, FileStatus, ProcKey
from .parser import (
    ANSI,
    MARKER,
    MARKER_B,
    REPEATED,
    REPEAT_NOTHING,
    LazyLine,
    Repeat,
    ScanState,
    apply_message,
    clip,
    classify_transport,
    identity,
    via_text,
)

BLOCK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
# The caches of _Scan hold at most this many lines (or prefixes) of at most this many bytes.
_CACHE_ENTRIES = 1 << 14
_CACHE_LINE_BYTES = 512
_CONNECT = object()  # [_CONNECT, connect's args, comm]: the Repeat of a channel connection

_INFO = b"NCCL INFO "
_WARN = b"NCCL WARN"
# An INFO message the parser reads, matched at its tag. Groups 1-6: a channel connection
# (channel, sub-channel, source, destination, direction, the rest of the line after "via "):
# "Channel 00/0 : 3[3] -> 4[0] [send] via ...", older "Ring 00 : 3 -> 4 via ...", and CollNet's
# one-rank form "CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA" (the peer is the network).
_TAGGED = re.compile(
    rb"NCCL INFO (?:"
    rb"(?:Channel|Ring|CollNet|NVLS) (\d+)(?:/(\d+))? : (\d+)(?:\[[0-9a-fx]+\])?(?: -> (\d+)"
    rb"(?:\[[0-9a-fx]+\])?)?(?: \[(send|receive)\])? via ([^\n]*)"
    rb"|NET/OFI (?:Selected|Initializing|Using aws|Unable|Couldn't|OFI)|NET/Plugin|Using network"
    rb"|Using internal|NCCL version|comm 0x|ncclComm|Initialized NET plugin|Assigned NET plugin"
    rb"|Failed to initialize NET plugin)"
)
_COMM_STARTS = (b"comm 0x", b"ncclComm")
# A line without an NCCL tag that is an NCCL message all the same: from excerpts without
# NCCL's prefix, the bare version line of older releases, the training module's run markers.
# (Ring listings and lines about sockets or IB carry nothing the check uses, so a bare one is
# not read.)
UNPREFIXED = re.compile(
    rb"(?:Channel|Ring|CollNet|NVLS) \d+(?:/\d+)? : \d[^\n]* via |NCCL version|NET/(?:OFI|Plugin)"
    rb"|Using network|comm 0x[0-9a-f]+ rank [^\n]*(?:nNodes|- Init)|" + MARKER_B
)
# Every line the parser uses holds one of these or _WARN (block() looks for _WARN first): a
# message of _TAGGED, an UNPREFIXED line. "NET" stands for NET/OFI, NET/Plugin and the
# Initialized, Assigned and Failed to initialize NET plugin lines; " rank " for the communicator
# lines, which apply_message reads only as "comm 0x... rank R ..." ("comm 0x" itself would also
# find every line of NCCL_DEBUG_SUBSYS=COLL). Each one more costs a pass over every block.
_LITERALS = (b" via ", b"NET", b"Using ", b" rank ", b"NCCL version", MARKER_B)


def scan_stream(
    stream: BinaryIO,
    label: str,
    state: ScanState,
    status: FileStatus,
    run_id: str | None,
    in_scope_at_start: bool,
) -> None:
    """Read one binary stream into ``state`` and ``status``.

    Only lines in scope count: the whole file when ``in_scope_at_start``; otherwise (a combined
    log given a run id) the lines after a ``run_marker(run_id)`` line and before a marker of
    another run.
    """
    scan = _Scan(label, state, run_id, in_scope_at_start)
    for block in _blocks(stream):
        scan.block(block)
    scan.report(status, stream.tell())


def scan_lines(
    lines: Iterable[bytes],
    label: str,
    state: ScanState,
    status: FileStatus,
    run_id: str | None,
    in_scope_at_start: bool,
) -> None:
    """``scan_stream`` line by line: the same result, more slowly (and lines are not cut at
    MAX_LINE_BYTES)."""
    scan = _Scan(label, state, run_id, in_scope_at_start)
    nbytes = 0
    for raw in lines:
        nbytes += len(raw)
        scan.line(raw)
    scan.report(status, nbytes)


def _blocks(stream: BinaryIO) -> Iterator[bytes]:
    """Blocks of whole lines, each ending with b"\\n"; a last line without one gets one. A line
    longer than MAX_LINE_BYTES is cut there and the rest of it dropped."""
    carry = b""
    dropping = False  # inside the dropped rest of a long line
    while True:
        chunk = stream.read(BLOCK_BYTES)
        if not chunk:
            if carry and not dropping:
                yield carry + b"\n"
            return
        if dropping:
            k = chunk.find(b"\n")
            if k < 0:
                continue
            chunk, dropping = chunk[k + 1:], False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE_BYTES:
                yield data[:MAX_LINE_BYTES] + b"\n"
                carry, dropping = b"", True
            else:
                carry = data
            continue
        carry = data[cut + 1:]
        yield data if not carry else data[: cut + 1]
        if len(carry) > MAX_LINE_BYTES:
            yield carry[:MAX_LINE_BYTES] + b"\n"
            carry, dropping = b"", True


class _Scan:
    """The reading state of one stream: scope, line count, counters, caches."""

    def __init__(self, label: str, state: ScanState, run_id: str | None, in_scope_at_start: bool) -> None:
        self.label, self.state, self.run_id = label, state, run_id
        self.scoped = run_id is not None and not in_scope_at_start  # markers move the scope
        self.in_scope = in_scope_at_start
        self.lineno = 0  # lines read so far
        self.nccl_lines = 0
        self.skipped = 0
        self._ident_cache: dict[bytes, tuple[ProcKey, int | None]] = {}
        # line -> what its repeats do (apply_message's Repeat, or [_CONNECT, connect's args, comm]):
        # a log that repeats lines (each comm prints the same plugin and network lines; NCCL
        # prefixes carry no timestamp) parses each one once. Cleared when full.
        self._repeats: dict[bytes, Repeat | list] = {}

    def report(self, status: FileStatus, nbytes: int) -> None:
        status.lines, status.bytes = self.lineno, nbytes
        status.nccl_lines, status.out_of_scope_lines = self.nccl_lines, self.skipped

    def ident(self, prefix: bytes) -> tuple[ProcKey, int | None]:
        found = self._ident_cache.get(prefix)
        if found is None:
            clean = ANSI.sub(b"", prefix) if b"\x1b" in prefix else prefix
            found = identity(clean.decode("utf-8", "replace"), self.label)
            if len(self._ident_cache) > _CACHE_ENTRIES:
                self._ident_cache.clear()  # timestamps in prefixes make every prefix unique
            if len(prefix) <= _CACHE_LINE_BYTES:
                self._ident_cache[prefix] = found
        return found

    def marker(self, lineno: int, raw: bytes) -> None:
        """Record a run-marker line; it moves the scope of a combined log."""
        text = raw.decode("utf-8", "replace").strip()
        mk = MARKER.search(text)
        if mk is None:
            return
        rid = mk.group(1)
        self.state.markers.setdefault(rid, Evidence(self.label, lineno, clip(text), "run marker"))
        if self.scoped:
            self.in_scope = rid == self.run_id

    def message(self, lineno: int, raw: bytes, prefix: bytes, msg_b: bytes, warn: bool) -> Repeat | None:
        """Fold one message in; returns what its repeats do (see apply_message)."""
        msg = msg_b.decode("utf-8", "replace").strip()
        if "[repeated" in msg:
            msg = REPEATED.sub("", msg)
        proc, tid = self.ident(prefix)
        return apply_message(self.state, proc, tid, msg, warn, LazyLine(self.label, lineno, raw))

    def connection(self, lineno: int, raw: bytes, prefix: bytes, groups: tuple, via: bytes) -> list:
        """A channel connection; kept once per (process, comm, transport, channel, ranks). The
        comm is the one its thread initialised last, so its repeats are connected again (the
        Repeat remembers the comm it was last connected under)."""
        found = self._ident_cache.get(prefix)
        proc, tid = found if found is not None else self.ident(prefix)
        args = ((proc, tid), (proc, None), proc, (via, *groups))
        return [_CONNECT, args, self.connect(lineno, raw, *args)]

    def connect(self, lineno: int, raw: bytes, thread: tuple, any_thread: tuple, proc: ProcKey, rest: tuple) -> str | None:
        """Keep the connection under its thread's comm, if new; returns that comm."""
        thread_comm = self.state._thread_comm
        comm = thread_comm.get(thread) or thread_comm.get(any_thread)
        key = (proc, comm, *rest)
        connections = self.state.connections
        if key not in connections:
            via, channel, _sub, src, dst, direction = rest
            connections[key] = Connection(
                proc, comm, int(channel), int(src), int(dst) if dst else None,
                direction.decode() if direction else None,
                classify_transport(via.decode("utf-8", "replace")),
                Evidence(self.label, lineno, clip(raw.decode("utf-8", "replace").strip())),
            )
        return comm

    def untagged(self, lineno: int, raw: bytes, start: int) -> None:
        """A line without an NCCL tag whose text matched UNPREFIXED at ``start``."""
        if raw.startswith(MARKER_B, start):
            self.marker(lineno, raw)
            return
        if not self.in_scope:
            self.skipped += 1
            return
        self.nccl_lines += 1
        self.message(lineno, raw, raw[:start], raw[start:], False)

    # -- one line ------------------------------------------------------------------------------

    def line(self, raw: bytes) -> None:
        """Read the next line of the stream."""
        self.lineno += 1
        self.read(self.lineno, raw, True)

    def read(self, lineno: int, raw: bytes, count_tags: bool) -> Repeat | list | None:
        """Read line ``lineno``. ``count_tags``: add its NCCL tags to the in- or out-of-scope
        count (``block`` counts a whole block's tags at once instead). Returns what the line's
        repeats in scope do, or None where they have to be read again."""
        if raw.find(b"\x1b") >= 0:
            raw = ANSI.sub(b"", raw)
        i = raw.find(_INFO)
        k = raw.find(_WARN) if i < 0 else -1
        if i < 0 and k < 0:
            m = UNPREFIXED.search(raw)
            if m is None:
                return REPEAT_NOTHING
            self.untagged(lineno, raw, m.start())  # counted one by one: read again
            return None
        if count_tags:
            n = raw.count(_INFO) + raw.count(_WARN)
            if self.in_scope:
                self.nccl_lines += n
            else:
                self.skipped += n
        if not self.in_scope:
            return None
        if k >= 0:
            return self.message(lineno, raw, raw[:k], raw[k + len(_WARN):], True)
        m = _TAGGED.match(raw, i)
        if m is None:
            return REPEAT_NOTHING
        if m.group(6) is not None:
            return self.connection(lineno, raw, raw[:i], m.group(1, 2, 3, 4, 5), via_text(m.group(6)))
        j = i + len(_INFO)
        if raw.startswith(_COMM_STARTS, j) and raw.find(b"nNodes", j) < 0 and raw.find(b"- Init", j) < 0:
            return REPEAT_NOTHING  # e.g. "comm 0x... Destroy COMPLETE": nothing about the network
        return self.message(lineno, raw, raw[:i], raw[j:], False)

    # -- a block ----------------------------------------------------------------------------

    def block(self, blk: bytes) -> None:
        """Read a block of whole lines (it ends with b"\\n"): only the lines that hold one of
        _LITERALS, in order; the NCCL tags of all the others are counted, not read."""
        if blk.find(b"\x1b") >= 0:
            blk = ANSI.sub(b"", blk)
        find, rfind, count = blk.find, blk.rfind, blk.count
        warns: list[int] = []  # where the NCCL WARN tags are: counted from here, not again
        k = find(_WARN)
        while k >= 0:
            warns.append(k)
            k = find(_WARN, k + 1)
        hits = warns[:]
        add = hits.append
        for lit in _LITERALS:
            k = find(lit)
            while k >= 0:
                add(k)
                k = find(lit, k + 1)
        hits.sort()
        repeats = self._repeats
        state, label = self.state, self.label
        thread_comm = state._thread_comm
        first = self.lineno  # lines before this block
        in_scope = in_scope_at_start = self.in_scope
        flips: list[tuple[int, bool]] = []  # (where a marker line starts, the scope after it)
        ln, pos = first, 0  # ln: the lines before the block plus the newlines before pos
        end = -1  # end of the last line read: the hits before it are in that line
        for k in hits:
            if k < end:
                continue
            ls = rfind(b"\n", 0, k) + 1
            end = find(b"\n", k)
            raw = blk[ls:end]
            rep = repeats.get(raw) if in_scope else None
            if rep is not None:
                if not rep:
                    continue  # REPEAT_NOTHING
                fold, args = rep[0], rep[1]
                if fold is _CONNECT:
                    comm = thread_comm.get(args[0]) or thread_comm.get(args[1])
                    if comm == rep[2]:
                        continue  # connected under this comm already
                ln += count(b"\n", pos, ls)
                pos = ls
                if fold is _CONNECT:
                    rep[2] = self.connect(ln + 1, raw, *args)
                else:
                    fold(state, LazyLine(label, ln + 1, raw), *args)
                continue
            ln += count(b"\n", pos, ls)
            pos = ls
            rep = self.read(ln + 1, raw, False)
            if rep is not None and in_scope and len(raw) <= _CACHE_LINE_BYTES:
                if len(repeats) >= _CACHE_ENTRIES:
                    repeats.clear()  # lines that never repeat (timestamps) fill it
                repeats[raw] = rep
            if self.in_scope != in_scope:
                in_scope = self.in_scope
                flips.append((ls, in_scope))
        self.lineno = ln + count(b"\n", pos)
        start, in_scope = 0, in_scope_at_start
        for stop, after in flips + [(len(blk), in_scope_at_start)]:
            n = count(_INFO, start, stop) + bisect_left(warns, stop) - bisect_left(warns, start)
            if in_scope:
                self.nccl_lines += n
            else:
                self.skipped += n
            start, in_scope = stop, after
