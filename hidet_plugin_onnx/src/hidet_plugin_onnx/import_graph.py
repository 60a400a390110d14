"""An ONNX graph to a FlowGraph: inputs with static shapes, initializers as constants,
nodes converted in topological order through `op_table`.

Values are either hidet `Tensor`s or numpy arrays known at import (initializers,
Constant nodes, shapes, and what shape subgraphs compute from them: see `fold.py`).
Before converting anything the graph is checked whole: a cycle, a dangling input, an
unknown dtype, an unsupported operator (all of them listed at once) each raise one
`OnnxImportError`.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from hidet_framework.graph import FlowGraph, Tensor, constant, symbol

from .dtypes import hidet_dtype, to_array, value_dtype
from .errors import OnnxImportError, UnsupportedOperatorsError
from .names import sanitize, shown
from .node_context import NodeContext
from .op_table import CONVERTERS, missing_requirements
from .read_model import DEFAULT_DOMAINS, default_opset, op_changed_since_supported


def import_model(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 float_dtype: str | None = None) -> FlowGraph:
    """The FlowGraph of ModelProto `model` (external data already loaded). With
    `float_dtype` ("float16", "bfloat16"), float32 inputs, weights, constants and
    casts become that type: the model computes in it."""
    if float_dtype not in (None, "float32", "float16", "bfloat16", "float64"):
        raise OnnxImportError(f"dtype {float_dtype!r}: expected float32, float16, bfloat16 or float64")
    convert = _float_converter(float_dtype)
    from onnx import numpy_helper

    graph = model.graph
    opset = default_opset(model)
    initializers = {t.name: t for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    shapes = _input_shapes(inputs, dict(input_shapes or {}))
    order = _topological_order(graph, set(initializers) | {i.name for i in inputs})
    _check_supported(graph, order, {t.name: numpy_helper.to_array(t) for t in graph.initializer
                                    if len(t.dims) <= 1 and t.data_type in (6, 7)}, opset)

    env: dict[str, Any] = {}
    symbols = []
    for value_info in inputs:
        dtype = hidet_dtype(value_info.type.tensor_type.elem_type, f"graph input {shown(value_info.name)}")
        if dtype == "float32" and float_dtype:
            dtype = float_dtype
        t = symbol(shapes[value_info.name], dtype, name=sanitize(value_info.name, "input"))
        env[value_info.name] = t
        symbols.append(t)
    for name, proto in initializers.items():
        hidet_dtype(proto.data_type, f"initializer {shown(name)}")  # refuses unknown dtypes clearly
        env[name] = convert(to_array(proto))
    for node in order:
        _convert(node, env, opset, float_dtype, convert)
    outputs = []
    for out in graph.output:
        if out.name not in env:
            raise OnnxImportError(f"graph output {shown(out.name)} is not computed by any node")
        value = env[out.name]
        if not isinstance(value, Tensor):
            value = constant(value, name=sanitize(out.name, "output"))
        elif value.is_graph_input():
            pass  # an input echoed as an output
        outputs.append(value)
    return FlowGraph(symbols, outputs)


def _input_shapes(inputs: list, given: dict[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    names = [i.name for i in inputs]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise OnnxImportError(f"input_shapes names {', '.join(shown(n) for n in unknown)}, which "
                              f"{'is' if len(unknown) == 1 else 'are'} not a graph input (graph inputs: "
                              f"{', '.join(shown(n) for n in names) or 'none'})")
    shapes = {}
    for value_info in inputs:
        name = value_info.name
        if not value_info.type.HasField("tensor_type"):
            raise OnnxImportError(f"graph input {shown(name)} is not a tensor (sequences, maps and optionals "
                                  f"are not supported)")
        dims = value_info.type.tensor_type.shape.dim
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
        if name in given:
            shape = given[name]
            try:
                shape = tuple(int(s) for s in shape)
                ok = all(s >= 0 for s in shape) and not any(isinstance(s, bool) for s in given[name])
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise OnnxImportError(f"input_shapes[{shown(name)}] = {given[name]!r} is not a shape "
                                      f"(a sequence of non-negative ints)")
            if value_info.type.tensor_type.HasField("shape"):
                if len(shape) != len(declared):
                    raise OnnxImportError(f"input_shapes[{shown(name)}] = {list(shape)} has rank {len(shape)}, "
                                          f"the model declares rank {len(declared)} ({declared})")
                for k, (s, d) in enumerate(zip(shape, declared)):
                    if isinstance(d, int) and d > 0 and d != s:
                        raise OnnxImportError(f"input_shapes[{shown(name)}] = {list(shape)}: dimension {k} is "
                                              f"{s}, the model fixes it to {d}")
            shapes[name] = shape
            continue
        if not value_info.type.tensor_type.HasField("shape"):
            raise OnnxImportError(f"graph input {shown(name)} has no declared shape; give it with "
                                  f"input_shapes={{{name!r}: (...)}} (command line: --input-shape {name}=...)")
        for k, d in enumerate(declared):
            if not isinstance(d, int):
                dims = ['N' if not isinstance(e, int) else str(e) for e in declared]
                raise OnnxImportError(f"graph input {shown(name)} has the symbolic dimension {k} "
                                      f"({shown(str(d))}) in shape {declared}; give a static shape with "
                                      f"input_shapes={{{name!r}: ({', '.join(dims)})}} "
                                      f"(command line: --input-shape {name}={'x'.join(dims)})")
        shapes[name] = tuple(declared)
    return shapes


def _topological_order(graph: Any, available: set[str]) -> list:
    """The nodes in an order where each reads only what is computed before it;
    a dangling input or a cycle raises."""
    producers: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        for out in node.output:
            if out:
                if out in producers or out in available:
                    raise OnnxImportError(f"value {shown(out)} is produced twice (node "
                                          f"{shown(node.name or node.op_type)})")
                producers[out] = k
    waiting = defaultdict(list)
    missing_count = []
    for k, node in enumerate(graph.node):
        needs = set()
        for name in node.input:
            if not name or name in available:
                continue
            if name not in producers:
                raise OnnxImportError(f"node {shown(node.name or node.op_type)} ({node.op_type}) reads "
                                      f"{shown(name)}, which is neither a graph input, an initializer nor "
                                      f"produced by a node (a dangling input)")
            needs.add(producers[name])
        for p in needs:
            waiting[p].append(k)
        missing_count.append(len(needs))
    ready = [k for k, c in enumerate(missing_count) if c == 0]
    order = []
    while ready:
        k = ready.pop(0)
        order.append(graph.node[k])
        for j in waiting[k]:
            missing_count[j] -= 1
            if missing_count[j] == 0:
                ready.append(j)
    if len(order) != len(graph.node):
        stuck = [graph.node[k] for k, c in enumerate(missing_count) if c > 0][:5]
        raise OnnxImportError("the graph has a cycle through nodes " + ", ".join(
            f"{shown(n.name or n.op_type)} ({n.op_type})" for n in stuck))
    return order


def _check_supported(graph: Any, order: list, known: dict, opset: int) -> None:
    """Every node's op type must have a converter whose operators are registered; all
    problems are gathered into one error."""
    problems: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node in order:
        key = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        if node.domain not in DEFAULT_DOMAINS:
            reason = f"domain {node.domain!r} is not supported (only the default ai.onnx domain)"
        elif node.op_type not in CONVERTERS:
            reason = "no converter in hidet-plugin-onnx"
        else:
            reason = op_changed_since_supported(node, opset) or missing_requirements(node.op_type, node, known)
            if reason is None:
                continue
        problems[(key, reason)].append(node.name or "(unnamed)")
    if problems:
        lines = []
        for (op, reason), nodes in sorted(problems.items()):
            names = ", ".join(shown(n, 40) for n in nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
            lines.append(f"{op} x{len(nodes)} (nodes {names}): {reason}")
        raise UnsupportedOperatorsError(lines)


def _float_converter(float_dtype: str | None):
    """Known float32 arrays -> `float_dtype` (identity when None)."""
    if float_dtype in (None, "float32"):
        return lambda a: a
    if float_dtype == "bfloat16":
        import ml_dtypes

        target = np.dtype(ml_dtypes.bfloat16)
    else:
        target = np.dtype(float_dtype)
    return lambda a: a.astype(target) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a


def _convert(node: Any, env: dict[str, Any], opset: int, float_dtype: str | None = None, convert=None) -> None:
    ctx = NodeContext(node, [env[name] if name else None for name in node.input], opset)
    ctx.float_dtype = None if float_dtype == "float32" else float_dtype
    try:
        outputs = CONVERTERS[node.op_type].convert(ctx)
    except OnnxImportError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, NotImplementedError) as exc:
        raise OnnxImportError(f"node {shown(node.name or node.op_type)} ({node.op_type}): "
                              f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    names = [n for n in node.output]
    for k, name in enumerate(names):
        if not name:
            continue
        if k >= len(outputs) or outputs[k] is None:
            raise OnnxImportError(f"node {shown(node.name or node.op_type)} ({node.op_type}): output {k} "
                                  f"({shown(name)}) is not supported")
        value = outputs[k]
        if isinstance(value, Tensor) and value.size == 0 and not value.is_graph_input():
            # an empty tensor has no values to compute: it is known
            value = np.empty(value.shape, dtype=value_dtype(value.dtype))
        if isinstance(value, Tensor) and not value.is_graph_input() and value.storage is None:
            value.name = sanitize(name)
        env[name] = convert(value) if convert is not None else value


def count_op_types(model: Any) -> Counter:
    return Counter(n.op_type for n in model.graph.node)
