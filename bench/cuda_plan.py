"""The launches of BERT-base / GPT-2 (or any of ``../shared/models``) compiled for cuda,
counted without a GPU: the fp16 graph passes and the fusion partition as ``hf.compile``
runs them, each operator scheduled at space 0 for the documented default CUDA target
(the H200, ``default_cuda_target``; no measuring: at space 0 the tuner takes the
level-0 pick) and each group grafted; a group whose graft fails counts its members'
launches. Nothing is built or run.

    python bench/cuda_plan.py [--models gpt2_s128,bert_base_s128] [--groups] [--dump DIR]

Prints, per model, the launches per inference and, with ``--groups``, each operator
(fused groups as ``prologue -> [anchor] -> epilogue``) with its kernels' names.
HIDET_FRAMEWORK_FUSE_MULTIUSE=0 / HIDET_FRAMEWORK_VIEW_EPILOGUE=0 show the plan without
the epilogue DAGs / view epilogues (``hidet_framework/fusion/``), both on by default on cuda.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import _shared_dir  # noqa: E402
from shared_models import materialized  # noqa: E402


def plan(path: str, show_groups: bool, dump: str = "", prefix: str = "") -> int:
    import hidet_framework as hf
    from hidet_framework.driver import task_compiler
    from hidet_framework.driver.graph_compiler import evaluate_constants
    from hidet_framework.extension import plugin_host
    from hidet_framework.fusion import FUSION_PASSES, GROUP_ATTRIBUTE, FusionError
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
    from hidet_framework.graph.passes.convert_float_dtype import convert_float_dtype
    from hidet_framework.runtime.compile_target import CompileTarget
    from hidet_plugin_cuda.target import default_cuda_target

    target = CompileTarget("cuda", plugin_host().backend_for("cuda"), default_cuda_target())
    ctx = GraphPassContext(evaluate=evaluate_constants, target="cuda")  # as hf.compile
    graph = convert_float_dtype(hf.load(path), "float16", ctx)
    graph = run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES)
    total, kernels = 0, collections.Counter()
    for op in graph.nodes:
        group = op.attributes.get(GROUP_ATTRIBUTE)
        if group is None:
            scheduled, _ = task_compiler.schedule(op.task, op.name, target, 0, dict(op.attributes))
            parts, what = [scheduled], op.name
        else:
            anchor = group.anchor_member
            what = group.describe()
            try:
                schedule = (lambda attributes: task_compiler.schedule(anchor.task, anchor.name, target, 0, attributes)[0])
                if hasattr(task_compiler, "fuse_anchor"):
                    parts = [task_compiler.fuse_anchor(schedule, group)]
                else:  # a tree from before the view epilogues (for comparing sources with it)
                    parts = [task_compiler.fuse_group(schedule(group.anchor_attributes()), group)]
            except FusionError as exc:
                what += f"  (separate: {exc})"
                parts = [task_compiler.schedule(m.task, m.name, target, 0, dict(m.attributes))[0]
                         for m in group.members]
        n = sum(len(p.launches) for p in parts)
        total += n
        names = " ".join(launch.function for p in parts for launch in p.launches)
        if dump and kernels[(what, n, names)] == 0:
            _dump(os.path.join(dump, f"{prefix}{len(kernels):02d}_{names.split()[0][:80]}"), parts, target)
        kernels[(what, n, names)] += 1
    if show_groups:
        for (what, n, names), count in kernels.items():
            print(f"  x{count:<3d} {n} launch{'es' if n != 1 else '  '}  {what}\n        {names}")
    return total


def _dump(stem: str, parts: list, target) -> None:
    """Each scheduled part's generated CUDA source (lowered as a build lowers it)."""
    from hidet_framework.extension import plugin_host
    from hidet_framework.transforms.pipeline import lower

    backend = plugin_host().backend_for("cuda")
    for k, scheduled in enumerate(parts):
        with open(f"{stem}_{k}.cu", "w") as f:
            f.write(backend.codegen(lower(scheduled.module, "cuda"), target.target))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2_s128,bert_base_s128")
    parser.add_argument("--shared", default=_shared_dir())
    parser.add_argument("--groups", action="store_true")
    parser.add_argument("--dump", default="", help="write each distinct kernel's CUDA source here")
    args = parser.parse_args()
    for name in args.models.split(","):
        with materialized(args.shared, name) as path:
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
            print(f"{name}: {plan(path, args.groups, args.dump, name + '_')} launches per inference (cuda, fp16, space 0, offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
