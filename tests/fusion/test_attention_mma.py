"""The tensor-core form of the CUDA attention template (``{"form": "mma"}``,
hidet_plugin_ops/cuda_attention_mma.py). Unmarked: the form is level 0 and leads the
spaces (none of it with HIDET_FRAMEWORK_ATTENTION_MMA=0),
float32 and D not a multiple of 16 build the other forms, and the plan (warps, keys
resident, shared memory). ``nvcc``: the form alone on every case and with an exported
block's head split / merge grafted on (BERT-like and GPT-2-like, fp16 and bf16)
compiles to an sm_90 cubin. ``cuda``: every case against a float64 numpy reference on
the GPU (odd and prime M and N, D 16 / 64 / 128, masks none / added / selected causal,
a fully masked row with and without zero_nan, broadcast batch axes, keys past the
resident tile, poisoned outputs), and a GPT-2-like block through hf.compile with the
variable set."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import plugin_host

from .attention_reference import reference as _reference

ENV = "HIDET_FRAMEWORK_ATTENTION_MMA"
# (q, kt, v, mask shape or None, kind, scale, zero_nan, dtype)
CASES = [
    ((1, 12, 128, 64), (1, 12, 64, 128), (1, 12, 128, 64), (128, 128), "select", 0.125, True, "float16"),  # GPT-2
    ((2, 3, 61, 64), (2, 3, 64, 131), (2, 3, 131, 64), (2, 1, 61, 131), "add", 0.125, False, "float16"),
    ((3, 7, 16), (3, 16, 7), (3, 7, 16), None, "none", 0.25, False, "bfloat16"),
    ((131, 128), (128, 61), (61, 128), (131, 61), "select", 0.09, True, "bfloat16"),  # fully masked row 2
    ((2, 3, 1, 64), (1, 3, 64, 128), (2, 1, 128, 32), (1, 1, 1, 128), "add", 0.125, False, "float16"),
    ((1, 2, 67, 64), (1, 2, 64, 700), (1, 2, 700, 64), (1, 1, 67, 700), "add", 0.125, False, "float16"),  # 3 tiles
    ((1, 1, 64), (64, 1), (1, 48), None, "none", 1.0, False, "float16"),
    ((2, 7, 32), (2, 32, 13), (2, 13, 32), (7, 13), "select", 0.2, False, "float16"),  # NaN row (no zero_nan)
]
WARPS = ("auto", 1, 4, 8)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _rounded(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(what the device gets, its value as float64)."""
    if dtype == "bfloat16":
        bits = _bf16_bits(x)
        return bits, _from_bits(bits).astype(np.float64)
    h = x.astype(np.float16)
    return h, h.astype(np.float64)


def _case(k, rng):
    qs, ks, vs, ms, kind, scale, zero_nan, dt = CASES[k]
    device, exact = zip(*(_rounded(rng.standard_normal(s).astype(np.float32), dt) for s in (qs, ks, vs)))
    device, exact = list(device), list(exact)
    mask = None
    if kind == "add":
        mask = rng.standard_normal(ms).astype(np.float32)
        mask[..., 1] = -np.inf  # keys masked out by -inf
    elif kind == "select":
        mask = np.tril(np.ones(ms, bool))
        mask[..., 2, :] = False  # a fully masked row
    symbols = [hf.symbol(s, dt) for s in (qs, ks, vs)]
    mask_t = None if mask is None else hf.symbol(mask.shape, "bool" if kind == "select" else "float32")
    y = hf.ops.attention(*symbols, mask_t, scale=scale, mask_kind=None if mask is None else kind, zero_nan=zero_nan)
    extra = [] if mask is None else [mask]
    return y.producer, device + extra, _reference(exact, mask, kind, scale, zero_nan)


def _target():
    pytest.importorskip("hidet_plugin_cuda")
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _template():
    return plugin_host().templates["ops.attention_cuda"]


