"""Script-DSL kernels through the cuda code generator: every kernel compiles to an sm_90
cubin (marker nvcc, runs in CI), and on a GPU (marker cuda) runs against a float64
numpy reference with fresh random inputs, NaN-poisoned outputs and odd/prime sizes.

The kernels mirror the CPU backend's: elementwise, a transpose through shared memory
with a task mapping, a row reduction with warp shuffles, naive and tiled matmul, plus
what only CUDA has: cp.async with zero-fill, ldmatrix + mma.sync, atomics.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.mapping.task_mapping import repeat, spatial
from hidet_framework.lang import (
    attrs, f16, f32, grid, i32, register_tensor, script, script_module, shared_tensor, static_range, u32, unroll,
)
from hidet_plugin_cuda.codegen import generate, kernel_specs
from hidet_plugin_cuda.lang import (
    FULL_MASK, atomic_add, blockIdx, cp_async, cp_async_commit_group, cp_async_wait_all, cp_async_wait_group, exp,
    ldmatrix_x2, ldmatrix_x4, mma_sync_m16n8k16_f16_f32, shfl_down_sync, syncthreads, threadIdx,
)
from hidet_plugin_cuda.nvrtc_build import build_cubin

POISON = 0xFF  # every byte 0xFF: NaN in f16/f32


def lower(module):
    """The standard cuda lowering pipeline (slices, flat indices, simplification),
    with for-mappings lowered first by their own pass so these tests do not depend on
    which version of the pipeline includes it."""
    from hidet_framework.lowering.lower_task_mapping import LowerTaskMappingPass
    from hidet_framework.lowering.pipeline import lower as pipeline_lower

    return pipeline_lower(LowerTaskMappingPass().run(module, None), "cuda")


# ------------------------------------------------------------------------ kernels
def elementwise_kernel(dtype):
    """c = exp(a) * 0.5 + b, computed in float32, stored in `dtype`."""
    @script(name=f"elementwise_{dtype.dtype.short}")
    def elementwise(a: dtype[n], b: dtype[n], c: dtype[n], n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = (n + 127) // 128
        attrs.cuda.block_dim = 128
        i = blockIdx.x * 128 + threadIdx.x
        if i < n:
            c[i] = exp(a[i]) * 0.5 + b[i]
    return elementwise


def transpose_kernel():
    """32x32 tiles through padded shared memory; 256 threads cover a tile with the task
    mapping repeat(4, 1) * spatial(8, 32): each warp moves one 32-element row."""
    tile_map = repeat(4, 1) * spatial(8, 32)

    @script
    def transpose(a: f32[m, n], b: f32[n, m], m: i32, n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = ((n + 31) // 32, (m + 31) // 32)
        attrs.cuda.block_dim = 256
        tile = shared_tensor(f32, [32, 33])
        r0 = blockIdx.y * 32
        c0 = blockIdx.x * 32
        for i, j in tile_map.on(threadIdx.x):
            if r0 + i < m and c0 + j < n:
                tile[i, j] = a[r0 + i, c0 + j]
        syncthreads()
        for i, j in tile_map.on(threadIdx.x):
            if c0 + i < n and r0 + j < m:
                b[c0 + i, r0 + j] = tile[j, i]
    return transpose


def rowsum_kernel():
    """One block per row: strided partial sums, warp shuffles, then one warp over the
    eight warp results."""
    @script
    def rowsum(a: f32[m, n], out: f32[m], m: i32, n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = m
        attrs.cuda.block_dim = 256
        partial = shared_tensor(f32, [8])
        row = blockIdx.x
        acc: f32 = 0.0
        for k in range(threadIdx.x, n, 256):
            acc += a[row, k]
        for offset in (16, 8, 4, 2, 1):
            acc += shfl_down_sync(FULL_MASK, acc, offset)
        lane = threadIdx.x % 32
        warp = threadIdx.x // 32
        if lane == 0:
            partial[warp] = acc
        syncthreads()
        if warp == 0:
            v: f32 = 0.0
            if lane < 8:
                v = partial[lane]
            for offset in (4, 2, 1):
                v += shfl_down_sync(FULL_MASK, v, offset)
            if lane == 0:
                out[row] = v
    return rowsum


def matmul_naive_kernel():
    @script
    def matmul_naive(a: f32[m, k], b: f32[k, n], c: f32[m, n], m: i32, n: i32, k: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = ((n + 15) // 16, (m + 15) // 16)
        attrs.cuda.block_dim = (16, 16)
        i = blockIdx.y * 16 + threadIdx.y
        j = blockIdx.x * 16 + threadIdx.x
        if i < m and j < n:
            acc: f32 = 0.0
            for kk in range(k):
                acc += a[i, kk] * b[kk, j]
            c[i, j] = acc
    return matmul_naive


def matmul_tiled_kernel():
    """64x64 block tiles, k-steps of 8 staged in shared memory by two loader mappings,
    4x4 register tiles per thread (spatial(16, 16) * repeat(4, 4)); predicated at edges."""
    a_map = repeat(2, 1) * spatial(32, 8)  # a (64, 8) tile of A: two elements per thread
    b_map = repeat(2, 1) * spatial(4, 64)  # a (8, 64) tile of B
    c_map = spatial(16, 16) * repeat(4, 4)  # the (64, 64) tile of C

    @script
    def matmul_tiled(a: f32[m, k], b: f32[k, n], c: f32[m, n], m: i32, n: i32, k: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = ((n + 63) // 64, (m + 63) // 64)
        attrs.cuda.block_dim = 256
        attrs.cuda.min_blocks = 2
        sa = shared_tensor(f32, [64, 8])
        sb = shared_tensor(f32, [8, 64])
        acc = register_tensor(f32, [4, 4])
        for i, j in grid(4, 4, unroll=True):
            acc[i, j] = 0.0
        m0 = blockIdx.y * 64
        n0 = blockIdx.x * 64
        for k0 in range((k + 7) // 8):
            for i, kk in a_map.on(threadIdx.x):
                if m0 + i < m and k0 * 8 + kk < k:
                    sa[i, kk] = a[m0 + i, k0 * 8 + kk]
                else:
                    sa[i, kk] = 0.0
            for kk, j in b_map.on(threadIdx.x):
                if k0 * 8 + kk < k and n0 + j < n:
                    sb[kk, j] = b[k0 * 8 + kk, n0 + j]
                else:
                    sb[kk, j] = 0.0
            syncthreads()
            for kk in unroll(8):
                for i, j in c_map.on(threadIdx.x):
                    acc[i % 4, j % 4] += sa[i, kk] * sb[kk, j]
            syncthreads()
        for i, j in c_map.on(threadIdx.x):
            if m0 + i < m and n0 + j < n:
                c[m0 + i, n0 + j] = acc[i % 4, j % 4]
    return matmul_tiled


def mma_tile_kernel():
    """One warp: C[16x8] f32 = A[16x16] f16 @ B (given as Bt[8x16]); A arrives through
    cp.async with elements >= a_valid zero-filled, fragments through ldmatrix."""
    @script
    def mma_tile(a: f16[16, 16], bt: f16[8, 16], c: f32[16, 8], a_valid: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = 1
        attrs.cuda.block_dim = 32
        sa = shared_tensor(f16, [16, 16])
        sb = shared_tensor(f16, [8, 16])
        lane = threadIdx.x
        left = a_valid - lane * 8  # each lane copies 8 halves (16 bytes) of A
        nbytes = 16 if left >= 8 else (left * 2 if left > 0 else 0)
        src = lane * 8 if left > 0 else 0  # never form an address past the data
        cp_async(sa[lane // 2, lane % 2 * 8], a[src // 16, src % 16], 16, nbytes, "cg")
        if lane < 16:
            cp_async(sb[lane // 2, lane % 2 * 8], bt[lane // 2, lane % 2 * 8], 16, None, "cg")
        cp_async_commit_group()
        cp_async_wait_group(0)
        syncthreads()
        a_frag = register_tensor(u32, [4])
        b_frag = register_tensor(u32, [2])
        acc = register_tensor(f32, [4])
        mat = lane // 8
        r = lane % 8
        ldmatrix_x4(a_frag, sa[r + mat % 2 * 8, mat // 2 * 8])
        ldmatrix_x2(b_frag, sb[r, mat % 2 * 8])
        for t in static_range(4):
            acc[t] = 0.0
        mma_sync_m16n8k16_f16_f32(acc, a_frag, b_frag, acc)
        row = lane // 4
        col = lane % 4 * 2
        c[row, col] = acc[0]
        c[row, col + 1] = acc[1]
        c[row + 8, col] = acc[2]
        c[row + 8, col + 1] = acc[3]
    return mma_tile


def zero_fill_kernel():
    """Copies n floats through shared memory with 16-byte cp.async; the copy itself
    zero-fills past n (src-size < 16), so dst (padded to 256) ends in zeros."""
    @script
    def zero_fill(src: ~f32, dst: ~f32, n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = (n + 255) // 256
        attrs.cuda.block_dim = 64
        buf = shared_tensor(f32, [256])
        base = blockIdx.x * 256 + threadIdx.x * 4
        left = n - base
        nbytes = 16 if left >= 4 else (left * 4 if left > 0 else 0)
        cp_async(buf[threadIdx.x * 4], src + (base if left > 0 else 0), 16, nbytes)
        cp_async_commit_group()
        cp_async_wait_all()
        syncthreads()
        for t in static_range(4):
            dst[base + t] = buf[threadIdx.x * 4 + t]
    return zero_fill


def atomic_sum_kernel():
    @script
    def atomic_sum(a: f32[n], total: f32[1], n: i32):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = (n + 255) // 256
        attrs.cuda.block_dim = 256
        i = blockIdx.x * 256 + threadIdx.x
        if i < n:
            atomic_add(total[0], a[i])
    return atomic_sum


ALL_KERNELS = {
    "elementwise_f32": lambda: elementwise_kernel(f32), "elementwise_f16": lambda: elementwise_kernel(f16),
    "transpose": transpose_kernel, "rowsum": rowsum_kernel, "matmul_naive": matmul_naive_kernel,
    "matmul_tiled": matmul_tiled_kernel, "mma_tile": mma_tile_kernel, "zero_fill": zero_fill_kernel,
    "atomic_sum": atomic_sum_kernel,
}


# ------------------------------------------------------------------ compile-only
@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(ALL_KERNELS))
def test_dsl_kernel_compiles_to_sm90_cubin(tmp_cache, name):
    fn = ALL_KERNELS[name]()
    lowered = lower(script_module(fn, name=name))
    source = generate(lowered)
    result = build_cubin(source, arch="sm_90", name=name)
    with open(result.path, "rb") as f:
        image = f.read()
    assert image.startswith(b"\x7fELF")
    (spec,) = kernel_specs(lowered)
    assert spec.name.encode() in image
    assert f'extern "C" __global__ __launch_bounds__(' in source


def test_mma_kernel_source_uses_the_instructions():
    source = generate(lower(script_module(mma_tile_kernel())))
    for text in ("cp.async.cg.shared.global [%0], [%1], 16, %2;", "cp.async.wait_group 0;",
                 "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                 '"+f"(acc[0])', "__shared__ __align__(16) __half sa[256];"):
        assert text in source, text


def test_launch_dims_follow_the_arguments():
    (spec,) = kernel_specs(lower(script_module(transpose_kernel())))
    assert spec.block == (256, 1, 1)
    assert spec.grid((None, None, 33, 65)) == (3, 2)  # ((65+31)//32, (33+31)//32)
    (tiled,) = kernel_specs(lower(script_module(matmul_tiled_kernel())))
    assert tiled.grid((None, None, None, 1, 1, 1)) == (1, 1)


# ---------------------------------------------------------------------- on a GPU
def _load(backend, fn, name):
    lowered = lower(script_module(fn, name=name))
    target = backend.detect_target()
    return backend.load(backend.build(generate(lowered, target), target, name=name), lowered)


def _poisoned(dev, shape, dtype):
    out = dev.empty(shape, dtype)
    out.fill_bytes(POISON)
    return out


def _rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert not np.isnan(got).any(), "every output element was written"
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, n, tol", [("float32", 1, 1e-6), ("float32", 100_003, 1e-6), ("float16", 4099, 2e-3)])
def test_elementwise(cuda_backend, rng, dtype, n, tol):
    mod = _load(cuda_backend, elementwise_kernel(f32 if dtype == "float32" else f16), f"ew_{dtype}")
    dev = cuda_backend.device
    a, b = rng.uniform(-2, 2, n).astype(dtype), rng.standard_normal(n).astype(dtype)
    c = _poisoned(dev, (n,), dtype)
    mod[f"elementwise_{'f32' if dtype == 'float32' else 'f16'}"](dev.from_numpy(a), dev.from_numpy(b), c, n)
    got, a64, b64 = np.asarray(dev.to_numpy(c), np.float64), a.astype(np.float64), b.astype(np.float64)
    assert not np.isnan(got).any(), "every output element was written"
    # error against the terms' size, not the sum's: exp(a) / 2 + b cancels, and with n = 1
    # a draw near -b made one float32 rounding of exp(a) / 2 exceed 1e-6 of the sum
    scale = np.max(np.exp(a64) * 0.5 + np.abs(b64))
    assert np.max(np.abs(got - (np.exp(a64) * 0.5 + b64))) / scale < tol


@pytest.mark.cuda
@pytest.mark.parametrize("m, n", [(1, 1), (31, 97), (257, 1031)])
def test_transpose(cuda_backend, rng, m, n):
    mod = _load(cuda_backend, transpose_kernel(), "transpose")
    dev = cuda_backend.device
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = _poisoned(dev, (n, m), "float32")
    mod["transpose"](dev.from_numpy(a), b, m, n)
    assert np.array_equal(dev.to_numpy(b), a.T)


@pytest.mark.cuda
@pytest.mark.parametrize("m, n", [(1, 1), (7, 33), (131, 5003)])
def test_rowsum_with_warp_shuffles(cuda_backend, rng, m, n):
    mod = _load(cuda_backend, rowsum_kernel(), "rowsum")
    dev = cuda_backend.device
    a = rng.standard_normal((m, n)).astype(np.float32)
    out = _poisoned(dev, (m,), "float32")
    mod["rowsum"](dev.from_numpy(a), out, m, n)
    want = a.astype(np.float64).sum(1)
    assert np.max(np.abs(dev.to_numpy(out) - want)) < 1e-5 * n + 1e-6


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["matmul_naive", "matmul_tiled"])
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (17, 23, 31), (131, 67, 257)])
def test_matmul(cuda_backend, rng, kernel, m, n, k):
    mod = _load(cuda_backend, ALL_KERNELS[kernel](), kernel)
    dev = cuda_backend.device
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = _poisoned(dev, (m, n), "float32")
    mod[kernel](dev.from_numpy(a), dev.from_numpy(b), c, m, n, k)
    assert np.max(np.abs(dev.to_numpy(c) - a.astype(np.float64) @ b)) < 1e-5 * k + 1e-6


@pytest.mark.cuda
def test_mma_tile_with_cp_async_zero_fill(cuda_backend, rng):
    mod = _load(cuda_backend, mma_tile_kernel(), "mma_tile")
    dev = cuda_backend.device
    a = rng.standard_normal((16, 16)).astype(np.float16)
    bt = rng.standard_normal((8, 16)).astype(np.float16)
    c = _poisoned(dev, (16, 8), "float32")
    a_valid = 16 * 16 - 3  # the last three elements of A are zero-filled by cp.async
    mod["mma_tile"](dev.from_numpy(a), dev.from_numpy(bt), c, a_valid)
    a_ref = a.astype(np.float64).reshape(-1)
    a_ref[a_valid:] = 0
    assert _rel_err(dev.to_numpy(c), a_ref.reshape(16, 16) @ bt.astype(np.float64).T) < 1e-5


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 5, 1001, 65537])
def test_cp_async_zero_fill(cuda_backend, rng, n):
    mod = _load(cuda_backend, zero_fill_kernel(), "zero_fill")
    dev = cuda_backend.device
    padded = (n + 255) // 256 * 256
    src = rng.standard_normal(n).astype(np.float32)
    dst = _poisoned(dev, (padded,), "float32")
    mod["zero_fill"](dev.from_numpy(src), dst, n)
    got = dev.to_numpy(dst)
    assert np.array_equal(got[:n], src) and not got[n:].any()


@pytest.mark.cuda
def test_atomic_add(cuda_backend, rng):
    mod = _load(cuda_backend, atomic_sum_kernel(), "atomic_sum")
    dev = cuda_backend.device
    n = 100_003
    a = rng.standard_normal(n).astype(np.float32)
    total = dev.from_numpy(np.zeros(1, np.float32))
    mod["atomic_sum"](dev.from_numpy(a), total, n)
    assert abs(float(dev.to_numpy(total)[0]) - a.astype(np.float64).sum()) < 1e-5 * n


# ------------------------------------------- bench/gpu_bandwidth.py: the bandwidth variants
def _bandwidth_bench():
    """bench/gpu_bandwidth.py, loaded by path (tests run in importlib mode)."""
    import importlib.util
    import os

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    path = os.path.join(repo, "bench", "gpu_bandwidth.py")
    spec = importlib.util.spec_from_file_location("gpu_bandwidth_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BW = _bandwidth_bench()
BW_VARIANTS = {v.name: v for v in BW.variants()}
# small primes (never a multiple of a tile), and one prime above every grid-stride
# variant's grid x tile on the H200 default (<= 17.3M elements), so those loop and then
# take the tail
BW_SIZES = [1, 7, 4099, 1_000_003, 20_000_003]


@pytest.mark.nvcc
@pytest.mark.parametrize("name", sorted(BW_VARIANTS))
def test_bandwidth_variant_compiles_to_sm90_cubin(tmp_cache, name):
    v = BW_VARIANTS[name]
    lowered = lower(script_module(BW.variant_kernel(v), name=name))
    source = generate(lowered)
    result = build_cubin(source, arch="sm_90", name=name)
    with open(result.path, "rb") as f:
        image = f.read()
    assert image.startswith(b"\x7fELF") and name.encode() in image
    streaming = "__ldcs(" in source and "__stcs(" in source
    assert streaming == (v.cache == "cs")
    assert "(float4*)&a[" in source
    (spec,) = kernel_specs(lowered)
    assert spec.block == (v.block, 1, 1)
    tile = v.vecs * v.block * 4
    for n in (1, tile, tile + 1, 268_435_456):
        want = (n + tile - 1) // tile
        if v.loop == "stride":
            want = min(want, BW.stride_grid(v))
        assert spec.grid((None, None, None, n)) == (want,)


@pytest.mark.nvcc
def test_bandwidth_add_variants_do_not_spill(tmp_path):
    """ptxas's report (nvcc -Xptxas -v) for the whole bench module: the add variants and
    the baselines keep everything in registers (no local memory)."""
    import re
    import shutil
    import subprocess

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH (the register report needs it)")
    _, source, _ = BW.build_module()
    cu = tmp_path / "gpu_bandwidth.cu"
    cu.write_text(source)
    out = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o", str(tmp_path / "bw.cubin"), str(cu)],
                         capture_output=True, text=True, check=True)
    report = dict(re.findall(r"Compiling entry function '(\w+)' for 'sm_90'\s*\n.*?\n?.*?(\d+) bytes spill stores",
                             out.stderr))
    names = ["bw_copy", "bw_add", *BW_VARIANTS]
    assert set(names) <= set(report), sorted(set(names) - set(report))
    spilling = {k: int(report[k]) for k in names if (k.startswith("bw_add") or k == "bw_copy") and int(report[k])}
    assert not spilling, spilling


@pytest.fixture(scope="module")
def bandwidth_module(cuda_backend):
    """Every variant and the baselines in one module, built for this GPU."""
    _, _, loaded = BW.build_module(cuda_backend, cuda_backend.detect_target())
    return loaded


@pytest.mark.cuda
@pytest.mark.parametrize("n", BW_SIZES)
@pytest.mark.parametrize("name", sorted(BW_VARIANTS))
def test_bandwidth_variant_on_gpu(cuda_backend, bandwidth_module, rng, name, n):
    v = BW_VARIANTS[name]
    dev = cuda_backend.device
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    pad = 67  # poisoned elements past n must stay poisoned
    c = _poisoned(dev, (n + pad,), "float32")
    bandwidth_module[name](dev.from_numpy(a), dev.from_numpy(b), c, n)
    got = dev.to_numpy(c)
    want = (a.astype(np.float64) + b) if v.op == "add" else a
    assert np.array_equal(got[:n], np.asarray(want, np.float32)), "every element is a + b (or a), fp32"
    assert np.isnan(got[n:]).all(), "nothing written past n"
