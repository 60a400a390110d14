"""``hf.compile``: graph passes, fusion, one compiled task per operator, the compiled graph.

    import hidet_framework as hf
    fn = hf.compile(graph, target="auto", space=0)   # -> CompiledGraph
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hidet_framework.compute.task import Task
from hidet_framework.extension import MissingBackendError, plugin_host
from hidet_framework.fusion import FUSED_OPERATOR, FUSION_PASSES, GROUP_ATTRIBUTE
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes
from hidet_framework.graph.passes.convert_float_dtype import convert_float_dtype
from hidet_framework.runtime.compile_target import CompileTarget, TargetUnavailableError
from hidet_framework.runtime.compiled_graph import CompiledGraph
from hidet_framework.runtime.compiled_task import CompiledTask
from hidet_framework.runtime.evaluate_task import EVALUATOR, interpret_task
from hidet_framework.driver.model_compiler import compile_model_tasks
from hidet_framework.driver.task_compiler import compile_fused, compile_task
from hidet_framework.driver.options import progress, resolve_space
from hidet_framework.driver.targets import resolve_compile_target

def host_target() -> CompileTarget | None:
    """The CompileTarget constant folding compiles for: the most preferred usable
    backend that runs on the host (``Backend.host``; constants live in host memory,
    so folding runs where they are, whichever target the graph is for), or None."""
    hosts = sorted((b for b in plugin_host().backends.values() if getattr(b, "host", False)),
                   key=lambda b: -b.preference)
    for backend in hosts:
        try:
            return resolve_compile_target(backend.target_kinds[0])
        except (MissingBackendError, TargetUnavailableError):
            continue
    return None


def evaluate_constants(task: Task, arrays: Sequence[np.ndarray]) -> Sequence[np.ndarray] | None:
    """Constant folding's evaluator: compiled for the host when possible, else the IR
    evaluator for tiny tasks (None beyond that: the operator stays in the graph)."""
    host = host_target()
    if host is not None:
        result = compile_task(task, host)(*arrays)
        return [result] if len(task.outputs) == 1 else list(result)
    return interpret_task(task, arrays)


def compile(graph: FlowGraph, target: Any = "auto", space: int | None = None,  # noqa: A001
            fusion: bool = True, cuda_graph: bool | None = None, dtype: str | None = None,
            parallel: bool = True) -> CompiledGraph:
    """Compile a traced graph for `target` ("cpu", "cuda", "evaluator", or "auto": the
    most preferred backend usable here, e.g. cuda where a GPU is, else cpu;
    ``CompiledGraph.target`` says which). The target is resolved once, here.

    :param space: schedule search-space level 0/1/2; None reads $HIDET_FRAMEWORK_SPACE (default 0).
    :param fusion: fuse producers and consumers onto anchors (fewer kernels, see
        ``CompiledGraph.fusion_report()``); False keeps one kernel per operator.
    :param cuda_graph: on cuda, replay each call's launches as one CUDA graph (None or
        True, the default); False keeps one plain launch per kernel. Ignored elsewhere.
    :param dtype: "float16" or "bfloat16": the model computes in that type (float32
        inputs and weights converted, float32 accumulation and statistics kept inside
        kernels, integer tensors untouched; ``graph/passes/convert_float_dtype.py``);
        None or "float32" leaves the graph's types as they are.
    :param parallel: tune and build all the model's tasks at once on every core
        (``driver/model_compiler.py``); False compiles operator by operator.
    :raises MissingBackendError: no installed plugin serves the target.
    :raises TargetUnavailableError: the backend is installed but cannot run here.
    """
    if not isinstance(graph, FlowGraph):
        raise TypeError(f"hf.compile takes a FlowGraph (hf.trace(outputs, inputs=[...])), got {type(graph).__name__}")
    resolved = resolve_compile_target(target)
    space = resolve_space(space)
    # The evaluator target promises not to need a compiler, constant folding included.
    ctx = GraphPassContext(evaluate=interpret_task if resolved is EVALUATOR else evaluate_constants,
                           target=resolved.kind)
    graph = convert_float_dtype(graph, dtype, ctx)
    graph = run_graph_passes(graph, ctx, GRAPH_PASSES + FUSION_PASSES if fusion else GRAPH_PASSES)
    if resolved is not EVALUATOR and parallel:
        # the whole model's tasks tuned and built at once, on every core (model_compiler.py)
        ctx.stats["compile_model_tasks"] = compile_model_tasks(graph.nodes, resolved, space)
    distinct = len({op.task.fingerprint() for op in graph.nodes})
    with progress(distinct, f"compiling {distinct} tasks for {resolved.kind}") as advance:
        def compile_operator(op: Any) -> CompiledTask:
            if op.name == FUSED_OPERATOR and GROUP_ATTRIBUTE in op.attributes:
                compiled = compile_fused(op.task, op.attributes[GROUP_ATTRIBUTE], resolved, space)
            else:
                compiled = compile_task(op.task, resolved, space, op_name=op.name, attributes=op.attributes)
            advance()
            return compiled

        return CompiledGraph(graph, compile_operator, resolved.device, resolved.kind, pass_stats=ctx.stats,
                             cuda_graph=cuda_graph)
