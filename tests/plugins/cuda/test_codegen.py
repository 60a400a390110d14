"""The cuda code generator on hand-built IR, auto-scheduled Tasks and the bandwidth
benchmark's kernels: compile-only checks (marker nvcc) plus source-level checks that
need no compiler, and one GPU run of the benchmark kernels (marker cuda)."""
from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest

from hidet_framework.backend.c_style import CodegenError
from hidet_framework.ir import (
    AssertStmt, BufferStoreStmt, Call, DeclareStmt, ForStmt, Function, IfStmt, LetStmt, ReturnStmt, Scope, cast,
    const, module, pointer_type, seq, tensor_type, var,
)
from hidet_framework.ir import dtypes
from hidet_plugin_cuda.codegen import generate, kernel_specs, launch_function
from hidet_plugin_cuda.lang import (
    blockIdx, dynamic_shared_tensor, mma_sync_m16n8k16_bf16_f32, mma_sync_m16n8k8_tf32, syncthreads, threadIdx,
)
from hidet_plugin_cuda.nvrtc_build import build_cubin

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HOSTILE = 'x"; } __global__ void evil() { /* */ #include <stdio.h>\n?? ??= \\'


def _compile(source: str, name: str) -> bytes:
    result = build_cubin(source, arch="sm_90", name=name)
    with open(result.path, "rb") as f:
        image = f.read()
    assert image.startswith(b"\x7fELF")
    return image


def _kernel(name, params, body, **attrs):
    attrs.setdefault("grid_dim", (1,))
    attrs.setdefault("block_dim", (128,))
    return Function(name, params, body, kind="cuda_kernel", attrs=attrs)


def _hostile_module():
    n = var(HOSTILE + "n")
    a = var(HOSTILE, tensor_type("float16", [n]))
    out = var("threadIdx", tensor_type("float32", [n]))  # would shadow the builtin
    x, y = var("expf", "float32"), var("__shfl_down_sync", "float32")
    helper = Function(HOSTILE + "helper", [x, y], ReturnStmt(x * y + 1.0), kind="device", ret_type=dtypes.float32)
    i = var("printf")
    body = LetStmt(i, blockIdx.x * 128 + threadIdx.x, IfStmt(i < n, seq(
        AssertStmt(i >= 0, HOSTILE),
        BufferStoreStmt(out, [i], Call(helper.name, (cast(a[i], "float32"), const(2.0)), dtypes.float32)))))
    kernel = _kernel("kernel_" + HOSTILE, [a, out, n], body, grid_dim=((n + 127) // 128,))
    return module(HOSTILE, [kernel, helper])


@pytest.mark.nvcc
def test_hostile_names_compile_and_stay_names(tmp_cache):
    m = _hostile_module()
    source = generate(m)
    (spec,) = kernel_specs(m)
    image = _compile(source, "hostile")
    assert spec.name.encode() in image and re.fullmatch(r"[A-Za-z_]\w*", spec.name)
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r"/\*.*?\*/", "", source, flags=re.S))
    assert "evil()" not in code and "<stdio.h>" not in code, "the hostile text is only in comments and strings"
    assert not re.search(r"\b(float|int) (threadIdx|expf|printf)\b", source), "builtins are never shadowed"


def test_host_and_public_functions_are_refused():
    f = Function("host_fn", [], seq(), kind="public")
    with pytest.raises(CodegenError, match="NVRTC compiles no host code"):
        generate(module("m", [f]))


def test_kernel_without_constant_block_is_refused():
    n = var("n")
    f = Function("k", [n], seq(), kind="cuda_kernel", attrs={"grid_dim": (1,), "block_dim": (n,)})
    with pytest.raises(CodegenError, match="constant block_dim"):
        generate(module("m", [f]))


