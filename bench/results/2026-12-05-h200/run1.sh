#!/bin/bash
# Run 1 (issue 29, 2026-12-05): profile of the default and cheap flags at 8x2048, one GPU.
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
python3 -c "import torch,transformers;print(torch.__version__, transformers.__version__)"
timeout 120 python3 bench/profile_step.py --steps 3 --top 12 2>&1 | grep -v Warning | tee $OUT/profile-default.txt | tail -30
timeout 420 python3 bench/train_throughput.py --shapes 8x2048 --rounds 2 --warmup 3 --steps 8 \
  --variants "reference,default,default+reduce_dtype=bfloat16,default+reduce_dtype=bfloat16+loss_chunk_size=16384,default+compile_mode=reduce-overhead" \
  --out $OUT/run1-8x2048.jsonl 2>&1 | grep -v "Warning\|warn(" 
