"""Measure the NCCL check's rate on the largest real log, against the rate it is meant to meet.

The check reads a log with a plain Python loop over its lines (workloads/nccl_check/parser.py,
LineReader). The largest real NCCL log in tests/fixtures/nccl is a whole, untrimmed NCCL 2.28 init
log of 13 kB (see the README there for its source); a run's per-rank logs are of that size. The
goal, GOAL_MB_S, leaves that log checked in about a millisecond and a log a thousand times larger
than any real one (13 MB) in about a second.

    python bench/nccl_check_rate.py            # the largest real log, checked --repeat times
    python bench/nccl_check_rate.py --size-mb 64   # and a log of that size made of repeats of it

prints the rates and writes them, with the machine, the date and this command, to
bench/results/nccl-check-rate-<date>.json (--out to choose another file). The rate is CPU time:
the check is single-threaded, and CPU time is the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.nccl_check import check_logs  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "nccl"
GOAL_MB_S = 10.0


def machine() -> str:
    """The CPU model, its core count and Python's version: what the rate depends on."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.machine())
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def largest_real_log() -> Path:
    return max(FIXTURES.glob("*.log"), key=lambda p: p.stat().st_size)


def cpu_seconds_per_check(path: Path, repeat: int) -> float:
    """The median CPU seconds of ``repeat`` checks of ``path``."""
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        check_logs([path], require="efa")
        times.append(time.process_time() - c0)
    return statistics.median(times)


def measure(path: Path, repeat: int) -> dict:
    nbytes = path.stat().st_size
    seconds = cpu_seconds_per_check(path, repeat)
    return {"bytes": nbytes, "cpu_s": round(seconds, 6), "mb_per_s": round(nbytes / 1e6 / seconds, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=200, help="checks of the real log; the median counts (default 200)")
    ap.add_argument("--size-mb", type=int, default=0, help="also check a log of this size made of its repeats")
    ap.add_argument("--out", type=Path, default=None, help="the JSON record (default bench/results/...)")
    args = ap.parse_args()
    real = largest_real_log()
    record = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "goal_mb_per_s": GOAL_MB_S,
        "largest_real_log": {"file": real.relative_to(REPO).as_posix(), **measure(real, args.repeat)},
    }
    if args.size_mb:
        with tempfile.TemporaryDirectory() as tmp:
            big = Path(tmp) / "repeated.log"
            data = real.read_bytes()
            big.write_bytes(data * max(1, args.size_mb * 1_000_000 // len(data)))
            record["repeated_log"] = measure(big, 1)
    met = all(r["mb_per_s"] >= GOAL_MB_S for k, r in record.items() if k.endswith("_log"))
    record["goal_met"] = met
    out = args.out or REPO / "bench" / "results" / f"nccl-check-rate-{record['date'][:10]}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    print(f"goal {GOAL_MB_S} MB/s per core: {'met' if met else 'NOT met'}; written to {out}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
