"""Operators that rearrange elements without changing them: reshape, flatten, squeeze,
unsqueeze, transpose/permute, expand/broadcast_to.

The bijective ones (reshape, flatten, squeeze, unsqueeze) give their Task the inverse
map (input index → output index) so epilogue fusion can store through them; the
auto-detection in Task covers transposes.
"""
from __future__ import annotations

from typing import Sequence

from hidet_framework.compute import InverseMap, compute, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir.expr import const, var

from .common import (
    OperatorAttributeError, describe, load, make_operator, normalize_axes, normalize_axis, ravel,
    require_tensor, unravel,
)
from .elementwise import broadcast_indices


def _ints(op: str, values, what: str) -> list[int]:
    if isinstance(values, int) and not isinstance(values, bool):
        return [values]
    out = list(values)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out):
        raise TypeError(f"{op}: {what} must be ints, got {values!r}")
    return out


def _size(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _regroup(op: str, x: Tensor, shape: Sequence[int], attributes: dict) -> Tensor:
    """``x`` with its row-major elements viewed as `shape` (same size)."""
    node = tensor_input("x", x.dtype, x.shape)
    out = compute("y", shape, lambda *i: load(node, unravel(ravel(i, shape), x.shape)))
    j = tuple(var(f"j{d}") for d in range(len(x.shape)))
    inverse = InverseMap(j, tuple(unravel(ravel(j, x.shape), shape)))
    return make_operator(op, [x], [node], [out], attributes, {node: inverse})[0]


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` viewed as `shape` in row-major order; one extent may be -1 (inferred)."""
    x = require_tensor("reshape", x)
    shape = _ints("reshape", shape, "shape")
    unknown = [d for d, s in enumerate(shape) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in shape):
        raise OperatorAttributeError(f"reshape: shape {shape} may hold one -1 and otherwise non-negative extents")
    if unknown:
        known = _size([s for s in shape if s != -1])
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot reshape {describe(x)} ({x.size} elements) to {shape}")
        shape[unknown[0]] = x.size // known
    if _size(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {describe(x)} ({x.size} elements) to {shape} "
                         f"({_size(shape)} elements)")
    return _regroup("reshape", x, shape, {"shape": tuple(shape)})


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dimensions `start_dim`..`end_dim` (inclusive) merged into one (torch.flatten)."""
    x = require_tensor("flatten", x)
    if x.rank == 0:
        return _regroup("flatten", x, [1], {"start_dim": start_dim, "end_dim": end_dim})
    s = normalize_axis("flatten", start_dim, x.rank, "start_dim")
    e = normalize_axis("flatten", end_dim, x.rank, "end_dim")
    if s > e:
        raise OperatorAttributeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} "
                                     f"for a tensor of rank {x.rank}")
    shape = list(x.shape[:s]) + [_size(x.shape[s:e + 1])] + list(x.shape[e + 1:])
    return _regroup("flatten", x, shape, {"start_dim": s, "end_dim": e})


def squeeze(x: Tensor, axes: int | Sequence[int] | None = None) -> Tensor:
    """``x`` without the extent-1 dimensions `axes` (all extent-1 ones when None)."""
    x = require_tensor("squeeze", x)
    if axes is None:
        drop = [d for d, s in enumerate(x.shape) if s == 1]
    else:
        drop = normalize_axes("squeeze", _ints("squeeze", axes, "axes"), x.rank)
        bad = [d for d in drop if x.shape[d] != 1]
        if bad:
            raise OperatorAttributeError(f"squeeze: axis {bad[0]} of {describe(x)} has extent "
                                         f"{x.shape[bad[0]]}, not 1")
    keep = [d for d in range(x.rank) if d not in drop]
    node = tensor_input("x", x.dtype, x.shape)

    def element(*i):
        it = iter(i)
        return load(node, [const(0) if d in drop else next(it) for d in range(x.rank)])

    out = compute("y", [x.shape[d] for d in keep], element)
    j = tuple(var(f"j{d}") for d in range(x.rank))
    inverse = InverseMap(j, tuple(j[d] for d in keep))
    return make_operator("squeeze", [x], [node], [out], {"axes": tuple(drop)}, {node: inverse})[0]


def unsqueeze(x: Tensor, axes: int | Sequence[int]) -> Tensor:
    """``x`` with new extent-1 dimensions at `axes` (positions in the result)."""
    x = require_tensor("unsqueeze", x)
    rank = x.rank + len(_ints("unsqueeze", axes, "axes"))
    new = sorted(normalize_axes("unsqueeze", _ints("unsqueeze", axes, "axes"), rank))
    shape, it = [], iter(x.shape)
    for d in range(rank):
        shape.append(1 if d in new else next(it))
    kept = [d for d in range(rank) if d not in new]
    node = tensor_input("x", x.dtype, x.shape)
    out = compute("y", shape, lambda *i: load(node, [i[d] for d in kept]))
    j = tuple(var(f"j{d}") for d in range(x.rank))
    it = iter(j)
    inverse = InverseMap(j, tuple(const(0) if d in new else next(it) for d in range(rank)))
    return make_operator("unsqueeze", [x], [node], [out], {"axes": tuple(new)}, {node: inverse})[0]


def transpose(x: Tensor, perm: Sequence[int] | None = None) -> Tensor:
    """Dimensions permuted: result dimension d is ``x``'s dimension ``perm[d]``
    (reversed when None, like numpy and ONNX)."""
    x = require_tensor("transpose", x)
    perm = list(range(x.rank))[::-1] if perm is None else _ints("transpose", perm, "perm")
    valid = len(perm) == x.rank and sorted(p + x.rank if p < 0 else p for p in perm) == list(range(x.rank))
    if not valid:
        raise OperatorAttributeError(f"transpose: perm {perm} is not a permutation of the {x.rank} "
                                     f"dimensions of {describe(x)} (each of 0..{x.rank - 1} exactly once)")
    perm = [p + x.rank if p < 0 else p for p in perm]
    node = tensor_input("x", x.dtype, x.shape)

    def element(*i):
        index = [None] * x.rank
        for d, p in enumerate(perm):
            index[p] = i[d]
        return load(node, index)

    out = compute("y", [x.shape[p] for p in perm], element)
    return make_operator("transpose", [x], [node], [out], {"perm": tuple(perm)})[0]


def permute(x: Tensor, dims: Sequence[int]) -> Tensor:
    """torch's name for `transpose` with an explicit permutation."""
    return transpose(x, dims)


def _broadcast(op: str, x: Tensor, shape: Sequence[int]) -> Tensor:
    node = tensor_input("x", x.dtype, x.shape)
    out = compute("y", shape, lambda *i: load(node, broadcast_indices(i, x.shape, shape)))
    return make_operator(op, [x], [node], [out], {"shape": tuple(shape)})[0]


def expand(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast with `shape` in both directions (ONNX Expand); -1 keeps
    ``x``'s extent (torch's expand)."""
    x = require_tensor("expand", x)
    shape = _ints("expand", shape, "shape")
    rank = max(len(shape), x.rank)
    padded_x = (1,) * (rank - x.rank) + tuple(x.shape)
    padded = [1] * (rank - len(shape)) + shape
    out = []
    for d, (a, b) in enumerate(zip(padded_x, padded)):
        if b == -1:
            b = a
        if b < 0 or (a != b and a != 1 and b != 1):
            raise ShapeError(f"expand: cannot broadcast {describe(x)} to {shape}")
        out.append(a if b == 1 else b)
    return _broadcast("expand", x, out)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to exactly `shape` (numpy broadcast_to)."""
    x = require_tensor("broadcast_to", x)
    shape = _ints("broadcast_to", shape, "shape")
    if len(shape) < x.rank or any(
            a != b and a != 1 for a, b in zip(x.shape, shape[len(shape) - x.rank:])) or any(s < 0 for s in shape):
        raise ShapeError(f"broadcast_to: cannot broadcast {describe(x)} to {shape}")
    return _broadcast("broadcast_to", x, shape)


OPERATORS = {
    "reshape": reshape, "flatten": flatten, "squeeze": squeeze, "unsqueeze": unsqueeze,
    "transpose": transpose, "permute": permute, "expand": expand, "broadcast_to": broadcast_to,
}
