"""Tests of the CUDA backend that need no GPU and no compiler: availability, the
default target, DLPack structs, argument packing, the allocator's size classes."""
from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hidet_plugin_cuda
from hidet_plugin_cuda import CudaBackend, CudaLaunchError, KernelSpec, ParamSpec
from hidet_plugin_cuda import dlpack
from hidet_plugin_cuda.dtypes import dtype, scalar_argument
from hidet_plugin_cuda.kernel import KernelLauncher, as_dim3, pack_arguments
from hidet_plugin_cuda.memory import DeviceArray, size_class
from hidet_plugin_cuda.target import default_cuda_target


def test_availability_answers_without_raising():
    available = CudaBackend().availability()
    if available:
        pytest.skip("a CUDA GPU is usable here")
    assert available.usable is False and available.reason, "an unusable backend says why"


def test_without_cuda_bindings_import_works_and_reason_says_so():
    # a fresh interpreter in which `import cuda` fails, as on a machine without the wheel
    code = textwrap.dedent("""
        import sys
        sys.modules["cuda"] = None
        import hidet_plugin_cuda
        from hidet_plugin_cuda import CudaBackend
        b = CudaBackend()
        a = b.availability()
        assert not a and "cuda-bindings" in a.reason, a
        assert b.detect_target().arch == "sm_90"
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_register_backends_hook_registers_cuda():
    registered = {}
    hidet_plugin_cuda.register_backends(lambda name, obj: registered.setdefault(name, obj))
    backend = registered["cuda"]
    assert isinstance(backend, CudaBackend) and backend.name == "cuda" and backend.target_kinds == ("cuda",)


def test_default_target_is_the_h200():
    t = default_cuda_target()
    assert (t.kind, t.arch) == ("cuda", "sm_90")
    assert t["sm_count"] == 132 and t["warp_size"] == 32 and t["compute_capability"] == (9, 0)
    assert t["smem_per_block_optin"] == 227 * 1024 and t["smem_per_sm"] == 228 * 1024
    assert t["regs_per_block"] == t["regs_per_sm"] == 65536 and t["max_threads_per_block"] == 1024
    assert t.fingerprint() == default_cuda_target().fingerprint()
    if not CudaBackend().availability():
        assert CudaBackend().detect_target() == t


# -- DLPack ------------------------------------------------------------------------------
def test_dlpack_struct_layout_matches_numpy_producer():
    host = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)[:, ::2, :]
    imported = dlpack.from_capsule(host.__dlpack__(), producer=host)
    assert imported.device_type == dlpack.KDL_CPU
    assert imported.data_ptr == host.ctypes.data
    assert imported.shape == host.shape
    assert imported.strides == tuple(s // host.itemsize for s in host.strides)
    assert imported.dtype.name == "float32"
    del imported
    gc.collect()


def test_dlpack_export_import_round_trip_keeps_owner_alive():
    # a fake device pointer: nothing dereferences it, only the struct plumbing runs
    array = DeviceArray(0x7F00_0000_1000, (7, 11), "float16", device_id=0, owner="fake")
    before = dlpack.exported_count()

    class Producer:  # what torch looks like to from_dlpack: the two protocol methods
        def __dlpack__(self, stream=None):
            return array.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return array.__dlpack_device__()

    view = DeviceArray.from_dlpack(Producer())
    assert (view.ptr, view.shape, view.strides, view.dtype.name) == (array.ptr, (7, 11), (11, 1), "float16")
    assert dlpack.exported_count() == before + 1, "the export is held while the consumer lives"
    del view
    gc.collect()
    assert dlpack.exported_count() == before, "the consumer's deleter released the export"


def test_unconsumed_capsule_releases_its_export():
    array = DeviceArray(0x1000, (3,), "int32")
    before = dlpack.exported_count()
    capsule = array.__dlpack__()
    assert dlpack.exported_count() == before + 1
    del capsule
    gc.collect()
    assert dlpack.exported_count() == before


def test_from_dlpack_refuses_host_arrays():
    with pytest.raises(TypeError, match="not CUDA"):
        DeviceArray.from_dlpack(np.ones(3, dtype=np.float32))


# -- kernel arguments ---------------------------------------------------------------------
def _spec():
    return KernelSpec("k", [ParamSpec("x", "tensor", "float32", (None, 4)), ParamSpec("n", "scalar", "int32"),
                            ParamSpec("alpha", "scalar", "float16")],
                      grid=lambda args: (args[1] + 127) // 128, block=128)


def test_arguments_are_packed_as_c_types():
    x = DeviceArray(0xABC000, (3, 4), "float32")
    values, keep = pack_arguments(_spec(), [x, 1000, 1.5])
    assert isinstance(values[0], ctypes.c_uint64) and values[0].value == 0xABC000
    assert isinstance(values[1], ctypes.c_int32) and values[1].value == 1000
    assert values[2].value == int(np.array(1.5, np.float16).view(np.uint16))
    assert keep == [x]


def test_numpy_array_is_rejected_with_advice():
    with pytest.raises(CudaLaunchError, match="copy it to the device first"):
        pack_arguments(_spec(), [np.zeros((3, 4), np.float32), 1, 1.0])


@pytest.mark.parametrize("bad, match", [
    ((DeviceArray(0x10, (3, 5), "float32"), 1, 1.0), "shape"),
    ((DeviceArray(0x10, (3, 4), "float16"), 1, 1.0), "dtype"),
    ((DeviceArray(0x10, (3, 4), "float32", (1, 3)), 1, 1.0), "strided"),
    ((DeviceArray(0x10, (3, 4), "float32"), 1.5, 1.0), "not an integer"),
    ((DeviceArray(0x10, (3, 4), "float32"), 1), "takes 3 arguments"),
])
def test_mismatched_arguments_are_explained(bad, match):
    with pytest.raises(CudaLaunchError, match=match):
        pack_arguments(_spec(), list(bad))


def test_bfloat16_scalar_rounds_to_nearest_even():
    assert scalar_argument(1.0, "bfloat16").value == 0x3F80
    assert scalar_argument(-2.0, "bfloat16").value == 0xC000
    assert scalar_argument(1.00390625, "bfloat16").value == 0x3F80  # halfway: to even


def test_launch_dims_are_normalised():
    assert as_dim3(5) == (5, 1, 1) and as_dim3((2, 3)) == (2, 3, 1)
    assert _spec().block == (128, 1, 1)
    with pytest.raises(ValueError):
        as_dim3((0, 1))


def test_launch_config_fixed_or_from_arguments_and_smem_limit_checked_at_launch():
    fixed = KernelLauncher(KernelSpec("k", [], grid=(4, 2), block=64, dynamic_smem=1024), function=None)
    assert fixed.launch_config(()) == ((4, 2, 1), (64, 1, 1), 1024)
    dynamic = KernelLauncher(_spec(), function=None)
    assert dynamic.launch_config([None, 1000, 1.0]) == ((8, 1, 1), (128, 1, 1), 0)
    assert dynamic.launch_config([None, 100, 1.0]) == ((1, 1, 1), (128, 1, 1), 0)
    too_big = KernelLauncher(KernelSpec("k", [], grid=1, dynamic_smem=4096), function=None, smem_limit=2048)
    with pytest.raises(CudaLaunchError, match="4096 bytes of dynamic shared memory"):  # at the launch, not at load
        too_big.launch_config(())


def test_unknown_dtype_is_refused():
    with pytest.raises(TypeError, match="no dtype"):
        dtype("complex64")
    with pytest.raises(ValueError, match="kind"):
        ParamSpec("x", "pointer", "float32")


# -- allocator size classes ----------------------------------------------------------------
def test_size_classes_cover_requests_with_bounded_waste():
    for n in [1, 511, 512, 513, 4096, 1 << 20, (1 << 20) + 1, 3_000_017, 1 << 30]:
        c = size_class(n)
        assert c >= n and c % 512 == 0
        assert c - n < max(512, n // 8 + 1)
        assert size_class(c) == c, "a class is its own class"


def test_torch_is_imported_before_nvrtc_when_installed(tmp_path, monkeypatch):
    """On the GPU machine an in-process NVRTC compile broke a later `import torch`;
    torch imported first works, so the backend imports it first when it is installed."""
    from hidet_plugin_cuda import nvrtc_build

    (tmp_path / "torch.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    nvrtc_build.import_torch_first.__wrapped__()
    assert sys.modules["torch"].IMPORTED
