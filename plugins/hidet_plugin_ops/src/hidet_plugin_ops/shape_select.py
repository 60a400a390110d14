"""Operators that select, join or extend elements: concat, split, slice, gather, pad."""
from __future__ import annotations

from typing import Any, Sequence

from hidet_framework.compute import compute, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import BinaryOp, Expr, const, if_then_else, logical_and, maximum, minimum

from .common import (
    OperatorAttributeError, as_dtype, describe, load, make_operator, normalize_axes, normalize_axis,
    require_tensor,
)
from .elementwise import promote_tensor_dtypes


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along `axis`; other extents must agree; dtypes promote
    like numpy's concatenate."""
    tensors = [require_tensor("concat", t, f"tensors[{k}]") for k, t in enumerate(tensors)]
    if not tensors:
        raise ValueError("concat: needs at least one tensor")
    first = tensors[0]
    axis = normalize_axis("concat", axis, first.rank)
    for t in tensors[1:]:
        if t.rank != first.rank or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != axis):
            raise ShapeError(f"concat: cannot join {describe(first)} with {describe(t)} along axis {axis}: "
                             f"the other extents differ")
    dtype = promote_tensor_dtypes([t.dtype for t in tensors])
    nodes = [tensor_input(f"x{k}", t.dtype, t.shape) for k, t in enumerate(tensors)]
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = list(first.shape)
    shape[axis] = offsets[-1]
    parts = [(node, offsets[k]) for k, node in enumerate(nodes) if tensors[k].shape[axis] > 0]

    def element(*i: Expr) -> Expr:
        def read(node, offset):
            index = list(i)
            index[axis] = i[axis] - offset if offset else i[axis]
            return as_dtype(load(node, index), dtype)

        value = read(*parts[-1])
        for node, offset in reversed(parts[:-1]):
            end = offset + node.shape[axis]
            value = if_then_else(BinaryOp("lt", i[axis], const(end)), read(node, offset), value)
        return value

    if not parts:  # every input is empty along axis: an empty result
        parts = [(nodes[0], 0)]
    out = compute("y", shape, element)
    return make_operator("concat", tensors, nodes, [out], {"axis": axis})[0]


