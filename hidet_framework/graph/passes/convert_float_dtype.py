"""Half-precision models: a graph computing in float32 rebuilt to compute in float16
or bfloat16 (``hf.compile(graph, dtype="float16")``).

What changes:

- float32 graph inputs become inputs of the new type (the compiled graph is called
  with float16 / bfloat16 arrays: inputs are never converted silently at call time);
- float32 constants (weights) are converted once, here (round to nearest even; finite
  values beyond float16's range, such as a mask's float32 minimum, saturate at
  +-65504 rather than become infinities);
- every operator touched by the conversion gets its task retyped (`retype_task`): its
  converted inputs are read as float32 values, everything inside the task (reductions,
  intermediate tensors, the statistics of softmax and the norms) stays float32, and
  float32 outputs are rounded once to the new type. Templates choose kernels by the
  task's input and output types (half-precision tensor-core matmuls accumulating in
  float32; ``hidet_plugin_reduce``'s rows with float32 accumulators,
  ``accumulator_dtype``), and fusion grafts the retyped bodies, conversions included;
- an attribute naming the type ``float32`` (``cast(x, dtype="float32")``) names the
  new type, so a cast to float inside the model stays in the model's float type.

What does not: integer and boolean tensors (token ids, indices, shapes, masks),
float64 tensors, and operators none of whose inputs or outputs is float32 (shared with
the input graph).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hidet_framework.compute.definitions import ComputeRewriter, GridCompute, TensorNode, tensor_input
from hidet_framework.compute.task import Task
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.expr import Cast, Expr, TensorElement, cast
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.types import TensorType
from hidet_framework.graph.flow_graph import FlowGraph
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.tensor import Operator, Tensor, constant, symbol

HALF_TYPES = ("float16", "bfloat16")

__all__ = ["HALF_TYPES", "DtypeConversionError", "convert_float_dtype", "float32_to_bfloat16_bits"]


class DtypeConversionError(ValueError):
    """The graph cannot be converted to the requested float type."""


def float32_to_bfloat16_bits(array: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even; NaN
    stays a (quiet) NaN, infinities stay infinities."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    out = np.where(nan, np.uint16(0x7FC0) | ((bits >> 16).astype(np.uint16) & np.uint16(0x8000)), rounded)
    return out.reshape(np.shape(array))  # ascontiguousarray made a 0-d array 1-d


def _convert_constant(t: Tensor, dtype: str) -> Tensor:
    storage = np.asarray(t.storage)
    if dtype == "bfloat16":
        return constant(float32_to_bfloat16_bits(storage), dtype="bfloat16", name=t.name)
    # finite values beyond float16's range (a mask's float32 minimum) saturate at the
    # largest finite float16 instead of becoming infinities (0 * -inf would be NaN)
    limit = float(np.finfo(np.float16).max)
    clipped = np.where(np.isfinite(storage), np.clip(storage, -limit, limit), storage)
    return constant(clipped.astype(np.float16), name=t.name)


def _convert_attribute(value: Any, dtype: str) -> Any:
    from hidet_framework.ir.dtypes import DataType

    if isinstance(value, DataType) and value.name == "float32":
        return data_type(dtype)
    if isinstance(value, str) and value == "float32":
        return dtype
    return value


class _Retype(ComputeRewriter):
    """Reads of retyped inputs become float32 values of the new inputs; reads of
    computed tensors read their rebuilt copies."""

    def __init__(self, inputs: dict, computed: dict) -> None:
        super().__init__()
        self.inputs, self.computed = inputs, computed

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        indices = self.visit_seq(e.indices)
        if e.base in self.inputs:
            return cast(TensorElement(self.inputs[e.base], indices), dtypes.float32)
        if e.base in self.computed:
            return TensorElement(self.computed[e.base], indices)
        return self._rebuild(e, indices=indices)


def _output_value(value: Expr, dtype: Any) -> Expr:
    """``cast(value, dtype)``, without the round trip when `value` is a float32 read of
    a `dtype` element (a reshape or transpose moves half floats untouched)."""
    if isinstance(value, Cast) and value.dtype is dtypes.float32 and infer_type(value.expr) is dtype:
        return value.expr
    return cast(value, dtype)


def retype_task(task: Task, changed: Sequence[bool], dtype: str) -> Task:
    """`task` over inputs where ``changed[k]`` (float32 -> `dtype`), computing in float32
    inside (every read of a changed input is converted to float32 first: accumulation,
    statistics and intermediate tensors stay float32) and rounding float32 outputs
    once to `dtype`. Attributes naming float32 name `dtype`."""
    half = data_type(dtype)
    inputs = {old: tensor_input(old.name, half, old.shape) for old, c in zip(task.inputs, changed) if c}
    computed: dict = {}
    rewriter = _Retype(inputs, computed)
    for t in task.tensors():
        if t.definition is None:
            continue
        value = rewriter.visit(t.definition.value)
        t_type = t.type
        if t in task.outputs and t.dtype is dtypes.float32:
            value, t_type = _output_value(value, half), TensorType(half, t.shape)
        computed[t] = TensorNode(t.hint, t_type, GridCompute(t.definition.axes, value))
    new_inputs = [inputs.get(t, t) for t in task.inputs]
    inverse_maps = {inputs.get(k, computed.get(k, k)): v for k, v in task.inverse_maps.items()}
    attributes = {k: _convert_attribute(v, dtype) for k, v in task.attributes.items()}
    return Task(task.name, new_inputs, [computed[t] for t in task.outputs], attributes, inverse_maps)


def convert_float_dtype(graph: FlowGraph, dtype: str | None, ctx: GraphPassContext | None = None) -> FlowGraph:
    """`graph` computing in `dtype` ("float16" or "bfloat16") instead of float32 (see
    the module docstring); "float32" or None returns `graph` itself."""
    if dtype in (None, "float32"):
        return graph
    if dtype not in HALF_TYPES:
        raise DtypeConversionError(f"dtype {dtype!r}: expected float32, float16 or bfloat16")
    mapping: dict[int, Tensor] = {}

    def resolve(t: Tensor) -> Tensor:
        if t.uid in mapping:
            return mapping[t.uid]
        if t.is_constant() and t.dtype.name == "float32":
            mapping[t.uid] = _convert_constant(t, dtype)
            return mapping[t.uid]
        return t

    inputs = []
    for t in graph.inputs:
        new = symbol(t.shape, dtype, name=t.name) if t.dtype.name == "float32" else t
        mapping[t.uid] = new
        inputs.append(new)
    rebuilt = 0
    for op in graph.nodes:
        new_inputs = [resolve(t) for t in op.inputs]
        changed = [a.dtype is not b.dtype for a, b in zip(new_inputs, op.inputs)]
        if all(a is b for a, b in zip(new_inputs, op.inputs)) and \
                not any(t.dtype.name == "float32" for t in op.outputs):
            continue  # integer-only work (shapes, indices, masks) stays as it was
        attributes = {k: _convert_attribute(v, dtype) for k, v in op.attributes.items()}
        new_op = Operator(op.name, new_inputs, retype_task(op.task, changed, dtype), attributes)
        for old, new in zip(op.outputs, new_op.outputs):
            new.name = old.name
            mapping[old.uid] = new
        rebuilt += 1
    if ctx is not None:
        ctx.record("convert_float_dtype", rebuilt=rebuilt)
    return FlowGraph(inputs, [resolve(t) for t in graph.outputs])
