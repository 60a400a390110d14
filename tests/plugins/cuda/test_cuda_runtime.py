"""Runtime tests of the CUDA backend: they launch kernels and need a GPU (marker cuda).

Inputs are drawn fresh each run, outputs are poisoned (NaN bytes) before launch, sizes
are prime, and results are compared with float64 numpy references.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

from hidet_plugin_cuda import KernelSpec, ParamSpec
from hidet_plugin_cuda.memory import DeviceArray

pytestmark = pytest.mark.cuda

POISON = 0xFF  # every byte 0xFF: NaN in f16/f32/f64


def _rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def _load(backend, source, specs, name):
    target = backend.detect_target()
    return backend.load(backend.build(source, target, name=name), specs)


def _vector_add_spec():
    return KernelSpec("vector_add",
                      [ParamSpec("a", "tensor", "float32", ["n"]), ParamSpec("b", "tensor", "float32", ["n"]),
                       ParamSpec("c", "tensor", "float32", ["n"]), ParamSpec("n", "scalar", "int32")],
                      grid=lambda args: (args[3] + 255) // 256, block=256)


@pytest.mark.parametrize("n", [1, 997, 1_000_003])
def test_vector_add(cuda_backend, kernels, rng, n):
    module = _load(cuda_backend, kernels.VECTOR_ADD, [_vector_add_spec()], "vector_add")
    dev = cuda_backend.device
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db, dc = dev.from_numpy(a), dev.from_numpy(b), dev.empty((n,), "float32")
    dc.fill_bytes(POISON)
    module["vector_add"](da, db, dc, n)
    got = dev.to_numpy(dc)
    assert not np.isnan(got).any(), "every output element was written"
    assert _rel_err(got, a.astype(np.float64) + b) < 1e-6


def test_half_kernel_with_scalar_half(cuda_backend, kernels, rng):
    n = 4099
    spec = KernelSpec("half_axpy", [ParamSpec("x", "tensor", "float16"), ParamSpec("y", "tensor", "float16"),
                                    ParamSpec("alpha", "scalar", "float16"), ParamSpec("n", "scalar", "int32")],
                      grid=lambda args: (args[3] + 127) // 128, block=128)
    module = _load(cuda_backend, kernels.HALF_AXPY, spec, "half_axpy")
    x, y = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(np.float16)
    dx, dy = cuda_backend.device.from_numpy(x), cuda_backend.device.from_numpy(y)
    module["half_axpy"](dx, dy, 0.75, n)
    want = 0.75 * x.astype(np.float64) + y
    assert _rel_err(dy.to_numpy(), want) < 2e-3


def test_mma_cp_async_ldmatrix_tile(cuda_backend, kernels, rng):
    spec = KernelSpec("mma_tile", [ParamSpec("A", "tensor", "float16", (16, 16)),
                                   ParamSpec("Bt", "tensor", "float16", (8, 16)),
                                   ParamSpec("C", "tensor", "float32", (16, 8)),
                                   ParamSpec("a_valid", "scalar", "int32")], grid=1, block=32)
    module = _load(cuda_backend, kernels.MMA_TILE, spec, "mma_tile")
    a = rng.standard_normal((16, 16)).astype(np.float16)
    bt = rng.standard_normal((8, 16)).astype(np.float16)
    dev = cuda_backend.device
    dc = dev.empty((16, 8), "float32")
    dc.fill_bytes(POISON)
    a_valid = 16 * 16 - 3  # the last three elements of A are zero-filled by cp.async
    module["mma_tile"](dev.from_numpy(a), dev.from_numpy(bt), dc, a_valid)
    a_ref = a.astype(np.float64).reshape(-1)
    a_ref[a_valid:] = 0
    want = a_ref.reshape(16, 16) @ bt.astype(np.float64).T
    assert _rel_err(dc.to_numpy(), want) < 1e-5


def test_more_than_48kb_dynamic_shared_memory(cuda_backend, kernels, rng):
    chunk = 100 * 1024 // 4  # 100 KB of floats per block
    n = 250_007
    spec = KernelSpec("smem_reverse", [ParamSpec("x", "tensor", "float32"), ParamSpec("y", "tensor", "float32"),
                                       ParamSpec("n", "scalar", "int32"), ParamSpec("chunk", "scalar", "int32")],
                      grid=lambda args: (args[2] + args[3] - 1) // args[3], block=256,
                      dynamic_smem=lambda args: args[3] * 4)
    module = _load(cuda_backend, kernels.BIG_SMEM_REVERSE, spec, "smem_reverse")
    x = rng.standard_normal(n).astype(np.float32)
    dev = cuda_backend.device
    dy = dev.empty((n,), "float32")
    dy.fill_bytes(POISON)
    module["smem_reverse"](dev.from_numpy(x), dy, n, chunk)
    blocks = -(-n // chunk)
    padded = np.zeros(blocks * chunk, np.float64)
    padded[:n] = x
    want = 2.0 * padded.reshape(blocks, chunk)[:, ::-1].reshape(-1)[:n]
    assert _rel_err(dy.to_numpy(), want) < 1e-7


def test_dlpack_round_trip_with_torch(cuda_backend, kernels, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    n = 65_537
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda()
    view = DeviceArray.from_dlpack(x)
    assert view.ptr == x.data_ptr() and view.shape == (n,) and view.dtype.name == "float32"
    back = torch.from_dlpack(view)
    assert back.data_ptr() == x.data_ptr(), "no copy either way"
    # torch tensors go straight into a launch, and results are visible to torch
    module = _load(cuda_backend, kernels.VECTOR_ADD, [_vector_add_spec()], "vector_add")
    out = torch.full((n,), float("nan"), device="cuda")
    module["vector_add"](x, x, out, n)
    torch.cuda.synchronize()
    assert _rel_err(out.cpu().numpy(), 2.0 * x.cpu().numpy().astype(np.float64)) < 1e-7
    ours = cuda_backend.device.from_numpy(np.arange(5, dtype=np.float32))
    assert torch.from_dlpack(ours).cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_allocator_reuses_freed_blocks(cuda_backend):
    alloc = cuda_backend.device.allocator
    first = cuda_backend.device.empty((12_345,), "float32")
    ptr = first.ptr
    del first
    gc.collect()
    before = alloc.device_allocations
    second = cuda_backend.device.empty((12_300,), "float32")  # same size class
    assert second.ptr == ptr and alloc.device_allocations == before
    del second
    gc.collect()
    cached = alloc.cached_bytes
    assert cached > 0
    cuda_backend.device.empty_cache()
    assert alloc.cached_bytes == 0


def test_event_timing_is_positive(cuda_backend, kernels):
    n = 1 << 22
    module = _load(cuda_backend, kernels.VECTOR_ADD, [_vector_add_spec()], "vector_add")
    dev = cuda_backend.device
    a = dev.from_numpy(np.ones(n, np.float32))
    c = dev.empty((n,), "float32")
    times = dev.time(lambda: module["vector_add"](a, a, c, n), warmup=2, repeat=5)
    assert len(times) == 5 and all(0 < t < 1.0 for t in times)


def test_target_is_read_off_the_device(cuda_backend):
    t = cuda_backend.detect_target()
    assert t.kind == "cuda" and t.arch.startswith("sm_")
    assert t["sm_count"] > 0 and t["warp_size"] == 32 and t["smem_per_block_optin"] >= t["smem_per_block"]
