"""The CUDA attention template (hidet_plugin_ops/cuda_attention.py). Marker ``nvcc``
(no GPU needed): every candidate with the head split / merge of an exported
attention block grafted on, and each kernel form (per-row, tiled in both key orders, a key per warp)
alone on every case, compiles to an sm_90 cubin. Marker ``cuda``:
every candidate against a float64 numpy reference on the GPU (odd and prime sizes,
masks added and selected, a fully masked row, broadcast batch axes, poisoned
outputs), and a graph too big for shared memory falls back to the auto-scheduler."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import plugin_host

from .attention_reference import reference as _reference

# (q, kt, v, mask shape or None, kind, scale, zero_nan)
CASES = [
    ((1, 3, 11, 8), (1, 3, 8, 11), (1, 3, 11, 8), (1, 1, 1, 11), "add", 0.125, True),
    ((2, 13, 5), (2, 5, 17), (2, 17, 3), None, "none", 1.0, False),
    ((2, 3, 7, 4), (1, 3, 4, 9), (2, 1, 9, 5), (2, 1, 7, 9), "add", 0.5, False),
    ((3, 6, 4), (3, 4, 6), (3, 6, 2), (6, 6), "select", 0.7, True),
    ((1, 67), (67, 300), (300, 131), None, "none", 0.1, False),  # N, Dv over the block size
]


def _case(k, rng):
    qs, ks, vs, ms, kind, scale, zero_nan = CASES[k]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (qs, ks, vs)]
    mask = None
    if kind == "add":
        mask = rng.standard_normal(ms).astype(np.float32)
    elif kind == "select":
        mask = np.tril(np.ones(ms, bool))
        mask[..., 2, :] = False
    symbols = [hf.symbol(a.shape, "float32") for a in arrays]
    mask_t = None if mask is None else hf.symbol(mask.shape, "bool" if kind == "select" else "float32")
    y = hf.ops.attention(*symbols, mask_t, scale=scale, mask_kind=None if mask is None else kind, zero_nan=zero_nan)
    return y.producer, arrays + ([] if mask is None else [mask]), (mask, kind, scale, zero_nan)


def _cuda_target():
    pytest.importorskip("hidet_plugin_cuda")
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


@pytest.mark.nvcc
def test_every_candidate_compiles_grafted_and_each_form_alone(tmp_path, monkeypatch, rng):
    target = _cuda_target()
    from hidet_plugin_cuda import CudaBackend
    from hidet_plugin_cuda.nvrtc_build import build_cubin, choose_compiler

    try:
        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    from hidet_framework.fusion import fuse_group
    from hidet_framework.fusion.partition_fusion_groups import GROUP_ATTRIBUTE
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
    from hidet_framework.fusion import FUSION_PASSES
    from hidet_framework.runtime.compiled_task import generate_source

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    template = plugin_host().templates["ops.attention_cuda"]
    jobs = []
    for k in range(len(CASES)):
        op, _, _ = _case(k, rng)
        assert template.applies(op.task, op.attributes)
        # each kernel form on every case (odd N, M under the row tile, each mask kind): the
        # default, the per-row form, the widest tiled block and the other key order
        forms = [template.space(target, 0)[0], {"threads": 64}, {"rows": 16, "threads": 256, "k_order": "d"},
                 {"rows": 8, "threads": 128, "k_order": "j"}]
        assert all(f in template.space(target, 1) for f in forms)
        # the opt-in warp-per-key form (in no space, no default: not yet run on a GPU)
        opt_in = [{"rows": 1, "threads": 128, "k_order": "d"}, {"rows": 1, "threads": 256, "k_order": "d"}]
        assert not any(f in template.space(target, 1) for f in opt_in)
        jobs += [template.build(op.task, op.attributes, p, target) for p in forms + opt_in]
    # BERT's form: q, k, v reshaped from [B, S, H*D] and transposed; the output merged back
    x = [hf.symbol((2, 13, 24), "float32") for _ in range(3)]
    heads = [hf.ops.transpose(hf.ops.reshape(t, [2, 13, 3, 8]), [0, 2, 1, 3]) for t in x]
    kt = hf.ops.transpose(heads[1], [0, 1, 3, 2])
    z = hf.ops.add(hf.ops.div(hf.ops.matmul(heads[0], kt), hf.constant(np.float32(8 ** 0.5))),
                   hf.constant(np.zeros((2, 1, 1, 13), np.float32) - 1.0))
    y = hf.ops.reshape(hf.ops.transpose(hf.ops.matmul(hf.ops.softmax(z, axis=-1), heads[2]), [0, 2, 1, 3]), [2, 13, 24])
    graph = run_graph_passes(hf.trace(y, inputs=x), GraphPassContext(target="cuda"), GRAPH_PASSES + FUSION_PASSES)
    (op,) = graph.nodes
    group = op.attributes[GROUP_ATTRIBUTE]
    anchor = group.anchor_member
    assert anchor.name == "attention" and len(group.members) > 5
    for params in template.space(target, 1):
        jobs.append(fuse_group(template.build(anchor.task, dict(anchor.attributes), params, target), group))
    for k, scheduled in enumerate(jobs):
        result = build_cubin(generate_source(scheduled, CudaBackend(), target), arch="sm_90", name=f"attention{k}",
                             target_fingerprint=target.fingerprint())
        with open(result.path, "rb") as f:
            assert f.read(4) == b"\x7fELF"


@pytest.mark.cuda
@pytest.mark.parametrize("k", range(len(CASES)))
def test_every_candidate_matches_float64_on_the_gpu(k, rng):
    from hidet_framework.runtime.compiled_task import compile_scheduled

    backend = plugin_host().backend_for("cuda")
    target = backend.detect_target()
    template = plugin_host().templates["ops.attention_cuda"]
    op, arrays, (mask, kind, scale, zero_nan) = _case(k, rng)
    want = _reference(arrays, mask, kind, scale, zero_nan)
    device = backend.device
    for params in template.space(target, 1):
        compiled = compile_scheduled(op.task, template.build(op.task, op.attributes, params, target), backend, target)
        out = device.from_numpy(np.full(op.outputs[0].shape, np.nan, np.float32))  # poisoned
        compiled.run([device.from_numpy(a) for a in arrays], [out])
        np.testing.assert_allclose(device.to_numpy(out), want, rtol=1e-5, atol=1e-5, err_msg=str(params))


@pytest.mark.cuda
def test_rows_too_long_for_shared_memory_use_the_auto_scheduler(rng):
    q, kt, v = hf.symbol((3, 4), "float32"), hf.symbol((4, 13001), "float32"), hf.symbol((13001, 2), "float32")
    y = hf.ops.attention(q, kt, v, scale=0.5)
    template = plugin_host().templates["ops.attention_cuda"]
    assert not template.applies(y.producer.task, y.producer.attributes)
    fn = hf.compile(hf.trace(y, inputs=[q, kt, v]), target="cuda")
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in (q, kt, v)]
    np.testing.assert_allclose(fn(*arrays), _reference(arrays, None, "none", 0.5, False), rtol=1e-5, atol=1e-5)


def test_tiled_rows_follow_the_multiprocessors_shared_memory_and_m():
    from hidet_framework.backend.contract import Target
    from hidet_plugin_ops.cuda_attention import tile_rows

    h200 = _cuda_target()
    small = Target("cuda", "sm_90", {**dict(h200.properties), "sm_count": 46})

    def task(m, n, d=64, dtype="float16"):
        y = hf.ops.attention(hf.symbol((1, 12, m, d), dtype), hf.symbol((1, 12, d, n), dtype),
                             hf.symbol((1, 12, n, d), dtype), scale=0.125)
        return y.producer.task, y.producer.attributes

    gpt2 = task(128, 128)
    assert tile_rows(*gpt2, "auto", h200) == 8  # 16 rows: 96 blocks for 132 SMs; 8 rows: 192
    assert tile_rows(*gpt2, "auto", small) == 16
    assert tile_rows(*gpt2, 1, h200) == 1 and tile_rows(*gpt2, 4, h200) == 4
    assert tile_rows(*task(1, 128), "auto", h200) == 1  # decode: the per-row form
    assert tile_rows(*task(3, 128), "auto", h200) == 2
    long_rows = task(128, 3000, dtype="float32")  # 16 rows of 3008 scores exceed 48 KiB
    assert tile_rows(*long_rows, 16, h200) == 2 == tile_rows(*long_rows, "auto", small)
    assert tile_rows(*task(128, 12000, dtype="float32"), "auto", h200) == 1  # not even 2 rows fit


def test_level_zero_takes_the_per_row_form_for_stored_keys_of_short_sequences_that_fill_the_gpu():
    """``auto_form``: per-row (a key per thread) where no graft feeds K, B*M rows give
    every SM a block and one batch entry's K and V fit a quarter of an SM's shared
    memory; tiled otherwise, and always when a graft feeds K."""
    from hidet_framework.backend.contract import Target
    from hidet_plugin_ops.cuda_attention import auto_form

    h200 = _cuda_target()
    small_smem = Target("cuda", "sm_90", {**dict(h200.properties), "smem_per_sm": 64 * 1024})
    many_sms = Target("cuda", "sm_90", {**dict(h200.properties), "sm_count": 2000})

    def form(m, n, heads=12, d=64, target=h200, grafted=(0, 2)):
        y = hf.ops.attention(hf.symbol((1, heads, m, d), "float16"), hf.symbol((1, heads, d, n), "float16"),
                             hf.symbol((1, heads, n, d), "float16"), scale=0.125)
        attributes = {**y.producer.attributes, "fusion.prologue_inputs": grafted}
        return auto_form(y.producer.task, attributes, target)

    per_row, tiled = {"rows": 1, "threads": 128}, {"rows": "auto", "threads": 128, "k_order": "d"}
    assert form(128, 128) == per_row and form(128, 128, grafted=()) == per_row  # 1536 rows, K+V 32 KiB a head
    assert form(128, 128, grafted=(0, 1, 2)) == tiled  # BERT, GPT-2: the head split grafted onto K
    assert form(128, 1024) == tiled  # 256 KiB of K+V a head
    assert form(128, 128, target=small_smem) == tiled  # 32 KiB > 16 KiB
    assert form(128, 128, target=many_sms) == tiled  # 1536 rows < 2000 SMs
    assert form(11, 128, heads=12) == per_row and form(10, 128, heads=13) == tiled  # 132 vs 130 rows