def _source(scheduled, target):
    from hidet_plugin_cuda import CudaBackend
    from hidet_framework.runtime.compiled_task import generate_source

    return generate_source(scheduled, CudaBackend(), target)


def test_the_form_is_level_zero_and_the_variable_turns_it_off(monkeypatch, rng):
    target, template = _target(), _template()
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("HIDET_FRAMEWORK_ATTENTION_SPLIT", "0")  # the split form (test_attention_split.py) off
    assert template.space(target, 0) == [{"form": "mma", "warps": "auto"}]
    assert {"form": "mma", "warps": 4} in template.space(target, 1)
    op, _, _ = _case(0, rng)
    src = _source(template.build(op.task, op.attributes, template.space(target, 0)[0], target), target)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src and "cvt.rn.f16x2.f32" in src
    op, _, _ = _case(2, rng)
    src = _source(template.build(op.task, op.attributes, {"form": "mma", "warps": 1}, target), target)
    assert "f32.bf16.bf16.f32" in src and "cvt.rn.bf16x2.f32" in src
    monkeypatch.setenv(ENV, "0")
    assert template.space(target, 0) == [{"rows": "auto", "threads": 128, "k_order": "d"}]
    assert not any(p.get("form") == "mma" for level in (1, 2) for p in template.space(target, level))


@pytest.mark.parametrize("dtype,d", [("float32", 64), ("float16", 24), ("float16", 144)])
def test_ineligible_tasks_build_the_level_zero_form(dtype, d):
    target, template = _target(), _template()
    y = hf.ops.attention(hf.symbol((2, 9, d), dtype), hf.symbol((2, d, 11), dtype), hf.symbol((2, 11, 16), dtype))
    op = y.producer
    mma = _source(template.build(op.task, op.attributes, {"form": "mma", "warps": 4}, target), target)
    level0 = _source(template.build(op.task, op.attributes, {"rows": "auto", "threads": 128, "k_order": "d"}, target),
                     target)
    assert "mma.sync" not in mma and mma == level0


def test_plan_follows_m_the_multiprocessors_and_shared_memory():
    """Auto: 4 warps (measured fastest on BERT's and GPT-2's 12 x 128 x 128 x 64), fewer
    for small M, 8 when 4-warp blocks exceed one wave of the target's SMs."""
    from hidet_framework.backend.contract import Target
    from hidet_plugin_ops.cuda_attention_mma import plan

    h200 = _target()
    few = Target("cuda", "sm_90", {**dict(h200.properties), "sm_count": 4})

    def task(m, n, d=64, heads=12):
        y = hf.ops.attention(hf.symbol((1, heads, m, d), "float16"), hf.symbol((1, heads, d, n), "float16"),
                             hf.symbol((1, heads, n, d), "float16"), scale=0.125)
        return y.producer.task, y.producer.attributes

    budget = h200.get("smem_per_sm") // 2
    w, kc, kt, smem = plan(*task(128, 128), "auto", h200)
    assert (w, kc, kt) == (4, 64, 128) and smem == (64 * 72 + 128 * 144) * 2  # all keys resident
    assert plan(*task(128, 128), "auto", few)[0] == 8  # 24 blocks of 4 warps > 4 SMs x 5 (shared memory)
    assert plan(*task(128, 128, heads=4), "auto", few)[0] == 4  # 8 blocks: one wave
    assert plan(*task(1024, 128, heads=64), "auto", h200)[0] == 8  # 1024 blocks of 4 warps > 132 x 5
    assert plan(*task(7, 128), "auto", h200)[0] == 1 and plan(*task(7, 128), 8, h200)[0] == 1  # M = 7: one warp
    assert plan(*task(40, 128), "auto", h200)[0] == 4 and plan(*task(40, 128), 2, h200)[0] == 2  # 3 warps cover M
    assert plan(*task(20, 128, heads=4096), "auto", h200)[0] == 2  # never more warps than cover M
    w, kc, kt, smem = plan(*task(128, 5000, d=128), 4, h200)
    assert kc == 32 and kt % 32 == 0 and kt < 5000 and smem <= budget


