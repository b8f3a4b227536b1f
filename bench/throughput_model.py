"""Print the throughput model's table (workloads/throughput_model.py: the formula, its inputs and their
sources): predicted step time, tokens/s and MFU of each candidate config on 2 x g6.12xlarge (8 x L4), the
chosen default, and the model checked against the AWS sample's published steps/s.

    python bench/throughput_model.py                     # the committed H100 rows of 2026-12-05
    python bench/throughput_model.py --rows a.jsonl --json
    python bench/throughput_model.py --bandwidth runs/collectives-<id>.json   # EFA at a measured rate
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.throughput_model import (  # noqa: E402
    DEFAULT_ROWS,
    EXPANDABLE_ROWS,
    GB,
    NIC_GBPS,
    SAMPLE_ROWS,
    candidate_table,
    choose_default,
    load_rows,
    measured_nic_gbps,
    predict_aws_sample,
)


def _fmt(c: dict) -> str:
    lo, hi = c["low"], c["high"]

    def span(key, field, scale=1.0, f="{:,.0f}"):
        a, b = lo[key][field] * scale, hi[key][field] * scale
        return f"{f.format(a)}-{f.format(b)}"

    efa = lo["efa"]["tokens_per_s"]
    ratio = f"{efa / lo['tcp_best']['tokens_per_s']:.2f}-{efa / lo['tcp_worst']['tokens_per_s']:.2f}"
    exp = c["reserved_expandable_gib"]
    mem = f"{c['alloc_gib']:.1f}/{c['reserved_gib']:.1f}" + (f" ({exp:.1f})" if exp else "")
    return (
        f"| {c['config']} | {c['nic_gb']:.2f} | {c['pcie_gb']:.2f} | {lo['t_compute']:.2f}-{hi['t_compute']:.2f} "
        f"| {lo['efa']['t']:.2f}-{hi['efa']['t']:.2f} | {span('efa', 'tokens_per_s')} "
        f"| {span('efa', 'mfu_peak', 100, '{:.1f}')}% | {lo['efa']['mfu_achievable']:.0%} "
        f"| {span('tcp_worst', 'tokens_per_s')} | {ratio} | {mem} | {'yes' if c['fits'] else 'no'} |"
    )


HEADER = (
    "| config | NIC GB/step | PCIe GB/GPU/step | compute s (L4 54-71) | EFA step s | EFA tokens/s | MFU vs 121 "
    "| MFU vs achievable | TCP@10Gbps tokens/s | EFA/TCP ratio (TCP 40-10 Gbps) "
    "| GiB alloc/reserved (expandable) | fits |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="*", type=Path, default=DEFAULT_ROWS, help="fake_rank_step.py JSON rows")
    p.add_argument("--expandable", type=Path, default=EXPANDABLE_ROWS, help="rows measured with expandable_segments")
    p.add_argument("--json", action="store_true", help="print the whole table as JSON")
    p.add_argument("--bandwidth", type=Path, help="a `bench --collectives` JSON from the cluster: EFA at its rate")
    a = p.parse_args(argv)
    rows = load_rows(a.rows)
    expandable = {r["config"]: r for r in load_rows([a.expandable])} if a.expandable.exists() else {}
    links = dict(NIC_GBPS)
    if a.bandwidth:
        links["efa"] = measured_nic_gbps(json.loads(a.bandwidth.read_text()), str(a.bandwidth))
    print(f"EFA rate: {links['efa']:.1f} Gbps ({a.bandwidth or 'assumed: the 40 Gbps link'})", file=sys.stderr)
    table = candidate_table(rows, expandable, links)
    sample_row = next(
        r for r in load_rows(SAMPLE_ROWS) if r["config"].startswith("mesh=fsdp") and r["reduce_dtype"] == "bfloat16"
    )
    sample = predict_aws_sample(sample_row)
    best = choose_default(table)
    if a.json:
        print(json.dumps({"candidates": table, "aws_sample": sample, "default": best["config"]}, indent=2))
        return 0
    print(HEADER)
    for c in table:
        print(_fmt(c))
    print(f"\nchosen default: {best['config']}")
    print(
        f"\nAWS sample: {sample['nic_bytes'] / GB:.2f} GB per NIC per step, {sample['pcie_bytes'] / GB:.2f} GB per GPU"
    )
    for k, v in sample["predictions"].items():
        print(f"  {k:16s} predicted {v['steps_per_s']:.3f} steps/s, published {v['measured']}, error {v['error']:+.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
