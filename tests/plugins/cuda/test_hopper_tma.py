"""Hopper's mbarriers, bulk tensor copies (TMA) and warp-specialisation primitives
(named barriers, setmaxnreg) in `hidet_plugin_cuda.hopper`.

- host: the tensor-map encoder refuses what TMA cannot do before calling the driver;
- compile-only (marker nvcc): a script kernel that TMA-loads a tile compiles to sm_90;
- GPU (marker cuda): boxes of fp16 / fp32 tensors (odd sizes: boxes past the edges are
  zero-filled) land in shared memory as the tensor holds them, with no swizzle and
  with the 128-byte swizzle read back through the `swizzle` layout the wgmma kernels
  use; outputs poisoned first.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.lang import attrs, i32, script, script_module, shared_tensor, u8, u64
from hidet_framework.lang.annotations import DTypeAnnotation
from hidet_framework.ir.dtypes import data_type
from hidet_framework.mapping.layout import row_major, swizzle
from hidet_framework.mapping.task_mapping import auto_map
from hidet_plugin_cuda import hopper as hw
from hidet_plugin_cuda.codegen import generate
from hidet_plugin_cuda.lang import blockIdx, dynamic_shared_tensor, syncthreads, threadIdx
from hidet_plugin_cuda.nvrtc_build import build_cubin

THREADS = 128


def lower(module):
    from hidet_framework.lowering.lower_task_mapping import LowerTaskMappingPass
    from hidet_framework.lowering.pipeline import lower as pipeline_lower

    return pipeline_lower(LowerTaskMappingPass().run(module, None), "cuda")


def tma_tile_kernel(dtype: str, rows: int, cols: int, br: int, bc: int, swizzled: bool):
    """Block (y, x) TMA-loads box (y * br, x * bc) into shared memory, waits on an
    mbarrier, and copies the box to out (shape padded to whole boxes: past the tensor's
    edges the box must hold zeros)."""
    dt = DTypeAnnotation(data_type(dtype))
    gy, gx = -(-rows // br), -(-cols // bc)
    nbytes = br * bc * data_type(dtype).nbytes
    layout = swizzle(row_major(br, bc), vector=16 // data_type(dtype).nbytes, period=8) if swizzled \
        else row_major(br, bc)
    copy = auto_map(br, bc, workers=THREADS)

    @script
    def tma_tile(tmap: u8[128], out: dt[gy * br, gx * bc]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = f"tma_tile_{dtype}_{'sw' if swizzled else 'plain'}"
        attrs.cuda.grid_dim = (gx, gy)
        attrs.cuda.block_dim = THREADS
        attrs.cuda.dynamic_smem_bytes = nbytes
        tile = dynamic_shared_tensor(dt, [br, bc], 0, layout)
        bar = shared_tensor(u64, [1])
        tid = threadIdx.x
        if tid == 0:
            hw.mbarrier_init(bar[0], 1)
            hw.fence_mbarrier_init()
        syncthreads()
        if tid == 0:
            hw.mbarrier_arrive_expect_tx(bar[0], nbytes)
            hw.tma_load_2d(tile[0, 0], tmap, bar[0], blockIdx.x * bc, blockIdx.y * br)
        hw.mbarrier_wait(bar[0], 0)
        for i, j in copy.on(tid):
            out[blockIdx.y * br + i, blockIdx.x * bc + j] = tile[i, j]

    return tma_tile


def test_tensor_map_encoder_refuses_what_tma_cannot_do():
    with pytest.raises(ValueError, match="tensor maps"):
        hw.encode_tensor_map_2d(0, "int16", 8, 8, 16, 8, 8)
    with pytest.raises(ValueError, match="swizzle"):
        hw.encode_tensor_map_2d(0, "float16", 8, 8, 16, 8, 8, swizzle_bytes=16)
    with pytest.raises(ValueError, match="aligned"):
        hw.encode_tensor_map_2d(8, "float16", 8, 8, 16, 8, 8)
    with pytest.raises(ValueError, match="pitch"):
        hw.encode_tensor_map_2d(0, "float16", 8, 64, 64, 8, 8)
    with pytest.raises(ValueError, match="box"):
        hw.encode_tensor_map_2d(0, "float16", 8, 8, 16, 8, 4)  # 8-byte box rows
    with pytest.raises(ValueError, match="exceeds"):
        hw.encode_tensor_map_2d(0, "float16", 128, 128, 256, 8, 128, swizzle_bytes=128)


def test_mbarrier_and_tma_instructions_in_the_source():
    source = generate(lower(script_module(tma_tile_kernel("float16", 37, 61, 16, 64, True))))
    for text in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster;",
                 "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
                 "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"):
        assert text in source, text


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype, swizzled", [("float16", True), ("float32", False)])
def test_tma_kernel_compiles_to_sm90(tmp_cache, dtype, swizzled):
    bc = 64 if dtype == "float16" else 32
    source = generate(lower(script_module(tma_tile_kernel(dtype, 37, 61, 16, bc, swizzled))))
    result = build_cubin(source, arch="sm_90", name=f"tma_{dtype}")
    with open(result.path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, rows, cols, br, bc, swizzled", [
    ("float16", 37, 61 * 8, 16, 64, True),   # 128-byte rows, 128-byte swizzle; 37 rows: a partial box
    ("float16", 100, 200, 8, 64, False),
    ("float32", 31, 97 * 4, 8, 32, True),    # fp32: 16-byte vectors are 4 elements
    ("float32", 5, 36, 16, 8, False),        # box larger than the tensor
])
def test_tma_box_lands_in_shared_memory(cuda_backend, rng, dtype, rows, cols, br, bc, swizzled):
    target = cuda_backend.detect_target()
    if target.arch not in ("sm_90", "sm_90a"):
        pytest.skip("TMA needs an sm_90 GPU")
    fn = tma_tile_kernel(dtype, rows, cols, br, bc, swizzled)
    lowered = lower(script_module(fn, name="tma"))
    mod = cuda_backend.load(cuda_backend.build(generate(lowered, target), target, name="tma"), lowered)
    dev = cuda_backend.device
    x = rng.standard_normal((rows, cols)).astype(dtype)
    xd = dev.from_numpy(x)
    elem = x.itemsize
    tmap = hw.encode_tensor_map_2d(xd.ptr, dtype, rows, cols, cols * elem, br, bc, 128 if swizzled else 0)
    assert len(tmap) == 128
    gy, gx = -(-rows // br), -(-cols // bc)
    out = dev.empty((gy * br, gx * bc), dtype)
    out.fill_bytes(0xFF)
    mod[fn.ir.name](dev.from_numpy(np.frombuffer(tmap, np.uint8).copy()), out)
    got = dev.to_numpy(out)
    want = np.zeros((gy * br, gx * bc), dtype)
    want[:rows, :cols] = x
    assert np.array_equal(got, want)


def specialised_kernel():
    """Two warpgroups with different register budgets, each synchronising on its own
    named barrier: warpgroup 0 writes tid, warpgroup 1 writes 2 * tid."""
    @script
    def warp_specialised(out: i32[256]):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = "warp_specialised"
        attrs.cuda.grid_dim = 1
        attrs.cuda.block_dim = 256
        attrs.cuda.min_blocks = 1  # a register cap at entry: setmaxnreg needs it
        tid = threadIdx.x
        if tid < 128:
            hw.setmaxnreg(40, False)
            out[tid] = tid
            hw.named_barrier_sync(1, 128)
        else:
            hw.setmaxnreg(232, True)
            hw.named_barrier_sync(2, 128)
            out[tid] = tid * 2

    return warp_specialised


def test_warp_specialisation_primitives_refuse_bad_arguments():
    for bad in (0, 100, 20, 264):
        with pytest.raises(ValueError):
            hw.setmaxnreg(bad, True)
    with pytest.raises(ValueError):
        hw.named_barrier_sync(0, 128)
    with pytest.raises(ValueError):
        hw.named_barrier_sync(1, 100)


@pytest.mark.nvcc
def test_warp_specialised_kernel_compiles_to_sm90a(tmp_cache):
    source = generate(lower(script_module(specialised_kernel())))
    for text in ("setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 232;", "bar.sync %0, %1;",
                 "__launch_bounds__(256, 1)"):
        assert text in source, text
    result = build_cubin(source, arch="sm_90", name="warp_specialised")  # picks sm_90a from the source
    with open(result.path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


@pytest.mark.cuda
def test_warp_specialised_kernel_runs(cuda_backend):
    target = cuda_backend.detect_target()
    if target.arch not in ("sm_90", "sm_90a"):
        pytest.skip("setmaxnreg needs an sm_90 GPU")
    lowered = lower(script_module(specialised_kernel(), name="ws"))
    mod = cuda_backend.load(cuda_backend.build(generate(lowered, target), target, name="ws"), lowered)
    out = cuda_backend.device.empty((256,), "int32")
    out.fill_bytes(0xFF)
    mod["warp_specialised"](out)
    want = np.arange(256, dtype=np.int32)
    want[128:] *= 2
    assert np.array_equal(cuda_backend.device.to_numpy(out), want)


def pair_store_kernel(dtype: str):
    dt = DTypeAnnotation(data_type(dtype))

    @script
    def pair_store(x: DTypeAnnotation(data_type("float32"))[64], out: dt[64]):
        attrs.func_kind = "cuda_kernel"
        attrs.cuda.grid_dim = 1
        attrs.cuda.block_dim = 32
        s = shared_tensor(dt, [64])
        tid = threadIdx.x
        hw.st_shared_pair(s[tid * 2], x[tid * 2], x[tid * 2 + 1], dtype)
        syncthreads()
        out[tid] = s[tid]
        out[tid + 32] = s[tid + 32]

    return pair_store


def test_shared_pair_store_source_and_refusals():
    for dtype, kind in (("float16", "f16x2"), ("bfloat16", "bf16x2")):
        source = generate(lower(script_module(pair_store_kernel(dtype))))
        assert f"cvt.rn.{kind}.f32 hf_pair, %2, %1;" in source and "st.shared.b32 [%0], hf_pair;" in source
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        hw.st_shared_pair(None, 0.0, 1.0, "float32")


@pytest.mark.cuda
def test_shared_pair_store_rounds_and_orders_the_pair(cuda_backend, rng):
    """The lower address holds the first value (a swapped cvt operand order would swap
    every pair); values rounded to nearest as numpy's float16 conversion."""
    target = cuda_backend.detect_target()
    lowered = lower(script_module(pair_store_kernel("float16"), name="pair"))
    mod = cuda_backend.load(cuda_backend.build(generate(lowered, target), target, name="pair"), lowered)
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    xd, out = cuda_backend.device.from_numpy(x), cuda_backend.device.empty((64,), "float16")
    out.fill_bytes(0xFF)
    mod["pair_store"](xd, out)
    assert np.array_equal(cuda_backend.device.to_numpy(out), x.astype(np.float16))
