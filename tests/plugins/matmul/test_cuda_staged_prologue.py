"""Prologues on a cp.async tensor-core anchor (hidet_plugin_matmul.cuda_stage_operands):
the driver marks the anchor inputs a prologue feeds; the template copies them first by
element reads (where the prologue is grafted) and runs its cp.async kernel on the copy.

- no GPU: the launches and workspace with and without prologues (on A, on B), where the
  graft lands, the tuner's level-0 pick (wgmma cannot take the prologue);
- compile-only (``nvcc``): the fused GELU -> matmul -> add kernel compiles to sm_90;
- GPU (``cuda``): that group through ``hf.compile`` against float64, fused, 2 launches.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.fusion import FUSION_PASSES, fuse_group
from hidet_framework.fusion.partition_fusion_groups import GROUP_ATTRIBUTE
from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE, PROLOGUE_INPUTS_ATTRIBUTE
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul


def _target():
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _group(m, k, n, prologue_a=True, prologue_b=False, seed=0):
    """The fusion group of  add(matmul(gelu(x) or x, relu(w) or w), bias)  (fp16)."""
    from hidet_framework.driver.graph_compiler import evaluate_constants

    rng = np.random.default_rng(seed)
    x = hf.symbol((m, k), "float16")
    w = hf.symbol((k, n), "float16")
    bias = hf.constant(rng.standard_normal(n).astype(np.float16))
    a = hf.ops.gelu(x) if prologue_a else x
    b = hf.ops.relu(w) if prologue_b else w
    graph = hf.trace(hf.ops.add(hf.ops.matmul(a, b), bias), inputs=[x, w])
    ctx = GraphPassContext(target="cuda", evaluate=evaluate_constants)
    (op,) = [o for o in run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES).nodes
             if GROUP_ATTRIBUTE in o.attributes]
    return op.attributes[GROUP_ATTRIBUTE]


def _reads(launch):
    return [(r.kind, r.index) for r in launch.buffers]


def test_anchor_attributes_name_the_inputs_prologues_feed():
    assert _group(128, 256, 64).anchor_attributes()[PROLOGUE_INPUTS_ATTRIBUTE] == (0,)
    assert _group(128, 256, 64, True, True).anchor_attributes()[PROLOGUE_INPUTS_ATTRIBUTE] == (0, 1)
    attrs = _group(128, 256, 64, False).anchor_attributes()
    assert PROLOGUE_INPUTS_ATTRIBUTE not in attrs and attrs[ANCHOR_ATTRIBUTE] is True


def test_prologue_lands_on_the_staging_launch():
    t, target = CudaTensorCoreMatmul(), _target()
    group = _group(128, 256, 64)  # gelu -> [matmul] -> add: A staged
    st = t.build(group.anchor_member.task, group.anchor_attributes(), {"auto": 1}, target)
    assert [w.name for w in st.workspace] == ["matmul_staged_a"] and len(st.launches) == 2
    assert st.launches[0].function.endswith("_stage")
    fused = fuse_group(st, group)
    stage, main = fused.launches
    assert ("input", 0) in _reads(stage) and ("input", 0) not in _reads(main)  # x is read once, by the copy
    assert ("output", 0) in _reads(main)
    # prologues on both operands: both staged; none: the plain one-launch kernel
    group = _group(128, 256, 64, True, True)
    st = t.build(group.anchor_member.task, group.anchor_attributes(), {"auto": 1}, target)
    assert [w.name for w in st.workspace] == ["matmul_staged_a", "matmul_staged_b"]
    fuse_group(st, group)
    group = _group(128, 256, 64, False)
    st = t.build(group.anchor_member.task, group.anchor_attributes(), {"auto": 1}, target)
    assert len(st.launches) == 1 and not st.workspace
    # unaligned rows (register-staged element loads) take the prologue as they are
    group = _group(61, 97, 131)
    st = t.build(group.anchor_member.task, group.anchor_attributes(), {"auto": 1}, target)
    assert not any(w.name.startswith("matmul_staged") for w in st.workspace)
    fuse_group(st, group)


def test_level0_picks_a_template_that_takes_the_prologue():
    from hidet_framework.extension import plugin_host
    from hidet_framework.tuner import candidates_of

    target = _target()
    for prologue, want in ((True, "matmul.cuda_tensor_core"), (False, "matmul.cuda_wgmma")):
        group = _group(2048, 2048, 2048, prologue)
        task, attrs = group.anchor_member.task, group.anchor_attributes()
        templates = [t for t in plugin_host().templates.templates_for("matmul", "cuda") if t.applies(task, attrs)]
        assert candidates_of(templates, target, 0, task, attrs)[0].template.name == want


@pytest.mark.nvcc
def test_fused_gelu_matmul_compiles_to_sm90(tmp_path, monkeypatch):
    try:
        from hidet_plugin_cuda.nvrtc_build import build_cubin, choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    t, target = CudaTensorCoreMatmul(), _target()
    group = _group(128, 3072, 768)
    fused = fuse_group(t.build(group.anchor_member.task, group.anchor_attributes(), {"auto": 1}, target), group)
    source = generate_source(fused, CudaBackend(), target)
    assert "erff" in source or "erf(" in source
    cubin = build_cubin(source, arch="sm_90", name="staged_gelu", target_fingerprint=target.fingerprint())
    with open(cubin.path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(128, 3072, 768), (37, 264, 72)], ids=str)
def test_gelu_matmul_bias_fused_on_the_gpu(shape):
    from hidet_plugin_cuda import CudaBackend

    if not CudaBackend().availability():
        pytest.skip("no usable CUDA GPU")
    import math

    m, k, n = shape
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    xv = rng.standard_normal((m, k)).astype(np.float16)
    wv = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    bv = rng.standard_normal(n).astype(np.float16)
    x = hf.symbol((m, k), "float16")
    y = hf.ops.add(hf.ops.matmul(hf.ops.gelu(x), hf.constant(wv)), hf.constant(bv))
    fn = hf.compile(hf.trace(y, inputs=[x]), target="cuda", space=0)
    got = np.asarray(fn(xv), dtype=np.float64)
    x64 = xv.astype(np.float64)
    gelu = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    gelu = gelu.astype(np.float16).astype(np.float64)  # the copy holds fp16
    want = gelu @ wv.astype(np.float64) + bv.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
    (row,) = [r for r in fn.fusion_report() if "matmul" in r.operators]
    # the prologue costs one staging launch on top of the matmul's own (split-K adds a
    # reduce launch where the default splits K: the same default as without the gelu)
    plain = hf.compile(hf.trace(hf.ops.add(hf.ops.matmul(x, hf.constant(wv)), hf.constant(bv)), inputs=[x]),
                       target="cuda", space=0)
    assert row.status == "fused" and row.launches == plain.num_launches + 1, (fn.fusion_report(), plain.fusion_report())
