#!/bin/bash
# Run 4 (issue 29, 2026-12-05, H200): one GPU, same-run A/B: reference, module default, --unsharded.
export PYTHONUNBUFFERED=1
timeout 185 python3 bench/train_throughput.py --shapes 8x2048,16x2048 --rounds 1 --warmup 3 --steps 6 \
  --variants "reference,default,default+unsharded=1" \
  --only-at "16x2048=default+unsharded=1|default|reference+micro_batch_size=8" \
  --out $OUT/h200-single.jsonl 2>&1 | grep -v "Warning\|warn(\|_warn_once\|_init_core_state" | tail -9
