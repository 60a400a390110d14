"""CUDA matmul templates take grafts: SIMT candidates with a relu prologue and a bias +
relu epilogue generate CUDA that compiles to an sm_90 cubin (marker ``nvcc``: no GPU
needed); the tensor-core template either takes the graft or refuses it with a
FusionError (the driver then runs the operators apart) — never a broken kernel."""
from __future__ import annotations

import pytest

import hidet_framework as hf
from hidet_framework.fusion import FusionError, fuse_group
from hidet_framework.fusion import FUSION_PASSES
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_framework.fusion.partition_fusion_groups import GROUP_ATTRIBUTE


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
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda import CudaBackend

    def candidate_source(scheduled, target):
        return generate_source(scheduled, CudaBackend(), target)
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


def test_tensor_core_split_k_and_pad_launches_take_each_graft_once(fx):
    """Multi-launch candidates (IR only, no compiler): under split-K the epilogue lands
    on the reduce launch's final store only (the partial sums stay in the workspace);
    under "pad" the prologue lands on the pad launch, the one that reads A, under its
    guard; a cp.async main kernel refuses."""
    fx.need_ops("matmul", "relu", "add")
    pytest.importorskip("hidet_plugin_cuda")
    from hidet_plugin_cuda.target import default_cuda_target
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul, tc_space

    target, template = default_cuda_target(), CudaTensorCoreMatmul()
    group = _group("float16", 61, 97, 131)  # K % 8 != 0: register staging, or a pad launch
    anchor = group.anchor_member
    space = tc_space(target, 2)
    split = next(p for p in space if p.get("split_k", 1) > 1 and not p.get("pad"))
    pad = next(p for p in space if p.get("pad"))
    fused = fuse_group(template.build(anchor.task, dict(anchor.attributes), split, target), group)
    main, reduce_ = fused.launches
    assert all(r.kind != "output" for r in main.buffers) and ("input", 0) in [(r.kind, r.index) for r in main.buffers]
    assert [(r.kind, r.index) for r in reduce_.buffers] == [("workspace", 0), ("output", 0), ("input", 2)]
    fused = fuse_group(template.build(anchor.task, dict(anchor.attributes), pad, target), group)
    pad_launch, main = fused.launches
    assert ("input", 0) in [(r.kind, r.index) for r in pad_launch.buffers]
    assert ("input", 0) not in [(r.kind, r.index) for r in main.buffers]
    aligned = _group("float16", 64, 96, 128)  # cp.async takes A's address: no graft
    with pytest.raises(FusionError, match="address"):
        fuse_group(template.build(aligned.anchor_member.task, dict(aligned.anchor_member.attributes), split, target),
                   aligned)
