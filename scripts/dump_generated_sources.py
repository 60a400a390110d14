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
  (section ``blocked``, about a minute more).

It only uses public or long-standing entry points, so it runs unchanged on the commit
before and after a refactoring.
"""
from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Callable

import numpy as np

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.extension import plugin_host

CPU_AVX2 = Target("cpu", "x86-64", {"cores": 8, "vector_bits": 256, "fma": True, "l1d_bytes": 32768,
                                    "l2_bytes": 524288, "l3_bytes": 16777216, "flags": ("avx", "avx2", "fma"),
                                    "model": "synthetic avx2"})
CPU_AVX512 = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "fma": True, "l1d_bytes": 32768,
                                      "l2_bytes": 1048576, "l3_bytes": 33554432,
                                      "flags": ("avx", "avx2", "avx512f", "fma"), "model": "synthetic avx512"})
# AVX-512 with avx512_bf16: bfloat16 x bfloat16 builds the pair kernel (cpu_bf16_pairs.py).
CPU_AVX512_BF16 = Target("cpu", "x86-64", {**CPU_AVX512.properties,
                                           "flags": ("avx", "avx2", "avx512f", "avx512_bf16", "fma"),
                                           "model": "synthetic avx512_bf16"})
# ... and with amx_tile and amx_bf16: the tile kernel (cpu_amx_tiles.py), as a made
# target in tests/plugins/matmul/test_cpu_amx.py; no tile permission is asked for.
CPU_AMX = Target("cpu", "x86-64", {**CPU_AVX512.properties, "l1d_bytes": 49152, "l2_bytes": 2097152,
                                   "flags": ("avx", "avx2", "avx512f", "avx512_bf16", "fma", "amx_tile", "amx_bf16"),
                                   "model": "synthetic amx"})
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


class Dumper:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.count = 0
        os.makedirs(out_dir, exist_ok=True)
        host = plugin_host()
        self.backends = {kind: host.backend_for(kind) for kind in ("cpu", "cuda")}

    def write(self, name: str, scheduled: Any, target: Target) -> None:
        from hidet_framework.transforms.pipeline import lower

        backend = self.backends[target.kind]
        lowered = lower(scheduled.module, target.kind)
        source = backend.codegen(lowered, target)
        launches = "\n".join(repr(launch) for launch in scheduled.launches)
        workspace = "\n".join(repr(w) for w in scheduled.workspace)
        text = f"// launches:\n/*\n{launches}\n*/\n// workspace:\n/*\n{workspace}\n*/\n{source}"
        path = os.path.join(self.out_dir, f"{name}.{'c' if target.kind == 'cpu' else 'cu'}")
        if os.path.exists(path):
            raise RuntimeError(f"two candidates dump to {path}")
        with open(path, "w") as f:
            f.write(text)
        self.count += 1


def _cuda_target() -> Target:
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def dump_matmul_templates(d: Dumper) -> None:
    from hidet_plugin_matmul.operators import matmul_task

    targets = [("avx2", CPU_AVX2), ("avx512", CPU_AVX512), ("avx512bf16", CPU_AVX512_BF16), ("amx", CPU_AMX),
               ("sm90", _cuda_target())]
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
        for tname, target in (("avx512", CPU_AVX512), ("sm90", _cuda_target())):
            d.write(f"auto_{tname}_{name}", auto_schedule(op.task, target.kind), target)
    if missing:
        print(f"note: operators without a case here: {', '.join(missing)}", file=sys.stderr)


def _schedule_default(task: Any, op_name: str, attributes: dict, target: Target) -> Any:
    """The tuner's level-0 pick without measuring: the highest-priority applicable
    template's default candidate, else the auto-scheduler."""
    from hidet_framework.schedule import auto_schedule

    templates = [t for t in plugin_host().templates.templates_for(op_name, target.kind)
                 if not hasattr(t, "applies") or t.applies(task, attributes)]
    if not templates:
        return auto_schedule(task, target.kind)
    best = max(templates, key=lambda t: (t.priority, t.name))
    return best.build(task, attributes, best.bounded_space(target, 0)[0], target)


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
        for tname, target in (("avx512", CPU_AVX512), ("sm90", _cuda_target())):
            for k, op in enumerate(fused.nodes):
                if GROUP_ATTRIBUTE in op.attributes:
                    group = op.attributes[GROUP_ATTRIBUTE]
                    anchor = group.anchor_member
                    anchor_st = _schedule_default(anchor.task, anchor.name, dict(anchor.attributes), target)
                    try:
                        scheduled = fuse_group(anchor_st, group)
                    except FusionError as exc:
                        print(f"{gname}/{k}: fusion fell back: {exc}", file=sys.stderr)
                        continue
                else:
                    scheduled = _schedule_default(op.task, op.name, dict(op.attributes), target)
                d.write(f"fused_{tname}_{gname}_{k:02d}_{op.name}", scheduled, target)


SECTIONS = {"templates": dump_matmul_templates, "prepacked": dump_prepacked_templates, "ops": dump_ops_auto_schedule,
            "fused": dump_fused_graphs}


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
                    scheduled = _schedule_default(anchor.task, anchor.name, dict(anchor.attributes), target)
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


# a section of its own, registered apart from SECTIONS above (main reads it only when it runs)
SECTIONS["blocked"] = dump_blocked_cpu_graphs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
