"""Memory bandwidth of generated CUDA kernels against torch's device-to-device copy.

Two script-DSL kernels, compiled by hidet_plugin_cuda's code generator and NVRTC:
``copy`` (c = a) and ``add`` (c = a + b) over large fp32 vectors, one 16-byte float4
access per thread and array (a scalar tail when n is not a multiple of 4). Each is
timed with CUDA events (median of several runs) next to ``dst.copy_(src)`` in the same
process. Bytes count reads plus writes (copy 8 B/element, add 12 B/element).

    python bench/gpu_bandwidth.py --out DIR [--elements 268435456] [--runs 20]

Prints a table (kernel, GB/s, ratio to torch copy) and writes DIR/gpu_bandwidth.json.
The target: generated add >= 80% of the torch copy ceiling.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

from hidet_framework.ir.dtypes import vector_type
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, register_tensor, script, script_module, static_range,
)
from hidet_plugin_cuda.lang import blockIdx, threadIdx

BLOCK = 256
VECS = 4  # float4 accesses per thread and array


def _vec_ptr():
    from hidet_framework.ir.types import PointerType

    return PointerType(vector_type("float32", 4))


def bandwidth_kernel(op: str):
    """``op`` = "copy" or "add". A block owns VECS * BLOCK consecutive float4s; thread t
    takes vectors t, t + BLOCK, ... (coalesced), issuing all its 16-byte loads before
    the first store so several are in flight. Blocks past the full tiles take a
    guarded scalar path. Arrays must be 16-byte aligned (cudaMalloc and torch are)."""
    vp = _vec_ptr()
    f32x4 = vector_type("float32", 4)
    two_inputs = op == "add"
    tile = VECS * BLOCK * 4  # elements per block

    @script(name=f"bw_{op}")
    def kernel(a: ~f32, b: ~f32, c: ~f32, n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = (n + tile - 1) // tile
        attrs.cuda.block_dim = BLOCK
        start = blockIdx.x * tile + threadIdx.x * 4
        if blockIdx.x * tile + tile <= n:
            ra = register_tensor(f32x4, [VECS])
            rb = register_tensor(f32x4, [VECS])
            for v in static_range(VECS):
                ra[v] = deref(cast(address_of(a[start + v * BLOCK * 4]), vp))
                if two_inputs:
                    rb[v] = deref(cast(address_of(b[start + v * BLOCK * 4]), vp))
            for v in static_range(VECS):
                out = cast(address_of(c[start + v * BLOCK * 4]), vp)
                if two_inputs:
                    out[0] = ra[v] + rb[v]
                else:
                    out[0] = ra[v]
        else:
            for v in static_range(VECS):
                for t in static_range(4):
                    i = start + v * BLOCK * 4 + t
                    if i < n:
                        if two_inputs:
                            c[i] = a[i] + b[i]
                        else:
                            c[i] = a[i]
    return kernel


def lower(module):
    from hidet_framework.transforms.lower_task_mapping import LowerTaskMappingPass
    from hidet_framework.transforms.pipeline import lower as pipeline_lower

    return pipeline_lower(LowerTaskMappingPass().run(module, None), "cuda")


def build_module(backend=None, target=None):
    """The lowered IR module of both kernels, its CUDA source, and (with a backend) the
    loaded module."""
    from hidet_plugin_cuda.codegen import generate

    module = lower(script_module(bandwidth_kernel("copy"), bandwidth_kernel("add"), name="gpu_bandwidth"))
    source = generate(module, target)
    loaded = None
    if backend is not None:
        loaded = backend.load(backend.build(source, target, name="gpu_bandwidth"), module)
    return module, source, loaded


def _time_ms(fn, runs: int) -> float:
    import torch

    fn()  # warm up (first launch loads the module, raises the clocks)
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_bandwidth.json")
    parser.add_argument("--elements", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    import torch
    from hidet_plugin_cuda import CudaBackend

    backend = CudaBackend()
    available = backend.availability()
    if not available:
        raise SystemExit(f"no usable CUDA GPU: {available.reason}")
    target = backend.detect_target()
    _, _, loaded = build_module(backend, target)
    n = args.elements
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = torch.full((n,), float("nan"), device="cuda")

    loaded["bw_add"](a, b, c, n)
    torch.cuda.synchronize()
    if not torch.equal(c, a + b):
        raise SystemExit("bw_add gave a wrong result")
    loaded["bw_copy"](a, b, c, n)
    torch.cuda.synchronize()
    if not torch.equal(c, a):
        raise SystemExit("bw_copy gave a wrong result")

    rows = []
    copy_ms = _time_ms(lambda: c.copy_(a), args.runs)
    ceiling = 8 * n / copy_ms / 1e6
    rows.append(("torch copy_ (ceiling)", copy_ms, ceiling))
    for name, nbytes in (("bw_copy", 8 * n), ("bw_add", 12 * n)):
        ms = _time_ms(lambda k=loaded[name]: k(a, b, c, n), args.runs)
        rows.append((f"generated {name[3:]}", ms, nbytes / ms / 1e6))
    torch_add_ms = _time_ms(lambda: torch.add(a, b, out=c), args.runs)
    rows.append(("torch add (peer)", torch_add_ms, 12 * n / torch_add_ms / 1e6))

    print(f"{'kernel':<24}{'ms':>10}{'GB/s':>10}{'vs copy':>10}   ({n} fp32 elements, "
          f"{torch.cuda.get_device_name()})")
    for name, ms, gbs in rows:
        print(f"{name:<24}{ms:>10.3f}{gbs:>10.1f}{gbs / ceiling:>10.1%}")
    add_ratio = rows[2][2] / ceiling
    verdict = "met" if add_ratio >= 0.8 else "MISSED"
    print(f"target: generated add >= 80% of the copy ceiling: {verdict} ({add_ratio:.1%})")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_bandwidth.json"), "w") as f:
        json.dump({"elements": n, "runs": args.runs, "device": torch.cuda.get_device_name(),
                   "torch": torch.__version__, "python": platform.python_version(),
                   "bytes_counted": "read + write",
                   "rows": [{"kernel": k, "median_ms": ms, "gb_per_s": g, "ratio_to_copy": g / ceiling}
                            for k, ms, g in rows],
                   "add_ratio_to_copy": add_ratio, "target_met": add_ratio >= 0.8}, f, indent=2)
    return 0 if add_ratio >= 0.8 else 1


if __name__ == "__main__":
    raise SystemExit(main())
