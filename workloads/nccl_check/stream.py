"""Reading a log into a ScanState: in blocks of whole lines, with as much of the work left to C.

A Python loop over every line of a log costs several times more than reading it (a call of a
``bytes`` method costs about as much on a short line as a search through a megabyte does), so
``scan_stream`` reads 1 MiB blocks of whole lines and reads each block in one of two ways:
- by lines, when lines repeat (NCCL prints the same lines for every communicator, and its own
  prefixes carry no time): the block is split and every line looked up in a cache of what the
  lines read before do, both in C; Python then handles only the lines that do something again
  (a connection, a communicator, a warning) and those not seen before;
- by hits, when they do not (a time in front of every line): ``bytes.find``, in C over the whole
  block, finds the lines that hold one of a few literals (``parser.ALL_LITERALS``), and only
  those are read. Every line the check uses holds one: channel connections (`` via ``),
  networks, plugins, communicators, versions, warnings, run markers. The cache is then keyed on the line
  without its time, so a repeat at another time is not parsed again either.
The NCCL tags of the lines not read (ring listings, topology, tuning: the bulk of an init log)
are only counted. A line is parsed by the same code that ``scan_lines`` runs on every line, and
the tests hold both ways of reading a block to it. What a line says (its grammar, the
literals, the state it folds into) is ``parser.py``'s alone.

Memory: one block, one line of at most ``MAX_LINE_BYTES`` (longer lines are cut there), the
caches (at most 8 MiB of lines and 16k prefixes of at most 512 B) and the aggregates.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import compress, repeat
from typing import BinaryIO

from .parser import (
    ALL_LITERALS,
    ANSI,
    ANY_LITERAL,
    COMM_SHAPES,
    COMM_STARTS,
    CONNECTION_B,
    INFO_TAG,
    MARKER,
    MARKER_B,
    REPEAT_NOTHING,
    REPEATED,
    TAGGED,
    UNPREFIXED,
    WARN_TAG,
    LazyLine,
    Repeat,
    ScanState,
    apply_message,
    clip,
    identity,
    untimed,
    via_text,
)
from .records import Evidence, FileStatus, ProcKey

BLOCK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
# The bounds of _Scan's caches: each holds at most _CACHE_ENTRIES lines (or prefixes); the
# cache of repeats keeps lines of at most _CACHE_LINE_BYTES (NCCL's tree and ring listings run to
# a few kB) and _CACHE_BYTES in all, the cache of processes prefixes of at most _PREFIX_BYTES.
_CACHE_ENTRIES = 1 << 14
_CACHE_LINE_BYTES = 8192
_CACHE_BYTES = 8 << 20
_PREFIX_BYTES = 512
_CONNECT = object()  # [_CONNECT, connect's args, comm]: the Repeat of a channel connection
_UNTAGGED = object()  # [_UNTAGGED, Repeat]: a line without an NCCL tag, counted one by one
_UNSEEN = object()  # what the cache of repeats gives for a line not in it


def scan_stream(
    stream: BinaryIO,
    label: str,
    state: ScanState,
    status: FileStatus,
    run_id: str | None,
    in_scope_at_start: bool,
    max_bytes: int | None = None,
) -> None:
    """Read one binary stream into ``state`` and ``status``.

    Only lines in scope count: the whole file when ``in_scope_at_start``; otherwise (a combined
    log given a run id) the lines after a ``run_marker(run_id)`` line and before a marker of
    another run. Raises LogTooLarge once more than ``max_bytes`` were read (a file that keeps
    growing must not be read forever).
    """
    scan = _Scan(label, state, run_id, in_scope_at_start)
    for block in _blocks(stream):
        scan.block(block)
        if max_bytes is not None and stream.tell() > max_bytes:
            raise LogTooLarge(f"more than {max_bytes} bytes")
    scan.report(status, stream.tell())


class LogTooLarge(Exception):
    """A stream went on past the most bytes a log may have."""


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
            chunk, dropping = chunk[k + 1 :], False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE_BYTES:
                yield data[:MAX_LINE_BYTES] + b"\n"
                carry, dropping = b"", True
            else:
                carry = data
            continue
        carry = data[cut + 1 :]
        yield data if not carry else data[: cut + 1]
        if len(carry) > MAX_LINE_BYTES:
            yield carry[:MAX_LINE_BYTES] + b"\n"
            carry, dropping = b"", True


class _Scan:
    """The reading state of one stream: scope, line count, counters, caches."""

    mode = "auto"  # how blocks are read: "auto", "lines" or "hits" (the tests force each one)

    def __init__(self, label: str, state: ScanState, run_id: str | None, in_scope_at_start: bool) -> None:
        self.label, self.state, self.run_id = label, state, run_id
        self.scoped = run_id is not None and not in_scope_at_start  # markers move the scope
        self.in_scope = in_scope_at_start
        self.lineno = 0  # lines read so far
        self.nccl_lines = 0
        self.skipped = 0
        self._ident_cache: dict[bytes, tuple[ProcKey, int | None]] = {}
        # line (without its time, see untimed) -> what its repeats do: apply_message's Repeat,
        # [_CONNECT, connect's args, comm] or [_UNTAGGED, Repeat]; REPEAT_NOTHING also for the
        # lines that hold no literal (by lines, every line is looked up). Cleared when full.
        self._repeats: dict[bytes, Repeat | list] = {}
        self._repeat_bytes = 0  # the length of the lines in _repeats
        self._wait = 0  # by-hits blocks left before the next by-lines try
        self._backoff = 1  # the wait after a by-lines block with too many unseen lines

    def report(self, status: FileStatus, nbytes: int) -> None:
        status.lines, status.bytes = self.lineno, nbytes
        status.nccl_lines, status.out_of_scope_lines = self.nccl_lines, self.skipped

    def ident(self, prefix: bytes) -> tuple[ProcKey, int | None]:
        cache = self._ident_cache
        found = cache.get(prefix)
        if found is None:
            key = untimed(prefix)  # the same process and thread at another time
            found = cache.get(key)
            if found is None:
                clean = ANSI.sub(b"", prefix) if b"\x1b" in prefix else prefix
                found = identity(clean.decode("utf-8", "replace"), self.label)
                if len(cache) >= _CACHE_ENTRIES:
                    cache.clear()  # prefixes that never repeat fill it
                if len(key) <= _PREFIX_BYTES:
                    cache[key] = found
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
        """A channel connection (see ScanState.connect). Its comm is the one its thread initialised
        last, so its repeats are connected again when that changes (the Repeat remembers the comm
        it was last connected under)."""
        found = self._ident_cache.get(prefix)
        proc, tid = found if found is not None else self.ident(prefix)
        args = ((proc, tid), (proc, None), proc, (via, *groups))
        return [_CONNECT, args, self.connect(lineno, raw, args)]

    def connect(self, lineno: int, raw: bytes, args: tuple) -> str | None:
        return self.state.connect(*args, LazyLine(self.label, lineno, raw))

    def untagged(self, lineno: int, raw: bytes, start: int) -> list | None:
        """A line without an NCCL tag whose text matched UNPREFIXED at ``start``. Returns what its
        repeats in scope do: [_UNTAGGED, the Repeat of its message] (each one counts as an NCCL
        line), or None for a run marker or a line out of scope."""
        if raw.startswith(MARKER_B, start):
            self.marker(lineno, raw)
            return None
        if not self.in_scope:
            self.skipped += 1
            return None
        self.nccl_lines += 1
        m = CONNECTION_B.match(raw, start)
        if m is not None:  # a channel connection without NCCL's prefix
            rep = self.connection(lineno, raw, raw[:start], m.groups(), via_text(raw[m.end() :]))
        else:
            rep = self.message(lineno, raw, raw[:start], raw[start:], False)
        return None if rep is None else [_UNTAGGED, rep]

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
        i = raw.find(INFO_TAG)
        k = raw.find(WARN_TAG) if i < 0 else -1
        if i < 0 and k < 0:
            m = UNPREFIXED.search(raw)
            if m is None:
                return REPEAT_NOTHING
            return self.untagged(lineno, raw, m.start())  # counted one by one, not by block
        if count_tags:
            n = raw.count(INFO_TAG) + raw.count(WARN_TAG)
            if self.in_scope:
                self.nccl_lines += n
            else:
                self.skipped += n
        if not self.in_scope:
            return None
        if k >= 0:
            return self.message(lineno, raw, raw[:k], raw[k + len(WARN_TAG) :], True)
        m = TAGGED.match(raw, i)
        if m is None:
            return REPEAT_NOTHING
        if m.group(6) is not None:
            return self.connection(lineno, raw, raw[:i], m.group(1, 2, 3, 4, 5), via_text(m.group(6)))
        j = i + len(INFO_TAG)
        if raw.startswith(COMM_STARTS, j) and all(raw.find(s, j) < 0 for s in COMM_SHAPES):
            return REPEAT_NOTHING  # e.g. "comm 0x... Destroy COMPLETE": nothing about the network
        return self.message(lineno, raw, raw[:i], raw[j:], False)

    # -- a block ----------------------------------------------------------------------------

    def block(self, blk: bytes) -> None:
        """Read a block of whole lines (it ends with b"\\n"), by lines or by hits (see the module's
        docstring). By lines while the lines of a block are mostly lines read before; after a
        block with more than 1 line in 8 not seen before, by hits for 1, 2, 4... up to 64 blocks
        before trying by lines again (blocks whose lines mostly begin with a time not counted:
        those lines never repeat)."""
        if blk.find(b"\x1b") >= 0:
            blk = ANSI.sub(b"", blk)
        mode = self.mode
        if mode == "lines" or (mode == "auto" and self._wait == 0):
            lines = blk.split(b"\n")
            lines.pop()  # the empty rest after the last newline
            unseen = self._by_lines(blk, lines)
            if unseen * 8 > len(lines):
                self._wait = self._backoff
                self._backoff = min(2 * self._backoff, 64)
            else:
                self._backoff = 1
        elif self._by_hits(blk):
            self._wait -= 1

    def replay(self, rep: Repeat | list, lineno: int, raw: bytes) -> None:
        """Do again what a line read before did (``rep``, not empty), without parsing it."""
        fold, args = rep[0], rep[1]
        if fold is _UNTAGGED:
            self.nccl_lines += 1
            rep = args
            if not rep:
                return
            fold, args = rep[0], rep[1]
        if fold is _CONNECT:
            thread_comm = self.state.thread_comm
            if (thread_comm.get(args[0]) or thread_comm.get(args[1])) != rep[2]:
                rep[2] = self.connect(lineno, raw, args)  # its thread is on another comm now
        else:
            fold(self.state, LazyLine(self.label, lineno, raw), *args)

    def remember(self, raw: bytes, rep: Repeat | list) -> None:
        """Keep what the line ``raw`` does for its repeats (see replay)."""
        n = len(raw)
        if n <= _CACHE_LINE_BYTES:
            if len(self._repeats) >= _CACHE_ENTRIES or self._repeat_bytes + n > _CACHE_BYTES:
                self._repeats.clear()  # lines that never repeat fill it
                self._repeat_bytes = 0
            if raw not in self._repeats:  # by lines, a line may come again in its block
                self._repeat_bytes += n
            self._repeats[raw] = rep

    def _by_lines(self, blk: bytes, lines: list[bytes]) -> int:
        """Read a block split into ``lines``; returns how many were not in the cache."""
        reps = list(map(self._repeats.get, lines, repeat(_UNSEEN)))
        thread_comm = self.state.thread_comm
        has_literal = ANY_LITERAL.search
        first = self.lineno  # lines before this block
        in_scope = in_scope_at_start = self.in_scope
        flips: list[tuple[int, bool]] = []  # (index of a marker line, the scope after it)
        unseen = 0
        # the lines whose entry is not REPEAT_NOTHING (an empty tuple): unseen or doing something
        for i in compress(range(len(lines)), reps):
            rep, raw = reps[i], lines[i]
            if rep is _UNSEEN:
                unseen += 1
                if has_literal(raw) is None:
                    self.remember(raw, REPEAT_NOTHING)  # in scope or not, it does nothing
                    continue
                key = untimed(raw)
                if key is raw or (rep := self._repeats.get(key, _UNSEEN)) is _UNSEEN:
                    rep = self.read(first + i + 1, raw, False)
                    if rep is not None and in_scope:
                        self.remember(key, rep)
                    if self.in_scope != in_scope:
                        in_scope = self.in_scope
                        flips.append((i, in_scope))
                    continue
                if not rep:
                    continue  # REPEAT_NOTHING
            if in_scope:
                if rep[0] is _CONNECT and (thread_comm.get(rep[1][0]) or thread_comm.get(rep[1][1])) == rep[2]:
                    continue  # connected under its thread's comm already (replay's first test)
                self.replay(rep, first + i + 1, raw)
            elif rep[0] is _UNTAGGED:
                self.skipped += 1  # out of scope, a line read before is only counted
        self.lineno = first + len(lines)
        self._count_tags(blk, in_scope_at_start, [(sum(map(len, lines[:i])) + i, after) for i, after in flips])
        return unseen

    def _by_hits(self, blk: bytes) -> bool:
        """Read the lines of a block that hold one of LITERALS or WARN_TAG, in order. Returns
        whether reading by lines may pay: not when most of those lines begin with a time."""
        find, rfind, count = blk.find, blk.rfind, blk.count
        hits: list[int] = []
        add = hits.append
        for lit in ALL_LITERALS:
            k = find(lit)
            while k >= 0:
                add(k)
                k = find(lit, k + 1)
        hits.sort()
        repeats = self._repeats
        thread_comm = self.state.thread_comm
        first = self.lineno  # lines before this block
        in_scope = in_scope_at_start = self.in_scope
        flips: list[tuple[int, bool]] = []  # (where a marker line starts, the scope after it)
        ln, pos = first, 0  # ln: the lines before the block plus the newlines before pos
        end = -1  # end of the last line read: the hits before it are in that line
        read = timed = 0
        for k in hits:
            if k < end:
                continue
            ls = rfind(b"\n", 0, k) + 1
            end = find(b"\n", k)
            raw = blk[ls:end]
            read += 1
            key = untimed(raw)
            if key is not raw:
                timed += 1
            rep = repeats.get(key) if in_scope else None
            if rep is not None and (
                not rep  # REPEAT_NOTHING
                or rep[0] is _CONNECT
                and (thread_comm.get(rep[1][0]) or thread_comm.get(rep[1][1])) == rep[2]
            ):
                continue
            ln += count(b"\n", pos, ls)
            pos = ls
            if rep is not None:
                self.replay(rep, ln + 1, raw)
                continue
            rep = self.read(ln + 1, raw, False)
            if rep is not None and in_scope:
                self.remember(key, rep)
            if self.in_scope != in_scope:
                in_scope = self.in_scope
                flips.append((ls, in_scope))
        self.lineno = ln + count(b"\n", pos)
        self._count_tags(blk, in_scope_at_start, flips)
        return 2 * timed <= read

    def _count_tags(self, blk: bytes, in_scope: bool, flips: list[tuple[int, bool]]) -> None:
        """Add the NCCL tags of ``blk`` to the in- and out-of-scope counts; ``flips``: (offset of a
        marker line, the scope from there on), in order."""
        start = 0
        for stop, after in flips + [(len(blk), in_scope)]:
            n = blk.count(INFO_TAG, start, stop) + blk.count(WARN_TAG, start, stop)
            if in_scope:
                self.nccl_lines += n
            else:
                self.skipped += n
            start, in_scope = stop, after
