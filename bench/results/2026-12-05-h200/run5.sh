#!/bin/bash
# Run 5 (issue 29, 2026-12-05, H200): where --unsharded's step goes by matmul shape; --fuse-mlp on one GPU
# and in the fake world of 8; the 50-step loss curves of checkpointing policy and loss chunk, each alone.
export PYTHONUNBUFFERED=1
G="Warning\|warn(\|_warn_once\|_init_core_state"
timeout 100 python3 bench/profile_step.py --steps 3 --set unsharded=1 --gemms 16 --top 14 2>&1 | grep -v "$G" | tee $OUT/profile-unsharded.txt | tail -45
timeout 150 python3 bench/train_throughput.py --shapes 8x2048 --rounds 1 --warmup 3 --steps 8 \
  --variants "default+unsharded=1,default+unsharded=1+fuse_mlp=1,default,default+fuse_mlp=1" --out $OUT/run5-fuse.jsonl 2>&1 | grep -v "$G" | tail -6
B="mesh=hsdp+micro_batch_size=8+reduce_dtype=bfloat16+activation_checkpointing=1+ac_policy=attention+reshard_after_forward=1+loss_chunk_size=2048"
timeout 110 python3 bench/fake_rank_step.py --steps 5 --warmup 2 --out $OUT/run5-fake8.jsonl \
  --configs "$B;$B+fuse_mlp=1" 2>&1 | grep -v "$G" | python3 -c "
import sys,json
for l in sys.stdin:
    try: r=json.loads(l)
    except Exception: print(l.rstrip()[:300]); continue
    print(r['config'][-40:], r.get('step_time_s'), r.get('peak_allocated_gib'), r.get('peak_reserved_gib'), r.get('oom') or r.get('error'))"
F="default+activation_checkpointing=1+reduce_dtype=bfloat16"
timeout 200 python3 bench/train_throughput.py --shapes 8x2048 --rounds 0 --numerics-steps 50 --numerics-shape 8x2048 \
  --numerics-variants "$F,$F+ac_policy=attention,$F+loss_chunk_size=2048,$F+ac_policy=attention+reshard_after_forward=1+loss_chunk_size=2048" \
  --out $OUT/run5-numerics.jsonl 2>&1 | grep -v "$G" | grep max_abs | python3 -c "
import sys,json
for l in sys.stdin:
    n=json.loads(l)['numerics']; print({k:n[k] for k in ('max_abs_diff','max_rel_diff','mean_abs_diff')})"
