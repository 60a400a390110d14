"""``attention``: scaled dot-product attention as one operator.

    y[b, i, :] = sum_j p[b, i, j] * v[b, j, :],   p[b, i, :] = softmax_j(s[b, i, :])
    s[b, i, j] = scale * sum_d q[b, i, d] * kt[b, d, j]  (+ mask[b, i, j], or
                 where(mask[b, i, j], ., fill) for a boolean mask)

`b` stands for any number of batch axes (batch, heads...). The keys come transposed
(``kt``: ``[..., D, N]``), as the product ``q @ kt`` of a graph reads them, so the
rewrite rule (``rules_attention.py``) hands over the operands it finds without a
transpose of its own. Batch axes broadcast numpy-wise between `q`, `kt` and `v`; the
mask broadcasts onto the scores ``[..., M, N]`` and may not widen them.

``zero_nan`` replaces a NaN probability by 0 (``where(isnan(p), 0, p)``, what
PyTorch's exported attention adds so that a fully masked row gives zeros, not NaN).

Statistics (the row maximum and the sum of exponentials) and the products are
accumulated in float32 for float16/bfloat16/float32 operands (float64 in float64);
the output has the operands' dtype. The compute definition is the operator's meaning:
the evaluator and the auto-scheduler (every target) run it as written (four stages:
the scores, their row maximum, the row sum, the output); the CPU template
(``cpu_attention.py``) computes one row at a time in one kernel.
"""
from __future__ import annotations

from typing import Sequence

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import Expr, const, if_then_else, not_equal

from .common import as_dtype, describe, make_operator, math_call, require_tensor
from .elementwise import broadcast_shapes

MASK_KINDS = ("none", "add", "select")


def accumulator_dtype(dtype) -> dtypes.DataType:
    return dtypes.float64 if dtype is dtypes.float64 else dtypes.float32


def _batch_index(batch_axes: Sequence[Expr], shape: Sequence[int]) -> list:
    """The indices of a tensor's leading (batch) axes, right-aligned, 0 where it broadcasts."""
    lead = list(shape[:-2])
    axes = list(batch_axes[len(batch_axes) - len(lead):]) if lead else []
    return [const(0, dtypes.int32) if extent == 1 else a for extent, a in zip(lead, axes)]


def _mask_index(axes: Sequence[Expr], mask_shape: Sequence[int]) -> list:
    axes = list(axes[len(axes) - len(mask_shape):])
    return [const(0, dtypes.int32) if extent == 1 else a for extent, a in zip(mask_shape, axes)]


