#!/bin/bash
# Run 3 on an H100 (the H200 refused, 2026-12-05): one-GPU A/B of --unsharded, the fake world of 8, loss curves, the GPU test.
export PYTHONUNBUFFERED=1
G="Warning\|warn(\|_warn_once\|_init_core_state"
timeout 150 python3 bench/train_throughput.py --shapes 8x2048 --rounds 2 --warmup 3 --steps 8 \
  --variants "default,default+unsharded=1" --out $OUT/h100-single.jsonl 2>&1 | grep -v "$G" | tail -4
timeout 100 python3 bench/train_throughput.py --shapes 8x2048 --rounds 1 --warmup 3 --steps 8 \
  --variants "default+unsharded=1+compile_scope=model" --out $OUT/h100-model-compile.jsonl 2>&1 | grep -v "$G" | tail -3 | cut -c1-400
B="mesh=hsdp+micro_batch_size=8+reduce_dtype=bfloat16+activation_checkpointing"; L="reshard_after_forward=1+loss_chunk_size=2048"
timeout 170 python3 bench/fake_rank_step.py --steps 5 --warmup 2 --out $OUT/h100-fake8.jsonl \
  --configs "$B=1;$B=1+ac_policy=attention+$L;$B=0+$L" 2>&1 | grep -v "$G" | python3 -c "
import sys,json
for l in sys.stdin:
    try: r=json.loads(l)
    except Exception: print(l.rstrip()[:300]); continue
    print(r['config'][-70:], r.get('step_time_s'), r.get('peak_allocated_gib'), r.get('peak_reserved_gib'), r.get('oom') or r.get('error'))"
timeout 130 python3 bench/train_throughput.py --shapes 8x2048 --rounds 0 --numerics-steps 50 --numerics-shape 8x2048 \
  --numerics-variants "default+activation_checkpointing=1+reduce_dtype=bfloat16,default+activation_checkpointing=1+reduce_dtype=bfloat16+ac_policy=attention+reshard_after_forward=1+loss_chunk_size=2048,default+unsharded=1" \
  --out $OUT/h100-numerics.jsonl 2>&1 | grep -v "$G" | grep max_abs | python3 -c "
import sys,json
for l in sys.stdin:
    n=json.loads(l)['numerics']; print({k:n[k] for k in ('max_abs_diff','max_rel_diff','mean_abs_diff')})"
timeout 120 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_gpu_step.py -k unsharded 2>&1 | tail -3
