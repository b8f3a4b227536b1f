#!/bin/bash
# Run 1 (issue 37, 2026-12-06): bf16 module default against --float8 (tensorwise, rowwise) and Liger's
# kernels at 16 x 2048 on one GPU; the cluster default with and without float8 in the fake world of 8;
# where the step's time goes, by kernel class, for bf16 and float8. Run from the repository root with
# torchao 0.17.0 and liger-kernel 0.8.5 wheels in .whl/.
export PYTHONUNBUFFERED=1
G="Warning\|warn(\|_warn_once\|_init_core_state\|UserWarning"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# 16 sequences at once fit the H200 (139 GiB), not the H100 (78 GiB): there, two micro-batches of 8.
MB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk '{print ($1>100000)?16:8}')
timeout 250 python3 bench/train_throughput.py --shapes 16x2048 --rounds 1 --warmup 3 --steps 8 --set micro_batch_size=$MB \
  --variants "default,default+float8=tensorwise,default+float8=rowwise,default+liger=rms.swiglu.rope,default+liger=flce" \
  --out $OUT/run1-16x2048.jsonl 2>&1 | grep -v "$G" | tail -9
B="mesh=hsdp+micro_batch_size=8+reduce_dtype=bfloat16+activation_checkpointing=1+ac_policy=attention+reshard_after_forward=1+loss_chunk_size=2048"
timeout 150 python3 bench/fake_rank_step.py --steps 5 --warmup 2 --out $OUT/run1-fake8.jsonl \
  --configs "$B;$B+float8=tensorwise;$B+float8=rowwise" 2>&1 | grep -v "$G" | python3 -c "
import sys,json
for l in sys.stdin:
    try: r=json.loads(l)
    except Exception: print(l.rstrip()[:300]); continue
    print(r['config'][-30:], r.get('step_time_s'), r.get('peak_allocated_gib'), r.get('peak_reserved_gib'), r.get('oom') or r.get('error'))"
for S in "micro_batch_size=$MB" "micro_batch_size=$MB,float8=tensorwise"; do
  timeout 75 python3 bench/profile_step.py --batch-size 16 --steps 2 --warmup 3 --top 12 --set $S 2>&1 | grep -v "$G" \
    | tee -a $OUT/run1-profile.txt | head -9
done
