"""Write the generated C and CUDA source of every checked candidate to a folder, one
file each, so two commits can be compared byte for byte (``diff -r``).

    python scripts/dump_generated_sources.py OUT_DIR
    diff -r OUT_BEFORE OUT_AFTER && echo byte-identical

What it covers (codegen only: nothing is compiled or run, so it needs no gcc, nvcc or
GPU and takes a few minutes):

- every space-2 candidate of every CPU and CUDA matmul template that the installed
  plugins register (through the plugin host, as the tuner finds them), on a few shapes,
  odd and batched ones included, for fixed targets (a CPU with AVX2, one with AVX-512,
  and the documented default CUDA target, sm_90); and, on made targets whose flags add
  avx512_bf16 (the vdpbf16ps pair kernel) or amx_tile and amx_bf16 (the AMX tile
  kernel), bfloat16 and float16 (widened) matmuls. Those kernels are chosen from the
  target's flags alone (the tile permission only matters when a target is detected),
  so they are generated here whatever the CPU;
- every space-2 candidate of the CPU template of ``matmul_prepacked`` (B packed at
  compile time: the GEMV / short-GEMM kernel) on a few short-M shapes, with float32
  panels and (where the tree has them) bfloat16 / float16 ones;
- the auto-scheduler's kernels of every operator of hidet_plugin_ops, on cpu and cuda;
- fused graphs (matmul with a prologue and an epilogue, an injective tree) after the
  graph passes: the anchor's default candidate (or the auto-schedule) grafted.
- the CPU channel-blocked kernels (convolutions reading or writing the blocked layout,
  max and avg pools, the global mean, the depthwise convolution), which only the CPU
  rewrite rules make, and the NCHW convolutions and pools: small graphs rewritten as if
  compiled for each fixed CPU target, each node dumped with its default grafted, and
  every level-1 candidate of every template serving a convolution or pool node on its own
  (section ``blocked``, about a minute more);
- every space-2 candidate of every template of the reduce plugin (CPU rows and columns
  for both CPU targets; CUDA rows, split rows, columns and scan for sm_90, also as a
  fusion anchor) on rows and columns of odd, prime and long extents, every family
  (reductions, argmax/argmin, cumsum, softmax, the norms) (section ``reduce``).

It only uses public or long-standing entry points, so it runs unchanged on the commit
before and after a refactoring.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

import numpy as np

import hidet_framework as hf
from hidet_framework.extension import plugin_host

import dump_operator_sections
from dump_sources_common import (CPU_AMX, CPU_AVX2, CPU_AVX512, CPU_AVX512_BF16, Dumper, cuda_target,
                                 schedule_default)

# (target name, dtype) -> operand shapes: odd, batched and row-vector ones.
MATMUL_SHAPES = {
    ("avx512", "float32"): [((64, 64), (64, 64)), ((37, 29), (29, 43)), ((2, 37, 29), (1, 29, 43)),
                            ((1, 97), (97, 131))],
    ("avx2", "float32"): [((37, 29), (29, 43))],
    # K odd (pairs padded), K past one K block (partial sums), batched A and B, a row vector
    ("avx512bf16", "bfloat16"): [((37, 29), (29, 43)), ((61, 517), (517, 75)), ((2, 37, 29), (2, 29, 43)),
                                 ((1, 97), (97, 131))],
    ("avx512bf16", "float16"): [((37, 29), (29, 43))],
    ("amx", "bfloat16"): [((37, 29), (29, 43)), ((61, 517), (517, 75)), ((2, 37, 29), (1, 29, 43)),
                          ((1, 97), (97, 131))],
    ("amx", "float16"): [((2, 37, 29), (1, 29, 43))],
    ("sm90", "float32"): [((2, 37, 29), (1, 29, 43)),
                          ((13, 1032), (1032, 68))],  # K >= 512 and rows 16-byte aligned: split-K, its vector form
    ("sm90", "float16"): [((192, 256), (256, 320))],
    ("sm90", "bfloat16"): [((61, 97), (97, 131))],
}


def dump_matmul_templates(d: Dumper) -> None:
    from hidet_plugin_matmul.operators import matmul_task

    targets = [("avx2", CPU_AVX2), ("avx512", CPU_AVX512), ("avx512bf16", CPU_AVX512_BF16), ("amx", CPU_AMX),
               ("sm90", cuda_target())]
    for tname, target in targets:
        for template in plugin_host().templates.templates_for("matmul", target.kind):
            for (shapes_target, dtype), shapes in MATMUL_SHAPES.items():
                if shapes_target != tname:
                    continue
                for a_shape, b_shape in shapes:
                    task, attrs = matmul_task(a_shape, b_shape, dtype)
                    if hasattr(template, "applies") and not template.applies(task, attrs):
                        continue
                    shape_name = "x".join(map(str, a_shape)) + "_" + "x".join(map(str, b_shape))
                    for k, params in enumerate(template.bounded_space(target, 2)):
                        scheduled = template.build(task, attrs, params, target)
                        d.write(f"tpl_{tname}_{template.name}_{dtype}_{shape_name}_{k:03d}", scheduled, target)


# (target name, A's and C's dtype) -> (M, K, N) of matmul_prepacked (B float32 panels)
PREPACKED_SHAPES = {
    ("avx512", "float32"): [(1, 97, 131), (5, 77, 31), (13, 1032, 68)],
    ("avx512", "bfloat16"): [(2, 37, 29)],
    ("avx2", "float32"): [(3, 29, 43)],
}


def dump_prepacked_templates(d: Dumper) -> None:
    from hidet_plugin_matmul import cpu_prepack

    targets = {"avx2": CPU_AVX2, "avx512": CPU_AVX512}
    for template in plugin_host().templates.templates_for(cpu_prepack.PREPACKED_OPERATOR, "cpu"):
        for (tname, dtype), shapes in PREPACKED_SHAPES.items():
            target = targets[tname]
            nr = cpu_prepack.panel_width(target)
            for m, k, n in shapes:
                a, b = hf.symbol((m, k), dtype), hf.symbol((k, n), "float32")
                y = cpu_prepack.matmul_prepacked(a, cpu_prepack.pack_b(b, nr), n)
                task, attrs = y.producer.task, dict(y.producer.attributes)
                for index, params in enumerate(template.bounded_space(target, 2)):
                    scheduled = template.build(task, attrs, params, target)
                    d.write(f"prepacked_{tname}_{template.name}_{dtype}_{m}x{k}x{n}_{index:03d}", scheduled, target)
        # 2-byte half panels (cpu_half_panels.py, session 16; CPU_AVX2 has no f16c flag,
        # so it widens float16); a tree whose pack_b lacks half_lanes skips them
        if "half_lanes" in inspect.signature(cpu_prepack.pack_b).parameters:
            for tname, dtype, (m, k, n) in (("avx512", "bfloat16", (1, 97, 131)), ("avx512", "bfloat16", (5, 77, 31)),
                                            ("avx512", "float16", (2, 37, 29)), ("avx2", "bfloat16", (3, 29, 43))):
                target, lanes = targets[tname], int(targets[tname].get("vector_bits")) // 32
                packed = cpu_prepack.pack_b(hf.symbol((k, n), dtype), cpu_prepack.panel_width(target), lanes)
                y = cpu_prepack.matmul_prepacked(hf.symbol((m, k), dtype), packed, n, lanes)
                for index, params in enumerate(template.bounded_space(target, 2)):
                    scheduled = template.build(y.producer.task, dict(y.producer.attributes), params, target)
                    d.write(f"prepacked_half_{tname}_{template.name}_{dtype}_{m}x{k}x{n}_{index:03d}", scheduled, target)


def _op_cases() -> dict[str, Callable[[], Any]]:
    """One call per ops-plugin operator (odd sizes), building its output tensors."""
    o = hf.ops
    s = hf.symbol
    x = s([3, 5, 7], "float32", "x")
    y = s([5, 1], "float32", "y")
    i = s([3, 5, 7], "int32", "i")
    b = s([3, 5, 7], "bool", "b")
    img = s([1, 3, 11, 13], "float32", "img")
    w = s([4, 3, 3, 3], "float32", "w")
    idx = s([4], "int64", "idx")
    return {
        "neg": lambda: o.neg(x), "abs": lambda: o.abs(x), "relu": lambda: o.relu(x), "exp": lambda: o.exp(x),
        "log": lambda: o.log(x), "sqrt": lambda: o.sqrt(x), "rsqrt": lambda: o.rsqrt(x), "erf": lambda: o.erf(x),
        "tanh": lambda: o.tanh(x), "sigmoid": lambda: o.sigmoid(x), "gelu": lambda: o.gelu(x),
        "cast": lambda: o.cast(x, "float16"),
        "add": lambda: o.add(x, y), "sub": lambda: o.sub(x, 2.0), "mul": lambda: o.mul(x, y),
        "div": lambda: o.div(i, 3, rounding_mode="floor"), "pow": lambda: o.pow(x, y),
        "maximum": lambda: o.maximum(x, y), "minimum": lambda: o.minimum(x, y),
        "equal": lambda: o.equal(i, 2), "not_equal": lambda: o.not_equal(x, y), "less": lambda: o.less(x, y),
        "less_equal": lambda: o.less_equal(x, y), "greater": lambda: o.greater(x, y),
        "greater_equal": lambda: o.greater_equal(x, y), "logical_and": lambda: o.logical_and(b, b),
        "logical_or": lambda: o.logical_or(b, x), "logical_xor": lambda: o.logical_xor(b, b),
        "logical_not": lambda: o.logical_not(b), "where": lambda: o.where(b, x, y),
        "clip": lambda: o.clip(x, -1.0, 1.0),
        "reshape": lambda: o.reshape(x, [15, 7]), "flatten": lambda: o.flatten(x, 1),
        "squeeze": lambda: o.squeeze(y, 1), "unsqueeze": lambda: o.unsqueeze(x, 0),
        "transpose": lambda: o.transpose(x, [2, 0, 1]), "permute": lambda: o.permute(x, [1, 2, 0]),
        "expand": lambda: o.expand(y, [5, 4]), "broadcast_to": lambda: o.broadcast_to(y, [2, 5, 3]),
        "concat": lambda: o.concat([x, x], 1), "split": lambda: o.split(x, [2, 5], 2),
        "slice": lambda: o.slice(x, [1], [4], [1], [2]), "gather": lambda: o.gather(x, idx, 1),
        "pad": lambda: o.pad(x, [0, 1, 2, 0, 1, 0]),
        "max_pool2d": lambda: o.max_pool2d(img, 3, 2, 1), "avg_pool2d": lambda: o.avg_pool2d(img, 2),
        "global_avg_pool2d": lambda: o.global_avg_pool2d(img),
        "conv2d": lambda: o.conv2d(img, w, padding=1), "im2col": lambda: o.im2col(img, 3, padding=1),
    }


def dump_ops_auto_schedule(d: Dumper) -> None:
    from hidet_framework.schedule import auto_schedule

    cases = _op_cases()
    missing = sorted(set(plugin_host().operators) - set(cases) - {"matmul", "batch_matmul"})
    for name in sorted(cases):
        outputs = cases[name]()
        outputs = [outputs] if not isinstance(outputs, (list, tuple)) else list(outputs)
        op = outputs[0].producer
        for tname, target in (("avx512", CPU_AVX512), ("sm90", cuda_target())):
            d.write(f"auto_{tname}_{name}", auto_schedule(op.task, target.kind), target)
    if missing:
        print(f"note: operators without a case here: {', '.join(missing)}", file=sys.stderr)


def dump_fused_graphs(d: Dumper) -> None:
    from hidet_framework.fusion import FusionError, fuse_group
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
    try:
        from hidet_framework.fusion import FUSION_PASSES, GROUP_ATTRIBUTE
    except ImportError:  # before the fusion stage owned its partition pass (d2e3505)
        from hidet_framework.graph.passes import FUSION_PASSES
        from hidet_framework.graph.passes.partition_fusion_groups import GROUP_ATTRIBUTE

    o = hf.ops
    a = hf.symbol([37, 29], "float32", "a")
    bias = hf.constant(np.linspace(-1, 1, 43).astype(np.float32), name="bias")
    wmat = hf.constant(np.linspace(-1, 1, 29 * 43).reshape(29, 43).astype(np.float32), name="wmat")
    mm = o.relu(o.add(o.matmul(o.tanh(a), wmat), bias))
    x = hf.symbol([3, 5, 7], "float32", "x")
    tree = o.sigmoid(o.mul(o.exp(x), o.transpose(o.add(o.transpose(x, [0, 2, 1]), 1.0), [0, 2, 1])))
    graphs = {"matmul_epilogue": hf.trace(mm, inputs=[a]), "injective_tree": hf.trace(tree, inputs=[x])}
    for gname, graph in graphs.items():
        ctx = GraphPassContext()
        fused = run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES)
        for tname, target in (("avx512", CPU_AVX512), ("sm90", cuda_target())):
            for k, op in enumerate(fused.nodes):
                if GROUP_ATTRIBUTE in op.attributes:
                    group = op.attributes[GROUP_ATTRIBUTE]
                    anchor = group.anchor_member
                    anchor_st = schedule_default(anchor.task, anchor.name, dict(anchor.attributes), target)
                    try:
                        scheduled = fuse_group(anchor_st, group)
                    except FusionError as exc:
                        print(f"{gname}/{k}: fusion fell back: {exc}", file=sys.stderr)
                        continue
                else:
                    scheduled = schedule_default(op.task, op.name, dict(op.attributes), target)
                d.write(f"fused_{tname}_{gname}_{k:02d}_{op.name}", scheduled, target)


SECTIONS = {"templates": dump_matmul_templates, "prepacked": dump_prepacked_templates, "ops": dump_ops_auto_schedule,
            "fused": dump_fused_graphs, **dump_operator_sections.SECTIONS}


def main(argv: list[str]) -> int:
    """``OUT_DIR [SECTION...]``: all sections by default."""
    if not argv or any(a not in SECTIONS for a in argv[1:]):
        print(__doc__.split("\n\n")[1] + f"sections: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    d = Dumper(argv[0])
    for section in argv[1:] or list(SECTIONS):
        SECTIONS[section](d)
    print(f"wrote {d.count} sources to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
