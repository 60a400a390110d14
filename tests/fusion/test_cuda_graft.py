"""CUDA matmul templates take grafts: SIMT candidates with a relu prologue and a bias +
relu epilogue generate CUDA that compiles to an sm_90 cubin (marker ``nvcc``: no GPU
needed); the tensor-core template either takes the graft or refuses it with a
FusionError (the driver then runs the operators apart) — never a broken kernel."""
from __future__ import annotations

import pytest

import hidet_framework as hf
from hidet_framework.fusion import FusionError, fuse_group
from hidet_framework.graph.passes import FUSION_PASSES, GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_framework.graph.passes.partition_fusion_groups import GROUP_ATTRIBUTE


def _group(dtype: str, m: int, k: int, n: int):
    x, w, bias = hf.symbol((m, k), dtype), hf.symbol((k, n), dtype), hf.symbol((n,), dtype)
    y = hf.ops.relu(hf.ops.add(hf.ops.matmul(hf.ops.relu(x), w), bias))
    graph = run_graph_passes(hf.trace(y, inputs=[x, w, bias]), GraphPassContext(), GRAPH_PASSES + FUSION_PASSES)
    (op,) = graph.nodes
    return op.attributes[GROUP_ATTRIBUTE]


@pytest.mark.nvcc
def test_fused_cuda_matmul_candidates_compile(tmp_path, monkeypatch, fx):
    fx.need_ops("matmul", "relu", "add")
    pytest.importorskip("hidet_plugin_cuda")
    try:
        from hidet_plugin_cuda.nvrtc_build import build_cubin, choose_compiler

        choose_compiler()
    except Exception as exc:
        pytest.skip(f"no CUDA compiler: {exc}")
    from hidet_plugin_cuda.target import default_cuda_target
    from hidet_plugin_matmul.cuda_run import candidate_source
    from hidet_plugin_matmul.cuda_simt import CudaSimtMatmul
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    target = default_cuda_target()
    jobs = [(CudaSimtMatmul(), _group("float32", 37, 29, 43), p) for p in CudaSimtMatmul().space(target, 1)[:3]]
    jobs += [(CudaTensorCoreMatmul(), _group("float16", 61, 97, 131), p) for p in CudaTensorCoreMatmul().space(target, 0)]
    fused = refused = 0
    for k, (template, group, params) in enumerate(jobs):
        anchor = group.anchor_member
        scheduled = template.build(anchor.task, dict(anchor.attributes), params, target)
        try:
            grafted = fuse_group(scheduled, group)
        except FusionError:
            assert isinstance(template, CudaTensorCoreMatmul), "the SIMT template reads and writes plainly"
            refused += 1
            continue
        result = build_cubin(candidate_source(grafted, target), arch="sm_90", name=f"fused{k}",
                             target_fingerprint=target.fingerprint())
        with open(result.path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
        fused += 1
    assert fused >= 3
    print(f"\n{fused} fused CUDA candidates compiled to sm_90; {refused} refused the graft")
