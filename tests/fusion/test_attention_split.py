"""The split form of the CUDA attention template (``{"form": "mma", "warps": W, "split":
S}``, hidet_plugin_ops/cuda_attention_split.py), level 0's pick unless
HIDET_FRAMEWORK_ATTENTION_SPLIT=0. Unmarked: level 0 is ``split`` "auto" and the spaces
hold the split candidates; with the variable at 0 no split candidate anywhere; the auto
pick and the plan (chunk, keys resident, shared memory) follow M, N and the SM count;
shapes outside G x S are refused; ineligible tasks build the scalar level-0 form; the
float16 cases in a CPU emulation of the generated CUDA (mma_emulation.py, g++).
``nvcc``: every case of the mma tests in every split shape, and the exported blocks
with the head split / merge grafted (GPT-2-like, BERT-like; fp16 and bf16), compile to
sm_90 cubins. ``cuda``: every case against a float64 numpy reference on the GPU (odd
and prime M and N, D 16 / 64 / 128, masks none / added / selected causal, a fully
masked row with and without zero_nan, key groups with no chunk, keys past the resident
tile, poisoned outputs), and a GPT-2-like block through hf.compile with the variable set."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import hidet_framework as hf

from .test_attention_mma import (CASES, _block, _case, _check_causal_block, _compile_cases_and_grafted_blocks,
                                 _fused, _run, _source, _target, _template)
from .attention_reference import reference as _reference

ENV = "HIDET_FRAMEWORK_ATTENTION_SPLIT"
SHAPES = ((4, 4), (8, 8), (8, 4), (4, 2), (2, 2), ("auto", "auto"))  # (warps, split)


def _params(warps, split):
    return {"form": "mma", "warps": warps, "split": split}


def _task(m, n, d=64, heads=12, mask=False):
    q, kt, v = (hf.symbol(s, "float16") for s in ((1, heads, m, d), (1, heads, d, n), (1, heads, n, d)))
    mk = hf.symbol((m, n), "float16") if mask else None
    y = hf.ops.attention(q, kt, v, mk, scale=0.125, mask_kind="add" if mask else None)
    return y.producer.task, y.producer.attributes


def test_the_form_is_level_zero_and_the_variable_takes_it_out(monkeypatch):
    target, template = _target(), _template()
    monkeypatch.setenv(ENV, "0")
    assert template.space(target, 0) == [{"form": "mma", "warps": "auto"}]
    assert not any("split" in p for level in (0, 1, 2) for p in template.space(target, level))
    monkeypatch.delenv(ENV, raising=False)
    assert template.space(target, 0) == [_params("auto", "auto")]
    space = template.space(target, 2)
    assert all(_params(w, s) in space for w, s in SHAPES[:-1]) and {"form": "mma", "warps": 4} in space
    monkeypatch.setenv("HIDET_FRAMEWORK_ATTENTION_MMA", "0")  # no tensor cores: no split form either
    assert not any(p.get("form") == "mma" for level in (0, 2) for p in template.space(target, level))


def test_auto_follows_the_rows_and_the_multiprocessors():
    from hidet_framework.backend.contract import Target
    from hidet_plugin_ops.cuda_attention_split import auto_split

    h200 = _target()
    few = Target("cuda", "sm_90", {**dict(h200.properties), "sm_count": 8})
    assert auto_split(*_task(128, 128), h200) == (8, 8)  # GPT-2 / BERT: 96 blocks of 16 rows, keys in 8
    assert auto_split(*_task(128, 128, heads=48), h200) == (8, 4)  # 48 x 4 blocks of 32 rows fill 132 SMs
    assert auto_split(*_task(128, 128, heads=24), h200) == (8, 8)  # 24 x 4 of 32 rows < 132: 16 rows
    assert auto_split(*_task(512, 128, heads=48), h200) is None  # the mma form's 384 blocks fill it already
    assert auto_split(*_task(128, 128), few) is None
    assert auto_split(*_task(1, 4096, heads=32), h200) == (8, 8)  # decode: one row, the keys in 8
    assert auto_split(*_task(64, 128, heads=100), h200) == (8, 4)  # 200 blocks of 32 rows fill 132 SMs
    assert auto_split(*_task(20, 128, heads=100), h200) == (8, 8)  # M = 20: 200 blocks of 16 rows
    assert auto_split(*_task(7, 128, heads=131), h200) == (8, 8)  # 131 blocks: one row group covers M = 7


def test_plan_chunks_keys_and_shared_memory():
    from hidet_plugin_ops.cuda_attention_split import FPAD, PAD, split_plan

    h200 = _target()
    p = split_plan(*_task(128, 128, mask=True), 4, 4, h200)
    assert (p["rows"], p["kc"], p["kt"], p["masked"]) == (16, 32, 128, True)  # 4 chunks of 32: one a warp
    q, k, v, m, o, s = p["offsets"]
    assert (k, v - k, m - v, o - m, s - o) == (16 * 72 * 2, 128 * 72 * 2, 128 * 72 * 2, 16 * (128 + FPAD) * 4,
                                               16 * 4 * (64 + FPAD) * 4)
    assert p["smem"] == s + 2 * 64 * 4 and all(x % 16 == 0 for x in p["offsets"])
    assert split_plan(*_task(128, 128), 8, 8, h200)["kc"] == 16  # 8 key groups: chunks of 16
    assert split_plan(*_task(128, 13), 8, 8, h200)["kc"] == 16  # fewer keys than groups: 16, some idle
    p = split_plan(*_task(128, 128), 4, 4, h200)
    assert not p["masked"] and p["offsets"][3] == p["offsets"][4]  # no mask: no staging
    p = split_plan(*_task(61, 5000, d=128, mask=True), 8, 4, h200)
    assert p["kc"] == 32 and p["kt"] % 32 == 0 and p["kt"] < 5000 and p["smem"] <= h200.get("smem_per_sm") // 2
    assert PAD == 8


@pytest.mark.parametrize("warps,split", [(3, 3), (4, 3), (16, 2), (4, 8), (6, 2), (8, 1)])
def test_shapes_outside_the_groups_are_refused(warps, split):
    from hidet_plugin_ops.cuda_attention_split import split_plan

    with pytest.raises(ValueError, match="not in G"):
        split_plan(*_task(128, 128), warps, split, _target())


@pytest.mark.parametrize("dtype,d", [("float32", 64), ("float16", 24)])
def test_ineligible_tasks_build_the_level_zero_form(dtype, d):
    target, template = _target(), _template()
    op = hf.ops.attention(hf.symbol((2, 9, d), dtype), hf.symbol((2, d, 11), dtype),
                          hf.symbol((2, 11, 16), dtype)).producer
    level0 = _source(template.build(op.task, op.attributes, {"rows": "auto", "threads": 128, "k_order": "d"}, target),
                     target)
    for w, s in SHAPES:
        assert _source(template.build(op.task, op.attributes, _params(w, s), target), target) == level0


def test_auto_builds_the_mma_form_where_its_grid_fills_the_gpu(rng):
    target, template = _target(), _template()
    task, attributes = _task(512, 128, heads=48)
    split = _source(template.build(task, attributes, _params("auto", "auto"), target), target)
    assert split == _source(template.build(task, attributes, {"form": "mma"}, target), target)


EMULATED = [((4, 4), 0), ((4, 4), 1), ((4, 4), 5), ((4, 4), 7), ((8, 8), 0), ((8, 4), 1), ((4, 2), 0), ((2, 2), 7),
            (("mma", "auto"), 0)]  # the last: the mma form (run on the H200), the emulation's own check


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the CPU emulation")
@pytest.mark.parametrize("shape,k", EMULATED, ids=lambda x: f"w{x[0]}s{x[1]}" if isinstance(x, tuple) else f"case{x}")
def test_float16_cases_in_a_cpu_emulation(shape, k, tmp_path):
    """The generated CUDA run on the CPU (mma_emulation: a thread a lane, the warp
    instructions through per-warp exchanges) against float64, the output poisoned with
    NaN: GPT-2's causal case (key groups that see only masked keys), prime N with -inf
    keys, three resident tiles, the NaN row without zero_nan."""
    from .mma_emulation import emulate

    target, template = _target(), _template()
    op, arrays, want = _case(k, np.random.default_rng(k))
    params = {"form": "mma", "warps": "auto"} if shape[0] == "mma" else _params(*shape)
    got = emulate(template.build(op.task, op.attributes, params, target), target, arrays,
                  tuple(op.outputs[0].shape), str(tmp_path))
    assert np.isnan(got).sum() == np.isnan(want).sum()
    np.testing.assert_allclose(got, want, rtol=3e-3, atol=3e-3)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the CPU emulation")
@pytest.mark.parametrize("shape", [(4, 4), (8, 8)], ids=lambda s: f"w{s[0]}s{s[1]}")
def test_a_grafted_causal_block_in_a_cpu_emulation(shape, tmp_path):
    """The exported block (QKV slices, head split, causal where, NaN guard, head merge)
    fused onto the split form, its generated CUDA run on the CPU against float64: the
    grafted loads, the staged boolean mask and the grafted stores."""
    from hidet_framework.fusion import fuse_group

    from .mma_emulation import emulate

    target, template = _target(), _template()
    heads, seq, d = 3, 61, 64
    group = _fused("float16", True, heads, seq, d)
    anchor = group.anchor_member
    scheduled = fuse_group(template.build(anchor.task, dict(anchor.attributes), _params(*shape), target), group)
    x = np.random.default_rng(5).standard_normal((1, seq, 3 * heads * d)).astype(np.float16)
    tril = np.tril(np.ones((1, 1, seq, seq), bool))
    q, k, v = (x.astype(np.float64)[..., i * heads * d:(i + 1) * heads * d].reshape(1, seq, heads, d)
               .transpose(0, 2, 1, 3) for i in range(3))
    want = _reference([q, k.transpose(0, 1, 3, 2), v], tril[0, 0], "select", d ** -0.5, True)
    got = emulate(scheduled, target, [x, tril], (1, seq, heads * d), str(tmp_path))
    np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3).reshape(1, seq, heads * d), rtol=3e-3, atol=3e-3)


@pytest.mark.nvcc
def test_every_case_and_grafted_blocks_compile(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    _compile_cases_and_grafted_blocks([_params(w, s) for w, s in SHAPES[:-1]], [_params(w, s) for w, s in SHAPES],
                                      (12, 128, 64), "attention_split", rng)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"w{s[0]}s{s[1]}")
@pytest.mark.parametrize("k", range(len(CASES)))
def test_every_case_matches_float64_on_the_gpu(k, shape, rng):
    op, arrays, want = _case(k, rng)
    dtype = CASES[k][-1]
    got = _run(op, arrays, _params(*shape), dtype)  # the output poisoned with NaN first
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    assert np.isnan(got).sum() == np.isnan(want).sum()  # NaN exactly where the operator has it
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"case {k} shape {shape}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,seq", [("float16", 128), ("bfloat16", 61)])
def test_a_gpt2_like_block_through_compile_uses_the_form(dtype, seq, monkeypatch, tmp_path, rng):
    import hidet_plugin_ops.cuda_attention_split as split_form
    from hidet_framework.driver.task_compiler import clear_task_cache

    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    built = []
    real = split_form.split_kernel
    monkeypatch.setattr(split_form, "split_kernel", lambda *a: built.append(a[2:4]) or real(*a))
    clear_task_cache()
    heads, d = 12, 64
    fn = hf.compile(_block(dtype, True, heads, seq, d), target="cuda", space=0, parallel=False)
    clear_task_cache()
    assert built and built[0] == (8, 8)  # the attention kernel is the split form, 16 rows a block
    _check_causal_block(fn, dtype, heads, seq, d, rng)
