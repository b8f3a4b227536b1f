#!/bin/bash
# Run 3 (issue 37, 2026-12-06, H100): 200-step loss curves of the bf16 default and --float8 tensorwise (the MLP's
# projections, the module's rule since run 2), same seed and data, 8 x 2048, learnable task; the GPU test tier's
# float8 and unsharded curves (tiny); one more throughput round of both at 16 x 2048.
export PYTHONUNBUFFERED=1
G="Warning\|warn(\|_warn_once\|_init_core_state\|UserWarning\|Configuration class for applying"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
timeout 230 python3 bench/train_throughput.py --shapes 8x2048 --rounds 0 --numerics-steps 200 --numerics-shape 8x2048 \
  --numerics-variants "default,default+float8=tensorwise" --out $OUT/run3-numerics.jsonl 2>&1 | grep -v "$G" | grep max_abs | python3 -c "
import sys,json
for l in sys.stdin:
    n=json.loads(l)['numerics']; c=n['curves']; print({k:n[k] for k in ('max_abs_diff','max_rel_diff','mean_abs_diff')}); print({k:[round(x,4) for x in v[::20]] for k,v in c.items()})"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider --import-mode=importlib tests/gpu/test_gpu_step.py -k "float8 or unsharded" 2>&1 | tail -4
MB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk '{print ($1>100000)?16:8}')
timeout 100 python3 bench/train_throughput.py --shapes 16x2048 --rounds 1 --warmup 3 --steps 8 --set micro_batch_size=$MB \
  --variants "default,default+float8=tensorwise" --out $OUT/run3-16x2048.jsonl 2>&1 | grep -v "$G" | tail -3