def attention(q: Tensor, kt: Tensor, v: Tensor, mask: Tensor | None = None, *, scale: float = 1.0,
              mask_kind: str | None = None, fill: float = float("-inf"), zero_nan: bool = False) -> Tensor:
    """softmax(scale * q @ kt (+ mask)) @ v over the last axis (see the module docstring).

    :param mask_kind: ``"add"`` (a float mask added to the scaled scores; the default
        with a mask) or ``"select"`` (a boolean mask: scores where it is true, `fill`
        where it is false).
    """
    q, kt, v = (require_tensor("attention", t, w) for t, w in ((q, "q"), (kt, "kt"), (v, "v")))
    if any(t.rank < 2 for t in (q, kt, v)):
        raise ShapeError(f"attention: q, kt and v need at least 2 axes, got {describe(q)}, {describe(kt)}, {describe(v)}")
    if not (q.dtype.is_float() and q.dtype is kt.dtype is v.dtype):
        raise ShapeError(f"attention: q, kt and v must share one float dtype, got {describe(q)}, {describe(kt)}, "
                         f"{describe(v)}")
    m, d = q.shape[-2:]
    n = kt.shape[-1]
    if kt.shape[-2] != d or v.shape[-2] != n:
        raise ShapeError(f"attention: q {describe(q)} @ kt {describe(kt)} @ v {describe(v)}: inner extents differ")
    dv = v.shape[-1]
    batch = broadcast_shapes("attention", [_lead(t) for t in (q, kt, v)])
    scores_shape = (*batch, m, n)
    mask_kind = mask_kind or ("none" if mask is None else "add")
    if mask_kind not in MASK_KINDS or (mask is None) != (mask_kind == "none"):
        raise ValueError(f"attention: mask_kind {mask_kind!r} with {'no ' if mask is None else ''}mask "
                         f"(one of {MASK_KINDS}; 'none' exactly when there is no mask)")
    inputs = [q, kt, v]
    if mask is not None:
        mask = require_tensor("attention", mask, "mask")
        want_bool = mask_kind == "select"
        if (mask.dtype is dtypes.boolean) != want_bool or (not want_bool and not mask.dtype.is_float()):
            raise ShapeError(f"attention: a {mask_kind!r} mask must be {'bool' if want_bool else 'float'}, "
                             f"got {describe(mask)}")
        try:
            fits = mask.rank <= len(scores_shape) and broadcast_shapes("attention", [_as(scores_shape, q), mask]) == scores_shape
        except ShapeError:
            fits = False
        if not fits:
            raise ShapeError(f"attention: mask {describe(mask)} does not broadcast onto the scores {list(scores_shape)}")
        inputs.append(mask)
    ct = accumulator_dtype(q.dtype)
    nodes = [tensor_input(name, t.dtype, t.shape) for name, t in zip(("q", "kt", "v", "mask"), inputs)]
    qn, kn, vn = nodes[:3]
    nb = len(batch)

    def product(*idx):
        b, i, j = idx[:nb], idx[nb], idx[nb + 1]
        return reduce([d], lambda r: as_dtype(qn[(*_batch_index(b, q.shape), i, r)], ct)
                      * as_dtype(kn[(*_batch_index(b, kt.shape), r, j)], ct), "sum", ct)

    scores = compute("scores", scores_shape, product)

    def logit(idx) -> Expr:
        s = scores[idx] * const(scale, ct) if scale != 1.0 else scores[idx]
        if mask_kind == "add":
            s = s + as_dtype(nodes[3][tuple(_mask_index(idx, mask.shape))], ct)
        elif mask_kind == "select":
            s = if_then_else(nodes[3][tuple(_mask_index(idx, mask.shape))], s, const(fill, ct))
        return s

    top = compute("row_max", (*batch, m), lambda *o: reduce([n], lambda j: logit((*o, j)), "max", ct))
    total = compute("row_sum", (*batch, m),
                    lambda *o: reduce([n], lambda j: math_call("exp", logit((*o, j)) - top[o]), "sum", ct))

    def probability(o, j) -> Expr:
        p = math_call("exp", logit((*o, j)) - top[o]) / total[o]
        return if_then_else(not_equal(p, p), const(0.0, ct), p) if zero_nan else p

    def value(*idx):
        o, c = idx[:-1], idx[-1]
        b = idx[:nb]
        return reduce([n], lambda j: probability(o, j) * as_dtype(vn[(*_batch_index(b, v.shape), j, c)], ct),
                      "sum", ct)

    y = compute("y", (*batch, m, dv), value, dtype=q.dtype)
    attributes = {"scale": float(scale), "mask_kind": mask_kind, "fill": float(fill), "zero_nan": bool(zero_nan),
                  "batch": tuple(batch), "m": m, "n": n, "d": d, "dv": dv}
    return make_operator("attention", inputs, nodes, [y], attributes)[0]


def _lead(t: Tensor) -> Tensor:
    """A stand-in with only `t`'s batch axes, for broadcast_shapes."""
    return Tensor(tuple(t.shape[:-2]), t.dtype)


def _as(shape: Sequence[int], like: Tensor) -> Tensor:
    return Tensor(tuple(shape), like.dtype)


OPERATORS = {"attention": attention}
