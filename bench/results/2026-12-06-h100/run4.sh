#!/bin/bash
# Run 4 (issue 37, 2026-12-06, H100): the loss curve's noise floor: the bf16 default with its gradients rounded to
# bf16 (reduce_dtype=bfloat16, one rank), 200 steps, same seed and batches as run3's curves, compared offline with
# run3's bf16 default (run3-numerics.jsonl).
export PYTHONUNBUFFERED=1
timeout 170 python3 bench/train_throughput.py --shapes 8x2048 --rounds 0 --numerics-steps 200 --numerics-shape 8x2048 \
  --numerics-variants "default+reduce_dtype=bfloat16" --out $OUT/run4-numerics-floor.jsonl
