"""Sections of scripts/dump_generated_sources.py for the operator plugins' own templates:
the CUDA attention and implicit-GEMM conv candidates, the CPU channel-blocked kernels
(which only the CPU rewrite rules make) with the NCHW convolutions and pools, and every
template of the reduce plugin. Each section is a function of the Dumper; SECTIONS names
them for the main script."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import hidet_framework as hf
from hidet_framework.extension import plugin_host

from dump_sources_common import CPU_AVX2, CPU_AVX512, Dumper, cuda_target, schedule_default

# ---- CUDA attention (scalar, mma and split forms) and implicit-GEMM conv candidates ----
# (q, kt, v, mask shape or None, mask kind, scale, zero_nan, dtype): odd and prime M and N,
# D 16 / 64 / 128, causal (select) and added masks, keys past one resident tile.
ATTENTION_CASES = [
    ((1, 12, 128, 64), (1, 12, 64, 128), (1, 12, 128, 64), (128, 128), "select", 0.125, True, "float16"),
    ((2, 3, 61, 64), (2, 3, 64, 131), (2, 3, 131, 64), (2, 1, 61, 131), "add", 0.125, False, "float16"),
    ((3, 7, 16), (3, 16, 7), (3, 7, 16), None, "none", 0.25, False, "bfloat16"),
    ((131, 128), (128, 61), (61, 128), (131, 61), "select", 0.09, True, "bfloat16"),
    ((1, 2, 67, 64), (1, 2, 64, 700), (1, 2, 700, 64), (1, 1, 67, 700), "add", 0.125, False, "float16"),
    ((2, 7, 32), (2, 32, 13), (2, 13, 32), (7, 13), "select", 0.2, False, "float16"),
]
# beyond the template's space: one warp, the split shapes the tests build, the opt-in warp form
ATTENTION_EXTRA_PARAMS = [{"form": "mma", "warps": 1}] + [
    {"form": "mma", "warps": w, "split": s} for w, s in ((4, 4), (8, 8), (8, 4), (4, 2), (2, 2))] + [
    {"rows": 1, "threads": 128, "k_order": "d"}]
# (batch, C, H, W, O, kernel, stride, pads, dilation, groups, x layout, y layout)
CONV_CASES = [
    (2, 16, 9, 11, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nchw", "nchw"),
    (2, 16, 9, 11, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "nhwc", "nhwc"),
    (1, 3, 13, 13, 5, (3, 2), (2, 1), (1, 0, 2, 1), (2, 1), 1, "nchw", "nhwc"),
    (2, 24, 7, 9, 42, (3, 3), (2, 2), (1, 1, 1, 1), (2, 2), 3, "nhwc", "nchw"),
    (3, 32, 5, 5, 17, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nchw", "nchw"),
    (2, 13, 4, 6, 19, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nchw", "nchw"),
    (3, 24, 2, 10, 9, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, "nchw", "nchw"),
]


def dump_cuda_attention_and_conv(d: Dumper) -> None:
    """Every candidate of the CUDA attention template (its space plus ATTENTION_EXTRA_PARAMS)
    on ATTENTION_CASES, and the CUDA implicit-GEMM conv template's level-1 candidates (plus
    channels-first on three) on CONV_CASES in float16 and bfloat16, for the sm_90 target."""
    from hidet_plugin_matmul.cuda_conv_op import ConvGeometry, conv2d_igemm

    target = cuda_target()
    host = plugin_host()
    for template in host.templates.templates_for("attention", "cuda"):
        params_list = []
        for params in list(template.bounded_space(target, 2)) + ATTENTION_EXTRA_PARAMS:
            if params not in params_list:
                params_list.append(params)
        for c, (qs, ks, vs, ms, kind, scale, zero_nan, dtype) in enumerate(ATTENTION_CASES):
            q, k, v = (hf.symbol(s, dtype) for s in (qs, ks, vs))
            mask = None if ms is None else hf.symbol(ms, "bool" if kind == "select" else "float32")
            op = hf.ops.attention(q, k, v, mask, scale=scale, mask_kind=None if ms is None else kind,
                                  zero_nan=zero_nan).producer
            if hasattr(template, "applies") and not template.applies(op.task, op.attributes):
                continue
            for j, params in enumerate(params_list):
                scheduled = template.build(op.task, op.attributes, params, target)
                d.write(f"attn_sm90_{template.name}_{c}_{dtype}_{j:03d}", scheduled, target)
    for template in host.templates.templates_for("conv2d_igemm", "cuda"):
        space = list(template.bounded_space(target, 1))
        params_list = space + [dict(p, channels_first=1) for p in space[1:4]]
        for c, case in enumerate(CONV_CASES):
            geo = ConvGeometry(*case[:10], x_layout=case[10], y_layout=case[11])
            for dtype in ("float16", "bfloat16"):
                y = conv2d_igemm(hf.symbol(geo.x_shape, dtype), hf.symbol(geo.w_shape, dtype), geo)
                task, attributes = y.producer.task, dict(y.producer.attributes)
                for j, params in enumerate(params_list):
                    scheduled = template.build(task, attributes, params, target)
                    d.write(f"conv_sm90_{template.name}_{c}_{dtype}_{j:03d}", scheduled, target)



# The operators of the channel-blocked family (cpu_blocked.py and the templates behind
# rules_blocked.py and rules_blocked_chain.py), and the NCHW pools beside them: their
# candidates are dumped one by one.
BLOCKED_OPERATORS = ("conv2d_packed", "conv2d_depthwise_blocked", "max_pool2d_blocked", "avg_pool2d_blocked",
                     "global_mean_blocked", "conv2d", "max_pool2d", "avg_pool2d")


def _blocked_graphs() -> dict[str, Any]:
    """Graphs that the CPU rewrite rules put in the channel-blocked layout (32 and 48
    channels: whole vectors for 8 and 16 lanes; odd sizes, strides, pads, dilation,
    ceil mode, both divisors, both mean forms)."""
    o = hf.ops

    def const(*shape: int) -> Any:
        count = int(np.prod(shape))
        return hf.constant((np.linspace(-1, 1, count) / np.sqrt(count / shape[0])).reshape(shape).astype(np.float32))

    def conv(t: Any, out: int, k: int, relu: bool = True, **kw: Any) -> Any:
        y = o.conv2d(t, const(out, int(t.shape[1]), k, k), const(out), **kw)
        return o.relu(y) if relu else y

    graphs = {}
    # ResNet-like: stem 7x7/2 → relu → 3x3/2 max pool → bottleneck with a residual → both global means
    x = hf.symbol((1, 3, 23, 19), "float32", "x")
    p = o.max_pool2d(conv(x, 32, 7, stride=2, padding=3), 3, 2, 1)
    t = conv(conv(p, 32, 1), 32, 3, padding=1)
    t = o.relu(conv(t, 48, 1, relu=False) + conv(p, 48, 1, relu=False))
    graphs["stem"] = hf.trace([o.global_avg_pool2d(t), o.reduce_mean(t, axes=(2, 3), keepdims=False)], inputs=[x])
    # Inception-like: branches (1x1; 3x3; avg pool 3x3/1 counting the image only → 1x1) joined,
    # then odd pools (dilated max pool → 1x1 → a ragged 40-channel 1x1; ceil-mode avg pool with uneven pads → 1x1)
    x = hf.symbol((1, 3, 17, 13), "float32", "x")
    s = conv(x, 32, 3, padding=1)
    m = o.concat([conv(s, 16, 1), conv(s, 32, 3, padding=1),
                  conv(o.avg_pool2d(s, 3, 1, 1, count_include_pad=False), 16, 1)], axis=1)
    a = conv(conv(o.max_pool2d(m, (5, 3), (3, 2), (2, 0, 1, 1), (1, 2)), 40, 1), 32, 1, relu=False)
    b = conv(o.avg_pool2d(m, (3, 2), (2, 2), (1, 0, 1, 1), ceil_mode=True), 32, 1, relu=False)
    graphs["inception"] = hf.trace([a, b], inputs=[x])
    # MobileNet-like inverted residuals: 1x1 → clip → depthwise 3x3 (stride 1, then 2) → clip → 1x1
    x = hf.symbol((1, 16, 15, 13), "float32", "x")
    t = x
    for stride in (1, 2):
        e = o.clip(conv(t, 32, 1, relu=False), 0.0, 6.0)
        d = o.clip(o.conv2d(e, const(32, 1, 3, 3), const(32), stride=stride, padding=1, groups=32), 0.0, 6.0)
        t = conv(d, 16, 1, relu=False)
    graphs["inverted"] = hf.trace(t, inputs=[x])
    # NCHW convolutions and pools outside any chain (the pointwise and flat forms, a dilated
    # stride-2 3x3, depthwise ones with and without a bias; a dilated max pool, an avg pool
    # in ceil mode counting the image only)
    x, small = hf.symbol((1, 24, 9, 11), "float32", "x"), hf.symbol((1, 24, 7, 7), "float32", "s")
    graphs["nchw"] = hf.trace([conv(x, 40, 1), conv(x, 16, 3, stride=2, padding=2, dilation=2), conv(small, 32, 1),
                               o.conv2d(x, const(24, 1, 3, 3), const(24), stride=2, padding=1, groups=24),
                               o.conv2d(small, const(48, 1, 3, 3), padding=1, groups=24),
                               o.max_pool2d(x, (3, 2), (2, 1), (1, 0, 1, 1), (1, 2)),
                               o.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)], inputs=[x, small])
    return graphs


def dump_blocked_cpu_graphs(d: Dumper) -> None:
    from hidet_framework.fusion import FusionError, fuse_group
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
    from hidet_framework.runtime.evaluate_task import interpret_task
    try:
        from hidet_framework.fusion import FUSION_PASSES, GROUP_ATTRIBUTE
    except ImportError:  # before the fusion stage owned its partition pass (d2e3505)
        from hidet_framework.graph.passes import FUSION_PASSES
        from hidet_framework.graph.passes.partition_fusion_groups import GROUP_ATTRIBUTE

    # the weights are packed by folding constants, as in hf.compile, but through the IR
    # evaluator: no compiler needed
    ctx = GraphPassContext(evaluate=interpret_task, target="cpu")
    backend = plugin_host().backend_for("cpu")
    for tname, target in (("avx512", CPU_AVX512), ("avx2", CPU_AVX2)):
        # the rules and the weight packing read the machine through the backend: this target instead
        backend.detect_target = lambda target=target: target
        try:
            for gname, graph in _blocked_graphs().items():
                fused = run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES)
                for k, op in enumerate(fused.nodes):
                    group = op.attributes.get(GROUP_ATTRIBUTE)
                    anchor = group.anchor_member if group is not None else op
                    scheduled = schedule_default(anchor.task, anchor.name, dict(anchor.attributes), target)
                    if group is not None:
                        try:
                            scheduled = fuse_group(scheduled, group)
                        except FusionError as exc:
                            print(f"blocked {gname}/{k}: fusion fell back: {exc}", file=sys.stderr)
                            continue
                    d.write(f"blocked_{tname}_{gname}_{k:02d}_{op.name}", scheduled, target)
                    if anchor.name not in BLOCKED_OPERATORS:
                        continue
                    attributes = dict(anchor.attributes)
                    for template in plugin_host().templates.templates_for(anchor.name, "cpu"):
                        if hasattr(template, "applies") and not template.applies(anchor.task, attributes):
                            continue
                        for i, params in enumerate(template.bounded_space(target, 1)):
                            built = template.build(anchor.task, attributes, params, target)
                            d.write(f"blocked_{tname}_{gname}_{k:02d}_{template.name}_{i:03d}", built, target)
        finally:
            del backend.detect_target





# ---- the reduce plugin's templates (CPU rows, CUDA rows, columns, split rows and scan) ----
# (name, builder of the output from hf.ops and hf.symbol): every family over the innermost
# axes (rows of odd, prime and long extents: lane tails, CUDA streamed and split rows),
# reductions, argmax and cumsum over non-innermost axes (columns), and the norms with and
# without a bias, over more than one axis and per group.
def _reduce_cases() -> list[tuple[str, Any]]:
    o, s = hf.ops, hf.symbol
    cases: list[tuple[str, Any]] = []
    for shape, dtype in (((37, 71), "float32"), ((5, 3001), "float32"), ((3, 70001), "float32"),
                         ((13, 320), "float16"), ((11, 67), "int32")):
        tag = "x".join(map(str, shape)) + "_" + dtype
        x = s(shape, dtype)
        cases += [(f"reduce_sum_keep_{tag}", o.reduce_sum(x, -1, keepdims=True)),
                  (f"reduce_max_{tag}", o.reduce_max(x, -1)), (f"reduce_min_{tag}", o.reduce_min(x, -1)),
                  (f"reduce_prod_{tag}", o.reduce_prod(x, -1)), (f"reduce_sum_square_{tag}", o.reduce_sum_square(x, -1)),
                  (f"argmax_{tag}", o.argmax(x, -1)), (f"argmin_last_{tag}", o.argmin(x, -1, select_last_index=True)),
                  (f"cumsum_excl_{tag}", o.cumsum(x, -1, exclusive=True))]
        if dtype == "int32":
            continue
        w, b = s(shape[-1:], dtype), s(shape[-1:], dtype)
        cases += [(f"reduce_mean_{tag}", o.reduce_mean(x, -1)), (f"reduce_l2_{tag}", o.reduce_l2(x, -1)),
                  (f"softmax_{tag}", o.softmax(x)), (f"log_softmax_{tag}", o.log_softmax(x)),
                  (f"layer_norm_{tag}", o.layer_norm(x, w, b)), (f"layer_norm_nobias_{tag}", o.layer_norm(x, w)),
                  (f"rms_norm_{tag}", o.rms_norm(x, w))]
    for shape, axes, dtype in (((301, 129), 0, "float32"), ((7, 64, 33), 1, "float32"), ((4099, 64), 0, "float32"),
                               ((3, 5, 7, 11), (1, 2), "float16"), ((9, 13), 0, "int32")):
        tag = "x".join(map(str, shape)) + f"_a{axes}_{dtype}".replace(" ", "").replace(",", "")
        x = s(shape, dtype)
        first = axes if isinstance(axes, int) else axes[0]
        cases += [(f"col_reduce_sum_{tag}", o.reduce_sum(x, axes)), (f"col_reduce_max_{tag}", o.reduce_max(x, axes, True)),
                  (f"col_reduce_prod_{tag}", o.reduce_prod(x, axes)), (f"col_argmax_{tag}", o.argmax(x, first)),
                  (f"col_cumsum_rev_{tag}", o.cumsum(x, first, reverse=True))]
        if dtype != "int32":
            cases += [(f"col_reduce_mean_{tag}", o.reduce_mean(x, axes, keepdims=True)),
                      (f"col_reduce_l2_{tag}", o.reduce_l2(x, axes)), (f"col_reduce_min_{tag}", o.reduce_min(x, axes))]
    x = s((2, 6, 5, 7), "float32")
    c1, c2 = s((6,), "float32"), s((6,), "float32")
    cases += [("group_norm_2x6x5x7", o.group_norm(x, c1, c2, 3)), ("instance_norm_2x6x5x7", o.instance_norm(x, c1, c2)),
              ("layer_norm_axis1_2x6x5x7", o.layer_norm(x, s((5, 7), "float32"), s((7,), "float32"), axis=2))]
    return cases


def dump_reduce_templates(d: Dumper) -> None:
    """Every space-2 candidate of every reduce-plugin template that applies to each case,
    for the two CPU targets and sm_90 (CUDA also as a fusion anchor: element accesses
    only, no vector loads)."""
    anchor = "fusion.anchor"  # hidet_framework.fusion.plan.ANCHOR_ATTRIBUTE
    host = plugin_host()
    for cname, y in _reduce_cases():
        op = y.producer
        for tname, target in (("avx512", CPU_AVX512), ("avx2", CPU_AVX2), ("sm90", cuda_target())):
            for template in host.templates.templates_for(op.name, target.kind):
                for graft in ((False, True) if target.kind == "cuda" else (False,)):
                    attributes = dict(op.attributes, **({anchor: True} if graft else {}))
                    if hasattr(template, "applies") and not template.applies(op.task, attributes):
                        continue
                    for k, params in enumerate(template.bounded_space(target, 2)):
                        scheduled = template.build(op.task, attributes, params, target)
                        d.write(f"reduce_{tname}_{template.name}_{cname}{'_graft' if graft else ''}_{k:03d}",
                                scheduled, target)


SECTIONS = {"cuda_attention_conv": dump_cuda_attention_and_conv, "blocked": dump_blocked_cpu_graphs,
            "reduce": dump_reduce_templates}
