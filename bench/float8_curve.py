"""Float8 against bf16 over 200 steps, judged by the tolerance docs/float8.md fixed before the curves were run.

    python bench/float8_curve.py corpus --out /tmp/corpus        # the offline real-text corpus, one file
    python bench/float8_curve.py verdict bench/results/<dir>/curve-*.jsonl   # each curve file's windows and verdict

`corpus` writes the topics of the Python language reference that every CPython ships as `pydoc_data/topics.py`
(about 465,000 characters of English prose and code, offline on any machine with Python) as a .txt with one
document a line, the form `--data` reads. `verdict` reads the `numerics` rows bench/train_throughput.py writes
(`--numerics-variants "default,default+float8=tensorwise"`: bf16 first, float8 second) and judges each against
TOLERANCE; it prints one JSON line per file and exits 1 when any file misses it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

WINDOW = 20  # steps per window mean, as the 200-step table of bench/results/2026-12-06-h100/README.md
# Pre-registered (docs/float8.md, "The tolerance, fixed before the curve"): no 20-step window mean of float8's loss
# more than 1.1% above bf16's, the largest window move bf16 rounding alone made (run4, 2026-12-06-h100).
TOLERANCE = 0.011


def write_corpus(out: Path) -> Path:
    import pydoc_data.topics as topics

    out.mkdir(parents=True, exist_ok=True)
    path = out / "pydoc-topics.txt"
    path.write_text("".join(" ".join(text.split()) + "\n" for _, text in sorted(topics.topics.items())))
    return path


def windows(curve: list[float]) -> list[float]:
    return [statistics.fmean(curve[i : i + WINDOW]) for i in range(0, len(curve) - WINDOW + 1, WINDOW)]


def judge(numerics: dict) -> dict:
    """Each window's float8/bf16 - 1 and whether every one is within TOLERANCE (one-sided: faster learning passes)."""
    (bf16_name, bf16), (f8_name, f8) = list(numerics["curves"].items())[:2]
    excess = [f / b - 1 for b, f in zip(windows(bf16), windows(f8), strict=True)]
    return {
        "bf16": bf16_name,
        "float8": f8_name,
        "task": numerics.get("task"),
        "seed": numerics.get("seed"),
        "steps": numerics["steps"],
        "window_excess": [round(e, 5) for e in excess],
        "worst": max(excess),
        "tolerance": TOLERANCE,
        "met": max(excess) <= TOLERANCE,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("corpus").add_argument("--out", type=Path, required=True)
    sub.add_parser("verdict").add_argument("files", type=Path, nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "corpus":
        print(write_corpus(args.out))
        return 0
    met = True
    for f in args.files:
        rows = [json.loads(line) for line in f.read_text().splitlines() if '"numerics"' in line]
        if not rows:
            print(f"{f}: no numerics row", file=sys.stderr)
            return 2
        verdict = {"file": str(f), **judge(rows[-1]["numerics"])}
        met &= verdict["met"]
        print(json.dumps(verdict))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
