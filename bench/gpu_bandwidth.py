"""Memory bandwidth of generated CUDA kernels against torch's device-to-device copy.

Script-DSL kernels, compiled by hidet_plugin_cuda's code generator and NVRTC: ``copy``
(c = a) and ``add`` (c = a + b) over large fp32 vectors with 16-byte float4 accesses
(a guarded scalar tail when n is not a multiple of the tile). Two baselines (bw_copy,
bw_add: 4 float4 per thread, blocks of 256, one tile per block, the kernels of issue
5's earlier runs) and a set of variants (`variants()`): 4 or 8 float4 per thread,
blocks of 256/512/1024, one tile per block or a grid-stride loop over a grid of two
waves (SM count x resident blocks per SM, from the target), plain or streaming
(``__ldcs``/``__stcs``, evict-first) accesses.

Every kernel is first checked on the device against torch (NaN-poisoned output; the
timed n, n - 13 and 1,000,003 elements; nothing written past n); then each is timed
with CUDA events (median of --runs >= 20) next to ``dst.copy_(src)`` in the same
process. Bytes count reads plus writes (copy 8 B/element, add 12 B/element). As a tuner
would, the fastest add variant is reported as "generated add", with its parameters;
since picking the best of many medians favours a lucky one, that variant and torch's
copy are timed once more and the target is judged on that confirmation pass.

    python bench/gpu_bandwidth.py --out DIR [--elements 268435456] [--runs 20]

Prints every variant and a summary table (kernel, GB/s, ratio to torch copy) and
writes DIR/gpu_bandwidth.json. The target: generated add >= 80% of the torch copy
ceiling (``target_met``; exit status 1 when missed).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from typing import NamedTuple

from hidet_framework.ir.dtypes import vector_type
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, register_tensor, script, script_module, static_range,
)
from hidet_plugin_cuda.lang import blockIdx, gridDim, load_streaming, store_streaming, threadIdx

# the baseline kernels bw_copy / bw_add (issue 5's measured runs); the variants below
# take their own parameters
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


class Variant(NamedTuple):
    """One generated candidate. `vecs` float4 per thread and array, `block` threads;
    `loop` "one" (one tile per block, a grid that covers n) or "stride" (a grid-stride
    loop over full tiles on a grid of `waves` x SM count x blocks per SM, the last block
    taking the tail); `cache` "plain" (ordinary loads/stores) or "cs" (streaming,
    evict-first: __ldcs/__stcs, PTX ld.global.cs/st.global.cs)."""

    op: str
    vecs: int
    block: int
    loop: str
    cache: str
    waves: int = 2

    @property
    def name(self) -> str:
        waves = f"w{self.waves}" if self.loop == "stride" else ""
        return f"bw_{self.op}_v{self.vecs}_b{self.block}_{self.loop}{waves}_{self.cache}"

    def params(self) -> dict:
        return {"op": self.op, "float4_per_thread": self.vecs, "block": self.block, "loop": self.loop,
                "waves": self.waves if self.loop == "stride" else None, "cache": self.cache}


def variants(ops=("copy", "add")) -> list[Variant]:
    """The candidate set: 4 or 8 float4 per thread, blocks of 256/512/1024, one tile
    per block or a grid-stride loop over two waves, plain or streaming accesses."""
    return [Variant(op, vecs, block, loop, cache)
            for op in ops for vecs in (4, 8) for block in (256, 512, 1024)
            for loop in ("one", "stride") for cache in ("plain", "cs")]


def stride_grid(variant: Variant, target=None) -> int:
    """Blocks of a grid-stride variant: `waves` x SMs x resident blocks per SM (by
    threads; registers may allow fewer, which only adds waves)."""
    if target is None:
        from hidet_plugin_cuda.target import default_cuda_target

        target = default_cuda_target()
    sms, threads = target.get("sm_count"), target.get("max_threads_per_sm")
    per_sm = max(1, min(threads // variant.block, target.get("max_blocks_per_sm") or 32))
    return variant.waves * sms * per_sm


def variant_kernel(variant: Variant, target=None):
    """The script kernel of one variant. Threads map onto a tile of `vecs` x `block`
    float4s through the task mapping repeat(vecs, 1) * spatial(1, block): thread t
    takes float4s t, t + block, ... (coalesced across the warp), the repeat index is a
    compile-time register index. All loads of a tile are issued before its first store.
    Elements past the last full tile take a guarded scalar path, so any n works."""
    from hidet_framework.mapping.task_mapping import repeat, spatial

    vp = _vec_ptr()
    f32x4 = vector_type("float32", 4)
    vecs, block = variant.vecs, variant.block
    two_inputs = variant.op == "add"
    streaming = variant.cache == "cs"
    tile = vecs * block * 4  # elements per tile
    tile_map = repeat(vecs, 1) * spatial(1, block)
    grid_cap = stride_grid(variant, target) if variant.loop == "stride" else 0

    @script(name=f"{variant.name}_tile")
    def tile_full(a: ~f32, b: ~f32, c: ~f32, base: i32):
        """One full tile at element `base`."""
        attrs.func_kind = "device"
        ra = register_tensor(f32x4, [vecs])
        rb = register_tensor(f32x4, [vecs])
        for r, t in tile_map.on(threadIdx.x):
            if streaming:
                ra[r] = load_streaming(cast(address_of(a[base + (r * block + t) * 4]), vp))
                if two_inputs:
                    rb[r] = load_streaming(cast(address_of(b[base + (r * block + t) * 4]), vp))
            else:
                ra[r] = deref(cast(address_of(a[base + (r * block + t) * 4]), vp))
                if two_inputs:
                    rb[r] = deref(cast(address_of(b[base + (r * block + t) * 4]), vp))
        for r, t in tile_map.on(threadIdx.x):
            out = cast(address_of(c[base + (r * block + t) * 4]), vp)
            if streaming:
                if two_inputs:
                    store_streaming(out, ra[r] + rb[r])
                else:
                    store_streaming(out, ra[r])
            else:
                if two_inputs:
                    out[0] = ra[r] + rb[r]
                else:
                    out[0] = ra[r]

    @script(name=f"{variant.name}_tail")
    def tile_tail(a: ~f32, b: ~f32, c: ~f32, base: i32, n: i32):
        """The last, partial tile at element `base`: guarded scalar accesses."""
        attrs.func_kind = "device"
        for r, t in tile_map.on(threadIdx.x):
            for e in static_range(4):
                i = base + (r * block + t) * 4 + e
                if i < n:
                    if two_inputs:
                        c[i] = a[i] + b[i]
                    else:
                        c[i] = a[i]

    if variant.loop == "one":
        @script(name=variant.name)
        def kernel(a: ~f32, b: ~f32, c: ~f32, n: i32):
            attrs.func_kind = "cuda_kernel"
            attrs.cuda.grid_dim = (n + tile - 1) // tile
            attrs.cuda.block_dim = block
            if blockIdx.x * tile + tile <= n:
                tile_full(a, b, c, blockIdx.x * tile)
            else:
                tile_tail(a, b, c, blockIdx.x * tile, n)
    else:
        @script(name=variant.name)
        def kernel(a: ~f32, b: ~f32, c: ~f32, n: i32):
            attrs.func_kind = "cuda_kernel"
            attrs.cuda.grid_dim = min((n + tile - 1) // tile, grid_cap)
            attrs.cuda.block_dim = block
            full = n // tile
            for k in range(blockIdx.x, full, gridDim.x):
                tile_full(a, b, c, k * tile)
            if blockIdx.x == gridDim.x - 1 and full * tile < n:
                tile_tail(a, b, c, full * tile, n)
    return kernel


def lower(module):
    from hidet_framework.lowering.lower_task_mapping import LowerTaskMappingPass
    from hidet_framework.lowering.pipeline import lower as pipeline_lower

    return pipeline_lower(LowerTaskMappingPass().run(module, None), "cuda")


def build_module(backend=None, target=None, candidates=None):
    """The lowered IR module of the baseline kernels (bw_copy, bw_add) and of the
    variants (default: all of `variants()`), its CUDA source, and (with a backend) the
    loaded module. The grid-stride variants size their grid from `target` (the H200
    default when None)."""
    from hidet_plugin_cuda.codegen import generate

    candidates = variants() if candidates is None else candidates
    module = lower(script_module(bandwidth_kernel("copy"), bandwidth_kernel("add"),
                                 *(variant_kernel(v, target) for v in candidates), name="gpu_bandwidth"))
    source = generate(module, target)
    loaded = None
    if backend is not None:
        loaded = backend.load(backend.build(source, target, name="gpu_bandwidth"), module)
    return module, source, loaded


# the baseline kernels' parameters (they are written without the task mapping: the same
# accesses in the same order as the variant with these parameters)
BASELINES = {"bw_copy": Variant("copy", VECS, BLOCK, "one", "plain"),
             "bw_add": Variant("add", VECS, BLOCK, "one", "plain")}


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


def check_sizes(n: int) -> list[int]:
    """Sizes every kernel is checked at before timing: the timed n, n - 13 (not a
    multiple of any tile: exercises the tail after many full tiles and, for the
    grid-stride variants, many loop trips) and 1,000,003 (prime)."""
    return sorted({n, max(1, n - 13), min(n, 1_000_003)})


def check_kernel(kernel, op: str, a, b, c, n: int) -> str | None:
    """Run `kernel` on the first m elements for each check size, output poisoned with
    NaN first; None when every element 0..m-1 equals torch's result and c[m:] is still
    poison (nothing written past m), else what was wrong."""
    import torch

    for m in check_sizes(n):
        c.fill_(float("nan"))
        kernel(a, b, c, m)
        torch.cuda.synchronize()
        want = a[:m] + b[:m] if op == "add" else a[:m]
        if not torch.equal(c[:m], want):
            bad = int((c[:m] != want).sum())  # NaN != x: unwritten elements count too
            return f"n={m}: {bad} of {m} elements differ from torch"
        if m < n and not bool(torch.isnan(c[m:]).all()):
            return f"n={m}: wrote past the end"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu_bandwidth.json")
    parser.add_argument("--elements", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--runs", type=int, default=20, help="timed runs per kernel, median taken (>= 20)")
    args = parser.parse_args()
    if args.runs < 20:
        parser.error("--runs must be at least 20")

    import torch
    from hidet_plugin_cuda import CudaBackend

    backend = CudaBackend()
    available = backend.availability()
    if not available:
        raise SystemExit(f"no usable CUDA GPU: {available.reason}")
    target = backend.detect_target()
    candidates = variants()
    _, _, loaded = build_module(backend, target, candidates)
    n = args.elements
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = torch.empty(n, device="cuda")

    # every kernel correct first (poisoned output, several sizes), else no timing at all
    kernels = {**BASELINES, **{v.name: v for v in candidates}}
    wrong = {}
    for name, v in kernels.items():
        problem = check_kernel(loaded[name], v.op, a, b, c, n)
        if problem:
            wrong[name] = problem
    if wrong:
        for name, problem in wrong.items():
            print(f"WRONG {name}: {problem}")
        raise SystemExit(f"{len(wrong)} generated kernel(s) gave wrong results; nothing timed")

    nbytes = {"copy": 8 * n, "add": 12 * n}
    copy_before = _time_ms(lambda: c.copy_(a), args.runs)
    measured = {}
    for name, v in kernels.items():
        ms = _time_ms(lambda k=loaded[name]: k(a, b, c, n), args.runs)
        measured[name] = (ms, nbytes[v.op] / ms / 1e6)
    copy_after = _time_ms(lambda: c.copy_(a), args.runs)
    torch_add_ms = _time_ms(lambda: torch.add(a, b, out=c), args.runs)
    # the ceiling: the faster of the two torch copy timings (the stricter target)
    copy_ms = min(copy_before, copy_after)
    ceiling = 8 * n / copy_ms / 1e6

    def best(op):
        return max((name for name, v in kernels.items() if v.op == op), key=lambda name: measured[name][1])

    # The pick is the best of many medians, which favours a lucky one: time the picked
    # add and torch's copy once more, back to back, and judge the target on that pass.
    best_add, best_copy = best("add"), best("copy")
    confirm_copy_ms = _time_ms(lambda: c.copy_(a), args.runs)
    confirm_add_ms = _time_ms(lambda k=loaded[best_add]: k(a, b, c, n), args.runs)
    confirm_ceiling = 8 * n / confirm_copy_ms / 1e6
    confirm_add_gbs = 12 * n / confirm_add_ms / 1e6
    add_ratio = confirm_add_gbs / confirm_ceiling
    target_met = add_ratio >= 0.8

    def describe(name):
        p = kernels[name].params()
        loop = f"grid-stride over {p['waves']} waves" if p["loop"] == "stride" else "one tile per block"
        return f"{p['float4_per_thread']} float4/thread, block {p['block']}, {loop}, {p['cache']} accesses"

    rows = [("torch copy_ (ceiling)", copy_ms, ceiling),
            ("generated copy (baseline)", *measured["bw_copy"]),
            (f"generated copy (best: {best_copy})", *measured[best_copy]),
            (f"generated add (best: {best_add})", confirm_add_ms, confirm_add_gbs),
            ("torch add (peer)", torch_add_ms, 12 * n / torch_add_ms / 1e6)]
    device = torch.cuda.get_device_name()
    print(f"{n} fp32 elements, {device}, medians of {args.runs} CUDA-event runs, bytes = read + write")
    print(f"torch copy_: {8 * n / copy_before / 1e6:.1f} GB/s before the variants, "
          f"{8 * n / copy_after / 1e6:.1f} after; ceiling = the faster")
    print(f"\n{'variant':<34}{'ms':>9}{'GB/s':>9}{'vs copy':>9}")
    for name in kernels:
        ms, gbs = measured[name]
        print(f"{name:<34}{ms:>9.3f}{gbs:>9.1f}{gbs / ceiling:>9.1%}")
    print(f"\n{'kernel':<52}{'ms':>9}{'GB/s':>9}{'vs copy':>9}")
    for label, ms, gbs in rows:
        print(f"{label:<52}{ms:>9.3f}{gbs:>9.1f}{gbs / ceiling:>9.1%}")
    print(f"generated add = {best_add}: {describe(best_add)}")
    print(f"confirmation pass: torch copy {confirm_ceiling:.1f} GB/s, {best_add} {confirm_add_gbs:.1f} GB/s "
          f"(first pass {measured[best_add][1] / ceiling:.1%})")
    verdict = "met" if target_met else "MISSED"
    print(f"target: generated add >= 80% of the copy ceiling: {verdict} ({add_ratio:.1%}, confirmation pass)")

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_bandwidth.json"), "w") as f:
        json.dump({"elements": n, "runs": args.runs, "device": device,
                   "torch": torch.__version__, "python": platform.python_version(),
                   "target": {k: target.get(k) for k in ("sm_count", "max_threads_per_sm", "max_blocks_per_sm")},
                   "bytes_counted": "read + write",
                   "checked_sizes": check_sizes(n),
                   "torch_copy_ms": {"before_variants": copy_before, "after_variants": copy_after,
                                     "ceiling": "the faster of the two"},
                   "rows": [{"kernel": k, "median_ms": ms, "gb_per_s": g, "ratio_to_copy": g / ceiling}
                            for k, ms, g in rows],
                   "variants": [{"kernel": name, **kernels[name].params(),
                                 "grid": (stride_grid(kernels[name], target) if kernels[name].loop == "stride"
                                          else "covers n"),
                                 "baseline": name in BASELINES, "correct": True,
                                 "median_ms": measured[name][0], "gb_per_s": measured[name][1],
                                 "ratio_to_copy": measured[name][1] / ceiling} for name in kernels],
                   "best_add": {"kernel": best_add, **kernels[best_add].params(),
                                "first_pass_ratio_to_copy": measured[best_add][1] / ceiling,
                                "confirm_median_ms": confirm_add_ms, "confirm_copy_median_ms": confirm_copy_ms},
                   "add_ratio_to_copy": add_ratio,
                   "add_ratio_measured_in": "confirmation pass: best add variant and torch copy re-timed",
                   "target_met": target_met}, f, indent=2)
    return 0 if target_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
