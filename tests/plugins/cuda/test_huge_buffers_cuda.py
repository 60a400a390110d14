"""Issue 12 item 1 on the CUDA path: a kernel over a buffer of more than 2^31
elements indexes in int64 (compile-only check, marker nvcc) and gives the right
answer in the tail (relu on int8 [1, 2^31 + 8], marker cuda: the lead runs it on the
GPU machine; about 4 GiB of device and 4 GiB of host memory)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hidet_framework as hf

N = 2**31 + 8


def _relu_task(n):
    return hf.ops.relu(hf.symbol((1, n), "int8")).producer.task


@pytest.mark.nvcc
def test_huge_elementwise_kernel_indexes_in_int64_and_compiles(tmp_cache):
    from hidet_framework.schedule import auto_schedule
    from hidet_framework.lowering.pipeline import lower
    from hidet_plugin_cuda.codegen import generate
    from hidet_plugin_cuda.nvrtc_build import build_cubin

    source = generate(lower(auto_schedule(_relu_task(N), "cuda").module, "cuda"))
    body = source[source.index("/* hidet function"):]
    assert not re.search(r"\b(int|int32_t) \w+ = ", body), body
    assert re.search(r"const (long long|int64_t) i\d+ = ", body), body
    build_cubin(source, arch="sm_90", name="relu_huge")
    small = generate(lower(auto_schedule(_relu_task(1000), "cuda").module, "cuda"))
    assert re.search(r"const (int|int32_t) i\d+ = ", small[small.index("/* hidet function"):])


@pytest.mark.cuda
def test_relu_int8_beyond_2_31_elements_on_the_gpu(cuda_backend, rng):
    from hidet_framework.driver import compile_task

    compiled = compile_task(_relu_task(N), "cuda")
    device = cuda_backend.device
    x = rng.integers(-128, 128, (1, N), dtype=np.int8)
    x[0, -8:] = [-5, 7, -128, 127, 1, -1, 0, 99]
    x_dev = device.from_numpy(x)
    y_dev = device.from_numpy(np.full((1, N), -77, np.int8))  # poisoned
    compiled.run([x_dev], [y_dev])
    y = device.to_numpy(y_dev)
    del x_dev, y_dev
    assert y[0, -8:].tolist() == [0, 7, 0, 127, 1, 0, 0, 99]
    chunk = 1 << 27
    for start in range(0, N, chunk):
        np.testing.assert_array_equal(y[0, start:start + chunk], np.maximum(x[0, start:start + chunk], 0),
                                      err_msg=f"at {start}")