def _fused(dtype: str, causal: bool, heads: int = 3, seq: int = 13, d: int = 16):
    """An exported attention block (QKV slices, head split, scale, mask, head merge)
    made one fused attention group, as bench/attention_forms.py builds it."""
    from hidet_framework.fusion import FUSION_PASSES
    from hidet_framework.fusion.partition_fusion_groups import GROUP_ATTRIBUTE
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes

    graph = _block(dtype, causal, heads, seq, d)
    graph = run_graph_passes(graph, GraphPassContext(target="cuda"), GRAPH_PASSES + FUSION_PASSES)
    (op,) = graph.nodes
    group = op.attributes[GROUP_ATTRIBUTE]
    assert group.anchor_member.name == "attention" and len(group.members) > 5
    return group


def _block(dtype: str, causal: bool, heads: int, seq: int, d: int):
    """float16: the exported form (matmul, scale, where, softmax, NaN guard: the attention
    rule makes it one operator); bfloat16: ``hf.ops.attention`` on the head split (the
    rule does not read bfloat16 scale constants), the same grafts either way."""
    width = heads * d
    qkv = hf.symbol((1, seq, 3 * width), dtype)
    parts = [hf.ops.slice(qkv, [k * width], [(k + 1) * width], [2]) for k in range(3)]
    q, k, v = (hf.ops.transpose(hf.ops.reshape(t, [1, seq, heads, d]), [0, 2, 1, 3]) for t in parts)
    kt = hf.ops.transpose(k, [0, 1, 3, 2])
    tril = hf.constant(np.tril(np.ones((1, 1, seq, seq), bool)))
    if dtype == "bfloat16":
        o = hf.ops.attention(q, kt, v, tril if causal else None, scale=d ** -0.5,
                             mask_kind="select" if causal else None, zero_nan=causal)
    else:
        z = hf.ops.div(hf.ops.matmul(q, kt), _const(d ** 0.5, dtype))
        if causal:
            z = hf.ops.where(tril, z, _const(-np.inf, dtype))
        p = hf.ops.softmax(z, axis=-1)
        if causal:
            p = hf.ops.where(hf.ops.isnan(p), _const(0.0, dtype), p)
        o = hf.ops.matmul(p, v)
    y = hf.ops.reshape(hf.ops.transpose(o, [0, 2, 1, 3]), [1, seq, width])
    return hf.trace(y, inputs=[qkv])


def _const(value: float, dtype: str):
    if dtype == "bfloat16":
        return hf.constant(_bf16_bits(np.array(value, np.float32)), dtype="bfloat16")
    return hf.constant(np.array(value, np.float16))


def _compile_cases_and_grafted_blocks(case_params, block_params, block_shape, name, rng):
    """What the compile-only tests of both tensor-core forms check: every case built with
    each of `case_params`, and the exported block (fp16 plain and causal, bf16 causal;
    ``_fused(dtype, causal, *block_shape)``) built with each of `block_params` with its head
    split / merge grafted, compile to sm_90 cubins through mma.sync and ldmatrix."""
    from hidet_framework.fusion import fuse_group
    from hidet_plugin_cuda.nvrtc_build import build_cubin

    target, template = _target(), _template()
    jobs = []
    for k in range(len(CASES)):
        op, _, _ = _case(k, rng)
        jobs += [template.build(op.task, op.attributes, params, target) for params in case_params]
    for dtype, causal in (("float16", False), ("float16", True), ("bfloat16", True)):
        group = _fused(dtype, causal, *block_shape)
        anchor = group.anchor_member
        for params in block_params:
            jobs.append(fuse_group(template.build(anchor.task, dict(anchor.attributes), params, target), group))
    for k, scheduled in enumerate(jobs):
        src = _source(scheduled, target)
        assert "mma.sync" in src and "ldmatrix" in src
        result = build_cubin(src, arch="sm_90", name=f"{name}{k}", target_fingerprint=target.fingerprint())
        with open(result.path, "rb") as f:
            assert f.read(4) == b"\x7fELF"


