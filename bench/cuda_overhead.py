"""GPU memory a training process holds outside PyTorch's caching allocator, stage by stage.

`torch.cuda.mem_get_info` gives the device's used bytes (total - free); less what the allocator has
reserved, the rest is the CUDA context, loaded kernel modules and library handles (cuBLAS, cuDNN),
none of which `torch.cuda.max_memory_reserved` counts. `nvidia-smi` is read before this process
touches the GPU, so memory held by anything else is seen and subtracted.

    python bench/cuda_overhead.py --out overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MIB = 1024**2


def smi_used_mib() -> float | None:
    """The GPU's used memory as nvidia-smi reports it (MiB), or None without nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return float(out.split()[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the JSON here too")
    a = p.parse_args(argv)
    before = smi_used_mib()
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    stages = []

    def stage(name: str) -> None:
        torch.cuda.synchronize(dev)
        free, total = torch.cuda.mem_get_info(dev)
        used = (total - free) / MIB
        stages.append(
            {
                "stage": name,
                "used_mib": used,
                "reserved_mib": torch.cuda.memory_reserved(dev) / MIB,
                "total_mib": total / MIB,
            }
        )
        stages[-1]["outside_allocator_mib"] = used - stages[-1]["reserved_mib"] - (before or 0.0)

    torch.zeros(1, device=dev)
    stage("context (first tensor)")
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    (x @ x).sum().item()
    stage("+ cuBLAS bf16 matmul")
    q = torch.randn(2, 12, 2048, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    stage("+ SDPA forward and backward")
    f = torch.compile(lambda t: F.silu(t) * t + 1)
    f(x).sum().item()
    stage("+ a compiled Triton kernel")
    out = {
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING", "(unset: LAZY by default since CUDA 12.2)"),
        "nvidia_smi_used_before_mib": before,
        "stages": stages,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
