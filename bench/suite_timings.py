"""Time the test tiers and count their tests; write the figures with machine, date and command.

    python bench/suite_timings.py                  # both tiers: the default, then the slow tier
    python bench/suite_timings.py --tier default   # one tier

Each tier is the command TESTING.md gives (`python -m pytest -n 2`, `python -m pytest -m slow`), run
from the repository root with a JUnit XML report, whose counts are read back. Writes
bench/results/suite-<date>.json (--out to choose another file): per tier its command, wall seconds, exit
code, the number of tests passed, failed, errored and skipped and the machine's load average before and
after, with the machine, the date and the commit. README.md and TESTING.md link to the newest such file
instead of restating its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What each tier adds to `python -m pytest`, as README.md and .ci/run run it: the default tier on two pytest-xdist
# workers, the slow tier (real runs only) in one process (TESTING.md says why).
TIERS = {"default": ["-n", "2"], "slow": ["-m", "slow"]}


def counts(junit_xml: str) -> dict[str, int]:
    """Tests run, passed, failed, errored and skipped, from pytest's --junitxml report."""
    root = ET.fromstring(junit_xml)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {
        "tests": total["tests"],
        "passed": passed,
        "failed": total["failures"],
        "errors": total["errors"],
        "skipped": total["skipped"],
    }


def run_tier(name: str, extra: list[str], cwd: Path, python: str = sys.executable) -> dict:
    """Run one tier in ``cwd`` and return its record. Exit code 5 (no test collected) is no failure."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        argv = [python, "-m", "pytest", *extra]
        load_before = _load()
        t0 = time.perf_counter()
        rc = subprocess.run([*argv, f"--junitxml={report}", "-p", "no:cacheprovider"], cwd=cwd).returncode
        wall = time.perf_counter() - t0
        load_after = _load()
        found = counts(report.read_text()) if report.exists() else {}
    command = " ".join(["python", "-m", "pytest", *extra])
    return {
        "tier": name,
        "command": command,
        "wall_s": round(wall, 1),
        "exit_code": rc,
        **found,
        # The machine's 1-minute load average before and after: other work on it slows the tier.
        "load_average": [load_before, load_after],
    }


def _load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.machine())
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def commit(cwd: Path) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True)
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=TIERS, action="append", help="a tier to run (default: both, in order)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file (default bench/results/suite-<date>.json)")
    ap.add_argument("--cwd", type=Path, default=REPO, help=argparse.SUPPRESS)  # the tests run it on a tiny suite
    args = ap.parse_args(argv)
    now = datetime.now(UTC)
    record: dict[str, object] = {
        "date": now.isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(args.cwd),
        "command": " ".join(["python", "bench/suite_timings.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    tiers = [run_tier(name, TIERS[name], args.cwd) for name in args.tier or list(TIERS)]
    record["tiers"] = tiers
    out = args.out or REPO / "bench" / "results" / f"suite-{now.date().isoformat()}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    print(f"written to {out}")
    return 0 if all(t["exit_code"] in (0, 5) for t in tiers) else 1


if __name__ == "__main__":
    sys.exit(main())
