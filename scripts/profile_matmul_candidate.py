"""Run one CUDA matmul candidate a few times, for a profiler (ncu) to look at.

    python scripts/profile_matmul_candidate.py --shape 4096x4096x4096 --dtype float16 \
        --params '{"block_m": 256, "block_n": 128, "block_k": 64, "warps_m": 4, "warps_n": 2, "stages": 4}'

Builds the candidate through its template (tensor cores for fp16/bf16, SIMT for
fp32), checks it once against torch in float32 (outputs poisoned first), then launches
it --runs times and prints the median time of those launches (CUDA events).
"""
from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="4096x4096x4096", help="MxNxK")
    parser.add_argument("--dtype", default="float16", choices=("float32", "float16", "bfloat16"))
    parser.add_argument("--params", default="{}", help="JSON: the candidate's parameters (over the default)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--template", default="auto",
                        choices=("auto", "simt", "simt_splitk", "gemv", "skinny", "tensor_core", "wgmma", "hopper_ws"),
                        help="auto: SIMT for fp32, mma.sync tensor cores otherwise")
    args = parser.parse_args()

    import torch

    from hidet_plugin_cuda import CudaBackend
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul
    from hidet_plugin_matmul.cuda_gemv import CudaGemvMatmul
    from hidet_plugin_matmul.cuda_hopper_skinny import CudaHopperSkinnyMatmul
    from hidet_plugin_matmul.cuda_hopper_ws import CudaHopperWsMatmul
    from hidet_plugin_matmul.cuda_splitk import CudaSimtSplitKMatmul
    from hidet_plugin_matmul.cuda_wgmma import CudaWgmmaMatmul
    from hidet_plugin_matmul.operators import matmul_task

    m, n, k = (int(x) for x in args.shape.split("x"))
    kind = args.template if args.template != "auto" else "simt" if args.dtype == "float32" else "tensor_core"
    template = {"simt": CudaSimtMatmul, "tensor_core": CudaTensorCoreMatmul, "wgmma": CudaWgmmaMatmul,
                "hopper_ws": CudaHopperWsMatmul, "simt_splitk": CudaSimtSplitKMatmul, "gemv": CudaGemvMatmul,
                "skinny": CudaHopperSkinnyMatmul}[kind]()
    backend = CudaBackend()
    target = backend.detect_target()
    task, attributes = matmul_task((m, k), (k, n), args.dtype)
    params = dict(template.space(target, 0)[0], **json.loads(args.params))
    scheduled = template.build(task, attributes, params, target)
    compiled = compile_scheduled(task, scheduled, backend, target)
    tdt = getattr(torch, args.dtype)
    a = torch.randn((m, k), device="cuda").to(tdt)
    b = torch.randn((k, n), device="cuda").to(tdt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
    workspace = compiled.allocate_workspace()
    compiled.run([a, b], [c], workspace)
    ref = torch.matmul(a.float(), b.float())
    error = float((c.float() - ref).norm() / ref.norm())
    times = backend.device.time(lambda: compiled.run([a, b], [c], workspace), warmup=1, repeat=args.runs)
    ms = statistics.median(times) * 1e3
    print(f"{template.name} {args.dtype} {args.shape} {params}: {ms:.3f} ms, {2 * m * n * k / ms / 1e9:.1f} TFLOP/s, "
          f"rel err {error:.1e}")


if __name__ == "__main__":
    main()