def test_launch_expressions_compile_to_python():
    n, k = var("n"), var("k")
    grid = launch_function([(n + 255) // 256, 3, (k - 1) % 4], [n, k])
    assert grid((1000, 10)) == (4, 3, 1)
    assert grid((1, -7)) == (1, 3, 0)  # C's truncating % on negatives


@pytest.mark.nvcc
def test_dynamic_smem_unroll_shared_and_bf16_tf32_mma(tmp_cache):
    n = var("n")
    a = var("a", tensor_type("bfloat16", [n]))
    c = var("c", tensor_type("float32", [n]))
    i, j = var("i"), var("j")
    decl = dynamic_shared_tensor("float32", [64], byte_offset=256)
    buf = var("buf", decl.type)
    static = var("static_smem", tensor_type("float32", [128]))
    af, bf = var("af", tensor_type("uint32", [4])), var("bf", tensor_type("uint32", [2]))
    acc, tf = var("acc", tensor_type("float32", [4])), var("tf", tensor_type("float32", [4]))
    body = seq(
        DeclareStmt(buf, decl.init), DeclareStmt(static, scope=Scope.SHARED),
        DeclareStmt(af, scope=Scope.REGISTER), DeclareStmt(bf, scope=Scope.REGISTER),
        DeclareStmt(acc, scope=Scope.REGISTER), DeclareStmt(tf, scope=Scope.REGISTER),
        ForStmt(j, 4, seq(BufferStoreStmt(af, [j], j), BufferStoreStmt(acc, [j], 0.0),
                          BufferStoreStmt(tf, [j], cast(j, "float32"))), unroll=True),
        ForStmt(j, 2, BufferStoreStmt(bf, [j], j), unroll=2),
        mma_sync_m16n8k16_bf16_f32(acc, af, bf, acc),
        mma_sync_m16n8k8_tf32(acc, tf, [tf[0], tf[1]], acc),
        LetStmt(i, threadIdx.x, seq(
            BufferStoreStmt(buf, [i % 64], cast(a[i % n], "float32")),
            BufferStoreStmt(static, [i], acc[i % 4]),
            syncthreads_stmt(),
            BufferStoreStmt(c, [i % n], buf[(i + 1) % 64] + static[127 - i]))))
    f = _kernel("smem_mma", [a, c, n], body, dynamic_smem_bytes=n * 4 + 256, min_blocks=4)
    m = module("mixed", [f])
    source = generate(m)
    assert "(float*)(hidet_dyn_smem + 256)" in source and "#pragma unroll\n" in source.replace("    ", "")
    assert "__launch_bounds__(128, 4)" in source and "__float_as_uint(tf[0])" in source
    _compile(source, "mixed")
    (spec,) = kernel_specs(m)
    assert spec.dynamic_smem((None, None, 10)) == 296


def syncthreads_stmt():
    from hidet_framework.ir import EvaluateStmt

    return EvaluateStmt(syncthreads())


def _tasks():
    from hidet_framework.compute.definitions import compute, reduce, tensor_input
    from hidet_framework.compute.task import Task

    a = tensor_input("a", "float32", [37, 53])
    b = tensor_input("b", "float32", [53])
    y = compute("y", [37, 53], lambda i, j: a[i, j] * 2.0 + b[j])
    yield Task("scale_add", [a, b], [y])
    x = tensor_input("x", "float16", [31, 67])
    s = compute("s", [31], lambda i: reduce([67], lambda k: x[i, k], "sum"))
    yield Task("rowsum", [x], [s])
    p = tensor_input("p", "float32", [29, 41])
    mx = compute("mx", [29], lambda i: reduce([41], lambda k: p[i, k], "max"))
    z = compute("z", [29, 41], lambda i, j: p[i, j] - mx[i])
    yield Task("center", [p], [z])


@pytest.mark.nvcc
@pytest.mark.parametrize("task_index", [0, 1, 2])
def test_auto_scheduled_tasks_compile(tmp_cache, task_index):
    from hidet_framework.schedule import auto_schedule
    from hidet_framework.lowering.pipeline import lower

    task = list(_tasks())[task_index]
    scheduled = auto_schedule(task, "cuda")
    m = lower(scheduled.module, "cuda")
    image = _compile(generate(m), task.name)
    for spec in kernel_specs(m):
        assert spec.name.encode() in image and spec.block == (256, 1, 1)


# ------------------------------------------------------------ the bandwidth benchmark
def _bench():
    spec = importlib.util.spec_from_file_location("gpu_bandwidth_bench", os.path.join(REPO, "bench", "gpu_bandwidth.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.nvcc
def test_bandwidth_kernels_compile_with_16_byte_accesses(tmp_cache):
    _, source, _ = _bench().build_module()
    assert "*(float4*)&a[" in source and "ra[0] + rb[0]" in source
    _compile(source, "gpu_bandwidth")


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 7, 4099, 1_000_003])
def test_bandwidth_kernels_on_gpu(cuda_backend, rng, n):
    _, _, loaded = _bench().build_module(cuda_backend, cuda_backend.detect_target())
    dev = cuda_backend.device
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    da, db = dev.from_numpy(a), dev.from_numpy(b)
    for name, want in (("bw_add", a.astype(np.float64) + b), ("bw_copy", a)):
        c = dev.empty((n,), "float32")
        c.fill_bytes(0xFF)
        loaded[name](da, db, c, n)
        assert np.array_equal(dev.to_numpy(c), np.asarray(want, np.float32))
