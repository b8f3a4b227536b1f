#!/bin/bash
# Run 2 (issue 37, 2026-12-06, H100): the bf16 default against --float8 tensorwise on every eligible linear
# layer and on the MLP's only (f8only=mlp), 2 rounds at 16 x 2048; the same in the fake world of 8 with the
# cluster default; the float8 step's profile by kernel class with the float8 casts named.
export PYTHONUNBUFFERED=1
G="Warning\|warn(\|_warn_once\|_init_core_state\|UserWarning\|Configuration class for applying"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
MB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk '{print ($1>100000)?16:8}')
timeout 255 python3 bench/train_throughput.py --shapes 16x2048 --rounds 2 --warmup 3 --steps 8 --set micro_batch_size=$MB \
  --variants "default,default+float8=tensorwise,default+float8=tensorwise+f8only=mlp" \
  --out $OUT/run2-16x2048.jsonl 2>&1 | grep -v "$G" | tail -5
B="mesh=hsdp+micro_batch_size=8+reduce_dtype=bfloat16+activation_checkpointing=1+ac_policy=attention+reshard_after_forward=1+loss_chunk_size=2048"
timeout 130 python3 bench/fake_rank_step.py --steps 5 --warmup 2 --out $OUT/run2-fake8.jsonl \
  --configs "$B;$B+float8=tensorwise;$B+float8=tensorwise+f8only=mlp" 2>&1 | grep -v "$G" | python3 -c "
import sys,json
for l in sys.stdin:
    try: r=json.loads(l)
    except Exception: print(l.rstrip()[:300]); continue
    print(r['config'][-30:], r.get('step_time_s'), r.get('peak_allocated_gib'), r.get('peak_reserved_gib'), r.get('oom') or r.get('error'))"
for S in "micro_batch_size=$MB,float8=tensorwise" "micro_batch_size=$MB,float8=tensorwise,f8only=mlp"; do
  timeout 75 python3 bench/profile_step.py --batch-size 16 --steps 2 --warmup 3 --top 30 --set $S 2>&1 | grep -v "$G" \
    >> $OUT/run2-profile.txt
done
grep -A8 "GPU time" $OUT/run2-profile.txt
