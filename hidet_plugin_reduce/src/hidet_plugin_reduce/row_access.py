"""How a template reaches the elements of an operator's tensors from row coordinates.

Templates see an input as rows: row ``o`` (0 <= o < outer), position ``r`` along the
row (0 <= r < extent) and, for a reduction over non-innermost axes, column ``i``
(0 <= i < inner). They still read and write the real rank-N tensors, one element at a
time (``x[n, c, h, w]``, never a pointer): that is what lets the fusion engine graft
producers onto the loads and consumers onto the stores. `RowAccess` turns row
coordinates into those full-rank indices, from the attributes the operator recorded
(``common.row_form``); the helpers return IR expressions and statements that script
kernels call while they are traced.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, TensorElement, cast, const, convert
from hidet_framework.ir.stmt import BufferStoreStmt
from hidet_framework.ir.type_infer import infer_type

# operator name -> template family
FAMILIES = {
    **{f"reduce_{k}": "reduce" for k in ("sum", "mean", "max", "min", "prod", "l2", "sum_square")},
    "argmax": "arg", "argmin": "arg", "softmax": "softmax", "log_softmax": "softmax",
    "layer_norm": "norm", "rms_norm": "norm", "instance_norm": "norm", "group_norm": "norm",
    "cumsum": "scan",
}


def unravel(flat: Any, shape: Sequence[int]) -> list[Expr]:
    """Row-major indices of `flat` in `shape` (extent-1 dimensions give 0)."""
    flat = convert(flat)
    out: list[Expr] = []
    for d, extent in enumerate(shape):
        if extent == 1:
            out.append(const(0, "int32"))
            continue
        inner = 1
        for s in shape[d + 1:]:
            inner *= int(s)
        outer = 1
        for s in shape[:d]:
            outer *= int(s)
        e = flat / inner if inner != 1 else flat
        out.append(e % extent if outer != 1 else e)
    return out


def widen_to(value: Expr, dtype: Any) -> Expr:
    return value if infer_type(value) is dtype else cast(value, dtype)


class RowAccess:
    """Row coordinates → element accesses of the operator's input and output."""

    def __init__(self, operator: str, attributes: Mapping[str, Any]) -> None:
        self.operator = operator
        self.family = FAMILIES[operator]
        self.kind = attributes["kind"]
        self.shape = tuple(int(s) for s in attributes["shape"])
        self.axes = tuple(int(a) for a in attributes["axes"])
        self.outer, self.extent, self.inner = (int(attributes[k]) for k in ("outer", "extent", "inner"))
        self.keepdims = bool(attributes.get("keepdims", False))
        a, b = self.axes[0], self.axes[-1] + 1
        self.outer_shape, self.red_shape, self.inner_shape = self.shape[:a], self.shape[a:b], self.shape[b:]
        self.grouped = operator in ("group_norm", "instance_norm")
        if self.grouped:
            self.groups = int(attributes["groups"])
            self.per_group = self.shape[1] // self.groups
            self.spatial = self.shape[2:]
        self.out_shape = (tuple(1 if d in self.axes else s for d, s in enumerate(self.shape)) if self.keepdims
                          else tuple(s for d, s in enumerate(self.shape) if d not in self.axes))

    # ------------------------------------------------------------ indices
    def x_index(self, o: Any, r: Any, i: Any = 0) -> tuple:
        o, r, i = (const(v, "int32") if isinstance(v, int) else v for v in (o, r, i))
        if self.grouped:
            n, g = (o / self.groups, o % self.groups) if self.groups > 1 else (o, const(0, "int32"))
            spatial_count = 1
            for s in self.spatial:
                spatial_count *= int(s)
            c = g * self.per_group + r / spatial_count if self.per_group > 1 else g
            return (convert(n), convert(c), *unravel(r % spatial_count if self.per_group > 1 else r, self.spatial))
        return (*unravel(o, self.outer_shape), *unravel(r, self.red_shape), *unravel(i, self.inner_shape))

    def channel(self, o: Any, r: Any) -> Expr:
        """The channel of row `o`, position `r` (group_norm / instance_norm)."""
        return self.x_index(o, r)[1]

    def out_index(self, o: Any, i: Any = 0) -> tuple:
        """The output index of a per-row result (reductions)."""
        o, i = (const(v, "int32") if isinstance(v, int) else v for v in (o, i))
        parts = list(unravel(o, self.outer_shape))
        if self.keepdims:
            parts += [const(0, "int32")] * len(self.red_shape)
        return (*parts, *unravel(i, self.inner_shape))

    # ------------------------------------------------------------ accesses
    def load(self, x: Any, dtype: Any, o: Any, r: Any, i: Any = 0) -> Expr:
        """``x[...]`` at row coordinates, converted to `dtype`."""
        return widen_to(TensorElement(x, self.x_index(o, r, i)), dtype)

    def store(self, y: Any, value: Any, o: Any, r: Any, i: Any = 0) -> BufferStoreStmt:
        """``y[...] = value`` at row coordinates (same shape as x)."""
        return BufferStoreStmt(y, self.x_index(o, r, i), widen_to(convert(value), y.type.dtype))

    def store_row(self, y: Any, value: Any, o: Any, i: Any = 0) -> BufferStoreStmt:
        """``y[...] = value`` for a per-row result (a reduction's output)."""
        return BufferStoreStmt(y, self.out_index(o, i), widen_to(convert(value), y.type.dtype))

    def load_param(self, p: Any, dtype: Any, o: Any, r: Any) -> Expr:
        """A scale or bias element for row `o`, position `r`: per channel for the
        grouped norms, broadcast over the normalized shape for layer/rms norm."""
        shape = tuple(int(s) for s in p.type.shape)
        if self.grouped:
            return widen_to(TensorElement(p, (self.channel(o, r),)), dtype)
        full = unravel(r, self.red_shape)
        tail = full[len(full) - len(shape):] if shape else []
        index = tuple(const(0, "int32") if s == 1 else e for s, e in zip(shape, tail))
        return widen_to(TensorElement(p, index), dtype)


def accumulator_dtype(x_dtype: Any) -> Any:
    """float32 for every float but float64; the integer type itself for integers."""
    if x_dtype.is_float():
        return dtypes.float64 if x_dtype is dtypes.float64 else dtypes.float32
    return x_dtype
