"""The CUDA attention template (hidet_plugin_ops/cuda_attention.py). Marker ``nvcc``
(no GPU needed): every candidate, alone and with the head split / merge of an
exported attention block grafted on, compiles to an sm_90 cubin. Marker ``cuda``:
every candidate against a float64 numpy reference on the GPU (odd and prime sizes,
masks added and selected, a fully masked row, broadcast batch axes, poisoned
outputs), and a graph too big for shared memory falls back to the auto-scheduler."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import plugin_host

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


def _reference(arrays, mask, kind, scale, zero_nan):
    q, kt, v = (a.astype(np.float64) for a in arrays[:3])
    s = scale * (q @ kt)
    if kind == "add":
        s = s + mask
    elif kind == "select":
        s = np.where(mask, s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return (np.where(np.isnan(p), 0.0, p) if zero_nan else p) @ v


def _cuda_target():
    pytest.importorskip("hidet_plugin_cuda")
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


@pytest.mark.nvcc
def test_every_candidate_compiles_alone_and_grafted(tmp_path, monkeypatch, rng):
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
        jobs += [template.build(op.task, op.attributes, p, target) for p in template.space(target, 1)]
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
