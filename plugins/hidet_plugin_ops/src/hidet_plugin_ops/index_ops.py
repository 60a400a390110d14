"""Indexing and layout operators ONNX models use beyond `shape_select`: tile,
gather_elements, gather_nd, trilu (triangle masks) and resize (nearest and linear
interpolation)."""
from __future__ import annotations

from typing import Any, Sequence

from hidet_framework.compute import compute, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import BinaryOp, Expr, cast, const, if_then_else, maximum, minimum

from .common import OperatorAttributeError, as_dtype, describe, load, make_operator, normalize_axis, require_tensor


def _ints(op: str, values: Any, what: str) -> list[int]:
    out = [values] if isinstance(values, int) else list(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out):
        raise TypeError(f"{op}: {what} must be ints, got {values!r}")
    return out


def _index_tensor(op: str, t: Any) -> Tensor:
    t = require_tensor(op, t, "indices")
    if t.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"{op}: indices must be int32 or int64, got {t.dtype.name}")
    return t


def _wrap(v: Expr, n: int, dtype) -> Expr:
    """A possibly negative index (counting from the end) as an int32 position."""
    v = if_then_else(BinaryOp("lt", v, const(0, dtype)), v + const(n, dtype), v)
    return as_dtype(v, dtypes.int32)


def tile(x: Tensor, repeats: Sequence[int]) -> Tensor:
    """``x`` repeated ``repeats[d]`` times along each dimension d (np.tile with one
    repeat per dimension)."""
    x = require_tensor("tile", x)
    repeats = _ints("tile", repeats, "repeats")
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise OperatorAttributeError(f"tile: repeats {repeats} must be {x.rank} non-negative ints for {describe(x)}")
    node = tensor_input("x", x.dtype, x.shape)
    shape = [n * r for n, r in zip(x.shape, repeats)]
    out = compute("y", shape, lambda *i: load(node, [i[d] % n if r != 1 else i[d]
                                                      for d, (n, r) in enumerate(zip(x.shape, repeats))]))
    return make_operator("tile", [x], [node], [out], {"repeats": tuple(repeats)})[0]


def gather_elements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """``out[i] = x[i with dimension axis replaced by indices[i]]`` (ONNX
    GatherElements, np.take_along_axis); negative indices count from the end."""
    x = require_tensor("gather_elements", x)
    indices = _index_tensor("gather_elements", indices)
    axis = normalize_axis("gather_elements", axis, x.rank)
    if indices.rank != x.rank or any(a > b for d, (a, b) in enumerate(zip(indices.shape, x.shape)) if d != axis):
        raise ShapeError(f"gather_elements: indices {describe(indices)} must have the rank of {describe(x)} and "
                         f"no larger extent on the other axes")
    xn, idx = tensor_input("x", x.dtype, x.shape), tensor_input("indices", indices.dtype, indices.shape)

    def element(*i: Expr) -> Expr:
        position = list(i)
        position[axis] = _wrap(load(idx, i), x.shape[axis], indices.dtype)
        return load(xn, position)

    out = compute("y", list(indices.shape), element)
    return make_operator("gather_elements", [x, indices], [xn, idx], [out], {"axis": axis})[0]


def gather_nd(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    """ONNX GatherND: the last axis of `indices` (k entries) addresses the first k
    dimensions of `x` after the `batch_dims` shared leading ones."""
    x = require_tensor("gather_nd", x)
    indices = _index_tensor("gather_nd", indices)
    b = batch_dims
    if not isinstance(b, int) or b < 0 or b >= min(x.rank, indices.rank):
        raise OperatorAttributeError(f"gather_nd: batch_dims {batch_dims!r} must be in 0..{min(x.rank, indices.rank) - 1}")
    k = indices.shape[-1]
    if k < 1 or b + k > x.rank or tuple(x.shape[:b]) != tuple(indices.shape[:b]):
        raise ShapeError(f"gather_nd: indices {describe(indices)} do not address {describe(x)} "
                         f"with batch_dims={b}")
    shape = list(indices.shape[:-1]) + list(x.shape[b + k:])
    xn, idx = tensor_input("x", x.dtype, x.shape), tensor_input("indices", indices.dtype, indices.shape)
    r = indices.rank - 1  # index dimensions of the result

    def element(*i: Expr) -> Expr:
        head = list(i[:r])
        addressed = [_wrap(load(idx, head + [const(j)]), x.shape[b + j], indices.dtype) for j in range(k)]
        return load(xn, list(i[:b]) + addressed + list(i[r:]))

    out = compute("y", shape, element)
    return make_operator("gather_nd", [x, indices], [xn, idx], [out], {"batch_dims": b})[0]


def trilu(x: Tensor, k: int = 0, upper: bool = True) -> Tensor:
    """The upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two
    dimensions; zeros elsewhere (np.triu / np.tril)."""
    x = require_tensor("trilu", x)
    if x.rank < 2:
        raise ShapeError(f"trilu: needs a tensor of rank >= 2, got {describe(x)}")
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"trilu: k must be an int, got {k!r}")
    node = tensor_input("x", x.dtype, x.shape)
    zero = const(0, x.dtype) if not x.dtype.is_bool() else const(False)

    def element(*i: Expr) -> Expr:
        diagonal = i[-1] - i[-2]
        keep = BinaryOp("le", const(k), diagonal) if upper else BinaryOp("le", diagonal, const(k))
        return if_then_else(keep, load(node, i), zero)

    out = compute("y", list(x.shape), element)
    return make_operator("trilu", [x], [node], [out], {"k": k, "upper": bool(upper)})[0]


COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coordinate(mode: str, i: Expr, n_in: int, n_out: int, scale: float) -> Expr:
    """Where output index `i` lies on the input axis (float32), per ONNX Resize."""
    f = cast(i, dtypes.float32)
    c = lambda v: const(float(v), dtypes.float32)  # noqa: E731
    if mode == "asymmetric":
        return f / c(scale)
    if mode == "align_corners":  # the resized length is n_in * scale, not rounded (ONNX)
        length = n_in * scale
        return c(0.0) if length <= 1 else f * c((n_in - 1) / (length - 1))
    if mode == "pytorch_half_pixel":
        return (f + c(0.5)) / c(scale) - c(0.5) if n_out > 1 else c(0.0)
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = n_in / 2.0 * (1 - adjustment)
        return c(offset) + (f + c(0.5)) / c(scale) - c(0.5)
    return (f + c(0.5)) / c(scale) - c(0.5)  # half_pixel


def _floor_int(v: Expr) -> Expr:
    from .common import math_call
    return cast(math_call("floor", v), dtypes.int32)


def _nearest(v: Expr, mode: str) -> Expr:
    from .common import math_call
    c = lambda x: const(float(x), dtypes.float32)  # noqa: E731
    if mode == "floor":
        r = math_call("floor", v)
    elif mode == "ceil":
        r = math_call("ceil", v)
    elif mode == "round_prefer_ceil":
        r = math_call("floor", v + c(0.5))
    else:  # round_prefer_floor: ties go down
        r = math_call("ceil", v - c(0.5))
    return cast(r, dtypes.int32)


def _clamp(v: Expr, n: int) -> Expr:
    return minimum(maximum(v, const(0)), const(n - 1))


def resize(x: Tensor, shape: Sequence[int], scales: Sequence[float] | None = None, mode: str = "nearest",
           coordinate_transformation_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor") -> Tensor:
    """ONNX Resize to `shape` with `mode` "nearest" or "linear" (n-linear over the
    axes that change); `scales` (default ``out / in``) enter the coordinate mapping."""
    x = require_tensor("resize", x)
    shape = _ints("resize", shape, "shape")
    if len(shape) != x.rank or any(s < 1 for s in shape):
        raise OperatorAttributeError(f"resize: shape {shape} must give {x.rank} positive extents for {describe(x)}")
    scales = [o / i if i else 1.0 for o, i in zip(shape, x.shape)] if scales is None else [float(s) for s in scales]
    if len(scales) != x.rank or any(s <= 0 for s in scales):
        raise OperatorAttributeError(f"resize: scales {scales} must be {x.rank} positive numbers")
    if mode not in ("nearest", "linear"):
        raise OperatorAttributeError(f"resize: mode {mode!r} is not supported (nearest, linear)")
    if coordinate_transformation_mode not in COORDINATE_MODES:
        raise OperatorAttributeError(f"resize: coordinate_transformation_mode {coordinate_transformation_mode!r} "
                                     f"is not supported ({', '.join(COORDINATE_MODES)})")
    if nearest_mode not in NEAREST_MODES:
        raise OperatorAttributeError(f"resize: nearest_mode {nearest_mode!r} is not supported")
    if mode == "linear" and not x.dtype.is_float():
        raise TypeError(f"resize: linear interpolation needs a float tensor, got {describe(x)}")
    node = tensor_input("x", x.dtype, x.shape)
    moving = [d for d in range(x.rank) if not (shape[d] == x.shape[d] and scales[d] == 1.0)]
    cmode = coordinate_transformation_mode

    def element(*i: Expr) -> Expr:
        coords = {d: _source_coordinate(cmode, i[d], x.shape[d], shape[d], scales[d]) for d in moving}
        if mode == "nearest":
            index = [(_clamp(_nearest(coords[d], nearest_mode), x.shape[d]) if d in coords else i[d])
                     for d in range(x.rank)]
            return load(node, index)
        value = None
        # n-linear: 2^len(moving) taps, each weighted by the product of its 1-D weights
        for corner in range(1 << len(moving)):
            index, weight = list(i), None
            for bit, d in enumerate(moving):
                v = maximum(coords[d], const(0.0, dtypes.float32)) if cmode != "asymmetric" else coords[d]
                low = _floor_int(v)
                frac = v - cast(low, dtypes.float32)
                upper = (corner >> bit) & 1
                index[d] = _clamp(low + 1 if upper else low, x.shape[d])
                w = frac if upper else const(1.0, dtypes.float32) - frac
                weight = w if weight is None else weight * w
            term = cast(load(node, index), dtypes.float32) * weight
            value = term if value is None else value + term
        return as_dtype(value, x.dtype)

    out = compute("y", shape, element)
    attributes = {"shape": tuple(shape), "scales": tuple(scales), "mode": mode, "coordinate_transformation_mode": cmode,
                  "nearest_mode": nearest_mode}
    return make_operator("resize", [x], [node], [out], attributes)[0]


OPERATORS = {"tile": tile, "gather_elements": gather_elements, "gather_nd": gather_nd, "trilu": trilu,
             "resize": resize}