@pytest.mark.nvcc
def test_every_case_and_grafted_blocks_compile(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    _compile_cases_and_grafted_blocks([{"form": "mma", "warps": w} for w in WARPS], [{"form": "mma"}], (),
                                      "attention_mma", rng)


def _run(op, arrays, params, dtype):
    from hidet_framework.runtime.compiled_task import compile_scheduled

    backend = plugin_host().backend_for("cuda")
    target = backend.detect_target()
    device = backend.device
    compiled = compile_scheduled(op.task, _template().build(op.task, op.attributes, params, target), backend, target)
    shape = op.outputs[0].shape
    poison = np.full(shape, np.nan, np.float32)
    out = device.from_numpy(_bf16_bits(poison), dtype="bfloat16") if dtype == "bfloat16" else \
        device.from_numpy(poison.astype(np.float16))
    ins = [device.from_numpy(a, dtype="bfloat16") if a.dtype == np.uint16 else device.from_numpy(a) for a in arrays]
    compiled.run(ins, [out])
    got = np.asarray(device.to_numpy(out))
    if got.dtype == np.uint16:
        return _from_bits(got).astype(np.float64)
    return got.astype(np.float64)


@pytest.mark.cuda
@pytest.mark.parametrize("warps", WARPS)
@pytest.mark.parametrize("k", range(len(CASES)))
def test_every_case_matches_float64_on_the_gpu(k, warps, rng):
    op, arrays, want = _case(k, rng)
    dtype = CASES[k][-1]
    got = _run(op, arrays, {"form": "mma", "warps": warps}, dtype)
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    assert np.isnan(got).sum() == np.isnan(want).sum()  # NaN exactly where the operator has it
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"case {k} warps {warps}")


def _check_causal_block(fn, dtype, heads, seq, d, rng):
    """Run `fn`, a causal `_block(dtype, True, heads, seq, d)` compiled for the GPU, on a random
    input and compare it with the float64 reference of its attention."""
    x = rng.standard_normal((1, seq, 3 * heads * d)).astype(np.float32)
    device_x, exact = _rounded(x, dtype)
    q, k, v = (exact[..., i * heads * d:(i + 1) * heads * d].reshape(1, seq, heads, d).transpose(0, 2, 1, 3)
               for i in range(3))
    want = _reference([q, k.transpose(0, 1, 3, 2), v], np.tril(np.ones((seq, seq), bool)), "select", d ** -0.5, True)
    want = want.transpose(0, 2, 1, 3).reshape(1, seq, heads * d)
    backend = plugin_host().backend_for("cuda")
    arg = backend.device.from_numpy(device_x, dtype="bfloat16") if dtype == "bfloat16" else device_x
    got = fn(arg)
    got = np.asarray(got if isinstance(got, np.ndarray) else backend.device.to_numpy(got))
    got = _from_bits(got).astype(np.float64) if got.dtype == np.uint16 else got.astype(np.float64)
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_gpt2_like_block_through_compile_uses_the_form(dtype, monkeypatch, tmp_path, rng):
    import hidet_plugin_ops.cuda_attention as cuda_attention
    from hidet_framework.driver.task_compiler import clear_task_cache

    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HIDET_FRAMEWORK_ATTENTION_SPLIT", "0")  # the mma form itself, not the split form
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    built = []
    real = cuda_attention.mma_kernel
    monkeypatch.setattr(cuda_attention, "mma_kernel", lambda *a: built.append(a) or real(*a))
    clear_task_cache()
    heads, seq, d = 4, 61, 64
    fn = hf.compile(_block(dtype, True, heads, seq, d), target="cuda", space=0, parallel=False)
    params = [getattr(getattr(t, "scheduled", None), "params", None) or {} for t in getattr(fn, "tasks", ())]
    assert built or any(p.get("form") == "mma" for p in params)  # the attention kernel is the mma form
    _check_causal_block(fn, dtype, heads, seq, d, rng)