def split(x: Tensor, sizes: Sequence[int] | None = None, axis: int = 0,
          num_outputs: int | None = None) -> tuple[Tensor, ...]:
    """``x`` cut along `axis` into pieces of `sizes`, or into `num_outputs` pieces of
    equal size (the last one smaller when it does not divide, like ONNX)."""
    x = require_tensor("split", x)
    axis = normalize_axis("split", axis, x.rank)
    extent = x.shape[axis]
    if (sizes is None) == (num_outputs is None):
        raise OperatorAttributeError("split: give exactly one of sizes and num_outputs")
    if sizes is None:
        if not isinstance(num_outputs, int) or num_outputs < 1:
            raise OperatorAttributeError(f"split: num_outputs must be a positive int, got {num_outputs!r}")
        step = -(-extent // num_outputs)
        sizes = [min(step, max(0, extent - k * step)) for k in range(num_outputs)]
    sizes = list(sizes)
    if any(not isinstance(s, int) or s < 0 for s in sizes) or sum(sizes) != extent:
        raise OperatorAttributeError(f"split: sizes {sizes} must be non-negative and add up to the extent "
                                     f"{extent} of axis {axis} of {describe(x)}")
    node = tensor_input("x", x.dtype, x.shape)
    outs, offset = [], 0
    for k, size in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = size

        def element(*i: Expr, offset: int = offset) -> Expr:
            index = list(i)
            index[axis] = i[axis] + offset if offset else i[axis]
            return load(node, index)

        outs.append(compute(f"y{k}", shape, element))
        offset += size
    return make_operator("split", [x], [node], outs, {"axis": axis, "sizes": tuple(sizes)})


def _slice_range(n: int, start: int, end: int, step: int) -> tuple[int, int]:
    """(first index, count) of ONNX Slice on an extent `n` (clamped like ONNX)."""
    if start < 0:
        start += n
    if end < 0:
        end += n
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    count = max(0, -(-(end - start) // step))
    return start, count


def slice_(x: Tensor, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None = None,
           steps: Sequence[int] | None = None) -> Tensor:
    """ONNX Slice: along each of `axes` (default 0..len(starts)-1) take
    ``start, start+step, ...`` up to `end` (exclusive); negative starts/ends count
    from the end, out-of-range ones are clamped, negative steps walk backwards."""
    x = require_tensor("slice", x)
    starts, ends = list(starts), list(ends)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OperatorAttributeError(f"slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                                     f"must have the same length")
    axes = normalize_axes("slice", axes, x.rank)
    if any(s == 0 for s in steps):
        raise OperatorAttributeError(f"slice: steps {steps} must be non-zero")
    first, step_of, shape = [0] * x.rank, [1] * x.rank, list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        first[a], shape[a] = _slice_range(x.shape[a], int(s), int(e), int(st))
        step_of[a] = int(st)
    node = tensor_input("x", x.dtype, x.shape)

    def element(*i: Expr) -> Expr:
        index = []
        for d in range(x.rank):
            e = i[d] * step_of[d] if step_of[d] != 1 else i[d]
            index.append(e + first[d] if first[d] else e)
        return load(node, index)

    out = compute("y", shape, element)
    attributes = {"starts": tuple(first), "steps": tuple(step_of), "shape": tuple(shape)}
    return make_operator("slice", [x], [node], [out], attributes)[0]


def gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
    """``x`` indexed along `axis` by an int32/int64 tensor (ONNX Gather, np.take):
    the result is ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``; negative
    indices count from the end."""
    x = require_tensor("gather", x)
    indices = require_tensor("gather", indices, "indices")
    if indices.dtype not in (dtypes.int32, dtypes.int64):
        raise TypeError(f"gather: indices must be int32 or int64, got {indices.dtype.name}")
    axis = normalize_axis("gather", axis, x.rank)
    n = x.shape[axis]
    xn = tensor_input("x", x.dtype, x.shape)
    idx = tensor_input("indices", indices.dtype, indices.shape)
    r = indices.rank
    shape = list(x.shape[:axis]) + list(indices.shape) + list(x.shape[axis + 1:])

    def element(*i: Expr) -> Expr:
        v = load(idx, i[axis:axis + r])
        v = if_then_else(BinaryOp("lt", v, const(0, indices.dtype)), v + const(n, indices.dtype), v)
        return load(xn, list(i[:axis]) + [as_dtype(v, dtypes.int32)] + list(i[axis + r:]))

    out = compute("y", shape, element)
    return make_operator("gather", [x, indices], [xn, idx], [out], {"axis": axis})[0]


def _pad_pairs(x: Tensor, pads: Any) -> list[tuple[int, int]]:
    pads = list(pads)
    if pads and all(isinstance(p, (tuple, list)) for p in pads):
        pairs = [tuple(p) for p in pads]
        if len(pairs) != x.rank or any(len(p) != 2 for p in pairs):
            raise OperatorAttributeError(f"pad: pads {pads} must give one (before, after) pair per "
                                         f"dimension of {describe(x)}")
    elif len(pads) == 2 * x.rank:  # ONNX order: all befores, then all afters
        pairs = list(zip(pads[:x.rank], pads[x.rank:]))
    else:
        raise OperatorAttributeError(f"pad: pads {pads} must be {x.rank} (before, after) pairs or "
                                     f"{2 * x.rank} ints in ONNX order for {describe(x)}")
    for d, (b, a) in enumerate(pairs):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (b, a)):
            raise TypeError(f"pad: pads must be ints, got {pairs[d]} for axis {d}")
        if b < 0 or a < 0:
            raise OperatorAttributeError(f"pad: negative padding {pairs[d]} on axis {d}; pad only adds "
                                         f"elements (use slice to remove them)")
    return pairs


def pad(x: Tensor, pads: Any, mode: str = "constant", value: float | int | bool = 0) -> Tensor:
    """``x`` padded: `pads` is one ``(before, after)`` pair per dimension (numpy's
    pad_width) or the flat ONNX list ``[b0, b1, ..., a0, a1, ...]``. Modes:
    ``constant`` (fill with `value`), ``reflect`` (mirror without the edge, as numpy),
    ``edge`` (repeat the edge)."""
    x = require_tensor("pad", x)
    if mode not in ("constant", "reflect", "edge"):
        raise OperatorAttributeError(f"pad: mode must be 'constant', 'reflect' or 'edge', got {mode!r}")
    pairs = _pad_pairs(x, pads)
    for d, (b, a) in enumerate(pairs):
        n = x.shape[d]
        if mode == "reflect" and (b or a) and (b >= n or a >= n):
            raise OperatorAttributeError(f"pad: reflect padding {pairs[d]} on axis {d} needs pads smaller "
                                         f"than the extent {n}")
        if mode == "edge" and (b or a) and n == 0:
            raise OperatorAttributeError(f"pad: edge padding of the empty axis {d}")
    node = tensor_input("x", x.dtype, x.shape)
    shape = [n + b + a for n, (b, a) in zip(x.shape, pairs)]

    def element(*i: Expr) -> Expr:
        index, inside = [], []
        for d, (b, _) in enumerate(pairs):
            n = x.shape[d]
            j = i[d] - b if b else i[d]
            if mode == "constant" or not any(pairs[d]):
                if any(pairs[d]):
                    inside.append(logical_and(BinaryOp("le", const(0), j), BinaryOp("lt", j, const(n))))
            elif mode == "edge":
                j = minimum(maximum(j, const(0)), const(n - 1))
            else:  # reflect: -k -> k, n-1+k -> n-1-k
                j = if_then_else(BinaryOp("lt", j, const(0)), -j, j)
                j = if_then_else(BinaryOp("lt", j, const(n)), j, const(2 * (n - 1)) - j)
            index.append(j)
        if not inside:
            return load(node, index)
        # The select is lazy (C's ?:), so the read happens only inside x.
        return if_then_else(logical_and(*inside), load(node, index), const(value, x.dtype))

    out = compute("y", shape, element)
    attributes = {"pads": tuple(pairs), "mode": mode, "value": value}
    return make_operator("pad", [x], [node], [out], attributes)[0]


OPERATORS = {"concat": concat, "split": split, "slice": slice_, "gather": gather, "pad": pad}
