"""Measure how fast workloads.nccl_check streams a large NCCL log, and its peak memory.

The log is made by repeating the real NCCL lines of tests/fixtures/nccl/*.log (see the README
there for their sources) until it reaches --size-mb; every line is real NCCL output, only the
repetition is synthetic (and, with --timestamps, the time kubectl logs --timestamps would put in
front of each line). The check runs once, single-threaded, on the written file.

    python bench/nccl_check_rate.py --size-mb 1024
    python bench/nccl_check_rate.py --size-mb 1024 --fixtures h200_socket.log
    python bench/nccl_check_rate.py --size-mb 1024 --timestamps
prints: size, wall and CPU seconds with MB/s for each (the checker is single-threaded; CPU time
is the steadier figure on a shared machine), peak RSS before and after the check, the verdict,
and two rates that say how fast this machine is at the moment, so that runs on different or busy
machines can be compared: the plainest Python read loop over the same file (each line read and
searched once for "NCCL INFO "), and one pass of C over it (1 MiB blocks read, their newlines
counted; the checker makes several such passes over each block).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.nccl_check import check_logs  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl"


def peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_log(path: Path, size_mb: int, pattern: str = "*.log", timestamps: bool = False) -> int:
    sources = sorted(FIXTURES.glob(pattern))
    if not sources:
        raise SystemExit(f"no fixture matches {pattern!r} in {FIXTURES}")
    block = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sources)
    target = size_mb * 1024 * 1024
    written = 0
    chunk = block * max(1, (8 * 1024 * 1024) // len(block))
    lines = block.splitlines(keepends=True)
    n = 0
    with open(path, "wb") as f:
        while written < target:
            if timestamps:  # a repeat of the fixtures at a time, so that the writer stays small
                chunk = b"".join(stamp(n + i) + line for i, line in enumerate(lines))
                n += len(lines)
            f.write(chunk)
            written += len(chunk)
    return written


def stamp(i: int) -> bytes:
    """The time kubectl logs --timestamps puts in front of line ``i`` (RFC 3339, nanoseconds),
    a line every 7 microseconds from 20:00: distinct for every line."""
    us = 7 * i
    sec = us // 1_000_000
    return b"2026-12-03T%02d:%02d:%02d.%09dZ " % (20 + sec // 3600 % 4, sec // 60 % 60, sec % 60, us % 1_000_000 * 1000)


def bare_loop_seconds(path: Path) -> float:
    """CPU seconds of reading ``path`` line by line with one substring search per line."""
    c0 = time.process_time()
    with open(path, "rb") as f:
        for line in f:
            line.find(b"NCCL INFO ")
    return time.process_time() - c0


def c_pass_seconds(path: Path) -> float:
    """CPU seconds of reading ``path`` in 1 MiB blocks and counting the newlines of each."""
    c0 = time.process_time()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            block.count(b"\n")
    return time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the generated log (default 1024)")
    ap.add_argument("--dir", default=None, help="where to write the log (default: a temp dir)")
    ap.add_argument(
        "--fixtures",
        default="*.log",
        help="glob of fixture files to repeat (default: all; h200_socket.log is a whole, "
        "untrimmed NCCL 2.28 log, the others are trimmed to their interesting lines)",
    )
    ap.add_argument(
        "--timestamps",
        action="store_true",
        help="put a distinct kubectl-style timestamp in front of every line, so that no line "
        "repeats (the reader cannot take its shortcut for lines read before)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "nccl_big.log"
        nbytes = write_log(path, args.size_mb, args.fixtures, args.timestamps)
        rss_before = peak_rss_mib()
        t0, c0 = time.perf_counter(), time.process_time()
        report = check_logs([path], require="efa")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss_after = peak_rss_mib()
        mb = nbytes / 1e6
        print(
            f"log: {mb:.0f} MB ({nbytes} bytes, {report.files[0].lines} lines) from repeated fixture lines "
            f"({args.fixtures}{', each with a distinct timestamp' if args.timestamps else ''})"
        )
        print(f"check: {seconds:.2f} s wall, {mb / seconds:.0f} MB/s; {cpu:.2f} s CPU, {mb / cpu:.0f} MB/s per core")
        print(f"peak RSS: {rss_before:.0f} MiB before the check, {rss_after:.0f} MiB after")
        print(f"verdict: {report.verdict} ({report.to_dict()['summary']['connections']} distinct connections)")
        bare = bare_loop_seconds(path)
        print(
            f"plain read loop on the same file: {bare:.2f} s CPU, {mb / bare:.0f} MB/s per core "
            f"(the check runs at {bare / cpu:.0%} of it)"
        )
        one = c_pass_seconds(path)
        print(f"one C pass over the same file: {one:.2f} s CPU, {mb / one:.0f} MB/s per core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
