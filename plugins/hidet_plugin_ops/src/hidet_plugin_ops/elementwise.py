"""The one builder behind every elementwise operator: numpy broadcasting, numpy-like
dtype promotion with "weak" Python scalars, and a single compute definition.

Dtype rules (numpy's NEP 50, with this framework's defaults):

- tensors promote like ``np.result_type`` (int8 + uint8 -> int16); bfloat16 ranks
  with float16, and the two together give float32;
- a Python scalar is weak: it takes the tensors' dtype when its kind (bool < int <
  float) is not higher (``x_f16 + 1.0`` is float16, ``x_u8 + 3`` is uint8), and
  otherwise the default of its kind: int64 for ints (numpy's), float32 for floats
  (the framework's default float, as in ``hf.constant``);
- a Python int that does not fit an integer result dtype is an error, as in numpy.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from hidet_framework.compute import compute, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, const
from hidet_framework.ir.type_infer import infer_type

from .common import as_dtype, describe, load, make_operator

Operand = Any  # a Tensor, or a Python bool/int/float (numpy scalars are taken as Python ones)

_KIND_RANK = {"bool": 0, "int": 1, "uint": 1, "float": 2}
_HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


def python_scalar(value: Any) -> Any:
    if isinstance(value, np.generic) and value.shape == ():
        return value.item()
    return value


def _scalar_kind(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return 1
    if isinstance(value, float):
        return 2
    raise TypeError(f"an operand must be a Tensor or a Python bool/int/float, got {type(value).__name__}")


def promote_tensor_dtypes(types: Sequence[DataType]) -> DataType:
    """numpy's promotion of array dtypes, extended to bfloat16."""
    result = types[0]
    for t in types[1:]:
        if result is t:
            continue
        if result is dtypes.bfloat16 or t is dtypes.bfloat16:
            other = t if result is dtypes.bfloat16 else result
            if other is dtypes.float16:
                result = dtypes.float32
            elif other.is_float():
                result = other  # float32 / float64 hold every bfloat16
            else:
                result = dtypes.bfloat16
            continue
        result = dtypes.data_type(np.result_type(np.dtype(result.numpy_name), np.dtype(t.numpy_name)).name)
    return result


def result_dtype(op: str, operands: Sequence[Operand]) -> DataType:
    """The dtype numpy (NEP 50) gives `operands` together, with weak Python scalars."""
    tensors = [x.dtype for x in operands if isinstance(x, Tensor)]
    if not tensors:
        raise TypeError(f"{op}: needs at least one Tensor operand, got only Python scalars {list(operands)}")
    dtype = promote_tensor_dtypes(tensors)
    for x in operands:
        if isinstance(x, Tensor):
            continue
        kind = _scalar_kind(x)
        if kind > _KIND_RANK[dtype.kind]:
            dtype = dtypes.int64 if kind == 1 else dtypes.float32
    return dtype


def weak_scalars_dtype(op: str, values: Sequence[Any]) -> DataType:
    """The dtype of Python scalars alone: the default of their highest kind."""
    kind = max(_scalar_kind(python_scalar(v)) for v in values)
    return (dtypes.boolean, dtypes.int64, dtypes.float32)[kind]


def scalar_constant(op: str, value: Any, dtype: DataType) -> Expr:
    """Python scalar `value` as a constant of `dtype`, refusing ints that do not fit."""
    if isinstance(value, int) and not isinstance(value, bool) and dtype.is_integer():
        if not dtype.min_value() <= value <= dtype.max_value():
            raise OverflowError(f"{op}: the Python int {value} does not fit the operation's dtype {dtype.name}")
    return const(value, dtype)


def broadcast_shapes(op: str, tensors: Sequence[Tensor]) -> tuple[int, ...]:
    """numpy broadcasting of the tensors' shapes; a ShapeError names both sides."""
    shape: tuple[int, ...] = ()
    first: Tensor | None = None
    for t in tensors:
        if first is None:
            shape, first = tuple(t.shape), t
            continue
        rank = max(len(shape), len(t.shape))
        a = (1,) * (rank - len(shape)) + shape
        b = (1,) * (rank - len(t.shape)) + tuple(t.shape)
        out = []
        for x, y in zip(a, b):
            if x != y and x != 1 and y != 1:
                left = describe(first) if len(tensors) == 2 else f"{first.dtype.short}{list(shape)}"
                raise ShapeError(f"{op}: cannot broadcast {left} with {describe(t)}")
            out.append(y if x == 1 else x)
        shape = tuple(out)
    return shape


def broadcast_indices(axes: Sequence[Expr], in_shape: Sequence[int], out_shape: Sequence[int]) -> list:
    """Indices into a tensor of `in_shape` for output position `axes` (numpy rules:
    leading dimensions dropped, extent-1 dimensions read at 0)."""
    lead = len(out_shape) - len(in_shape)
    return [const(0) if extent == 1 and out_shape[lead + d] != 1 else axes[lead + d]
            for d, extent in enumerate(in_shape)]


def elementwise(name: str, operands: Sequence[Operand], fn: Callable[..., Expr], *,
                operand_dtype: DataType | None = None, out_dtype: DataType | None = None,
                attributes: dict | None = None) -> Tensor:
    """One elementwise operator over broadcast `operands`.

    :param fn: builds the element value from one scalar expression per operand.
    :param operand_dtype: every operand is converted to this dtype before `fn` sees it
        (Python scalars become constants of it); None leaves tensors as they are.
    :param out_dtype: the output dtype; by default the dtype of `fn`'s value.
    """
    operands = [python_scalar(x) for x in operands]
    for x in operands:
        if not isinstance(x, Tensor):
            _scalar_kind(x)  # raises a TypeError naming the bad operand
    tensors = [x for x in operands if isinstance(x, Tensor)]
    shape = broadcast_shapes(name, tensors)
    # One task input per distinct tensor: add(x, x) reads one buffer.
    unique: list[Tensor] = []
    for t in tensors:
        if all(t is not u for u in unique):
            unique.append(t)
    nodes = [tensor_input(f"x{k}", t.dtype, t.shape) for k, t in enumerate(unique)]
    node_of = {id(t): n for t, n in zip(unique, nodes)}

    def element(*axes: Expr) -> Expr:
        values = []
        for x in operands:
            if isinstance(x, Tensor):
                v = load(node_of[id(x)], broadcast_indices(axes, x.shape, shape))
                values.append(as_dtype(v, operand_dtype) if operand_dtype is not None else v)
            else:
                values.append(scalar_constant(name, x, operand_dtype or result_dtype(name, operands)))
        value = fn(*values)
        return as_dtype(value, out_dtype) if out_dtype is not None else value

    out = compute("y", shape, element)
    return make_operator(name, unique, nodes, [out], attributes)[0]


def value_dtype(e: Expr) -> DataType:
    return infer_type(e)


def compute_float_dtype(dtype: DataType) -> DataType:
    """Where a float result of `dtype` is computed: half floats in float32 (one
    rounding at the end), float64 in float64, float32 (and integers) in float32."""
    if dtype is dtypes.float64:
        return dtypes.float64
    return dtypes.float32


def float_result_dtype(dtype: DataType) -> DataType:
    """The dtype of a float-valued function (exp, sqrt...) of `dtype`: floats keep
    theirs; bool and integers give float32."""
    return dtype if dtype.is_float() else dtypes.float32


def is_half(dtype: DataType) -> bool:
    return dtype in _HALF_FLOATS
