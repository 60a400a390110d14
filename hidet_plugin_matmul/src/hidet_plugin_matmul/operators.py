"""The matmul and batch_matmul operators (numpy semantics).

Both become one canonical operator, ``matmul``, whose Task reads its inputs as they
are when they are 2-D ([M, K] × [K, N]) or 3-D ([Ba, M, K] × [Bb, K, N] with Ba and Bb
each 1 or the batch): those are the layouts every template handles. Other ranks,
vectors and general batch broadcasting are reshaped/expanded into that form with the
``reshape`` and ``broadcast_to`` operators found in the registry (a rewrite never
imports the plugin that provides an operator), and the result reshaped back.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.compute.definitions import default_acc_dtype
from hidet_framework.graph import Operator, ShapeError, Tensor
from hidet_framework.ir.expr import cast

OPERATOR = "matmul"


def element_index(rank: int, batched: bool, b: Any, row: Any, col: Any) -> tuple:
    """The index of element (b, row, col) of a canonical operand: templates and the
    compute definition share it, so both read inputs the same way."""
    if rank == 2:
        return (row, col)
    return (b if batched else 0, row, col)


class MatmulOperands:
    """Shapes and element access of the canonical matmul operands (2-D or 3-D, batch
    flags), from the operator's task attributes: what every template indexes them by."""

    def __init__(self, attributes: Mapping[str, Any]):
        self.m, self.n, self.k = (int(attributes[x]) for x in ("m", "n", "k"))
        self.batch = int(attributes.get("batch", 1))
        self.a_rank = int(attributes.get("a_rank", 2))
        self.b_rank = int(attributes.get("b_rank", 2))
        self.a_batched = bool(attributes.get("a_batched", False))
        self.b_batched = bool(attributes.get("b_batched", False))
        self.out_rank = int(attributes.get("out_rank", 2))

    @property
    def a_shape(self) -> tuple:
        return (self.m, self.k) if self.a_rank == 2 else ((self.batch if self.a_batched else 1), self.m, self.k)

    @property
    def b_shape(self) -> tuple:
        return (self.k, self.n) if self.b_rank == 2 else ((self.batch if self.b_batched else 1), self.k, self.n)

    @property
    def c_shape(self) -> tuple:
        return (self.m, self.n) if self.out_rank == 2 else (self.batch, self.m, self.n)

    def a_index(self, bz: Any, row: Any, col: Any) -> tuple:
        return element_index(self.a_rank, self.a_batched, bz, row, col)

    def b_index(self, bz: Any, row: Any, col: Any) -> tuple:
        return element_index(self.b_rank, self.b_batched, bz, row, col)

    def c_index(self, bz: Any, row: Any, col: Any) -> tuple:
        return element_index(self.out_rank, True, bz, row, col)

    def key(self) -> str:
        return f"{self.batch}x{self.m}x{self.n}x{self.k}"


def matmul_task(a_shape: tuple, b_shape: tuple, dtype: Any) -> tuple[Task, dict]:
    """The canonical task and its attributes (m, n, k, batch, ranks, batched flags)."""
    ra, rb = len(a_shape), len(b_shape)
    m, k = a_shape[-2:]
    n = b_shape[-1]
    ba = a_shape[0] if ra == 3 else 1
    bb = b_shape[0] if rb == 3 else 1
    batch = max(ba, bb)
    out_rank = 3 if 3 in (ra, rb) else 2
    a = tensor_input("a", dtype, a_shape)
    b = tensor_input("b", dtype, b_shape)
    acc = default_acc_dtype(a.dtype, "sum")
    a_batched, b_batched = ba > 1, bb > 1

    def widen(e):
        return e if a.dtype is acc else cast(e, acc)

    def body(*idx):
        bi = idx[0] if out_rank == 3 else 0
        i, j = idx[-2:]
        return reduce([k], lambda r: widen(a[element_index(ra, a_batched, bi, i, r)])
                      * widen(b[element_index(rb, b_batched, bi, r, j)]), "sum", acc)

    out_shape = (batch, m, n) if out_rank == 3 else (m, n)
    c = compute("c", out_shape, body, dtype=a.dtype)
    attributes = {"m": m, "n": n, "k": k, "batch": batch, "a_rank": ra, "b_rank": rb,
                  "a_batched": a_batched, "b_batched": b_batched, "out_rank": out_rank}
    return Task(OPERATOR, [a, b], [c], attributes), attributes


def _registry_op(name: str):
    from hidet_framework.extension import plugin_host

    ops = plugin_host().operators
    if name not in ops:
        raise ShapeError(f"matmul needs the {name!r} operator for these shapes; install a plugin that "
                         f"registers it (hidet-plugin-ops)")
    return ops[name]


def _reshape(t: Tensor, shape: tuple) -> Tensor:
    return t if tuple(t.shape) == tuple(shape) else _registry_op("reshape")(t, shape)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` with numpy's rules: vectors promoted, batch dimensions broadcast."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul takes two Tensors")
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"matmul: scalars are not allowed (got {a.dtype.short}{list(a.shape)} "
                         f"and {b.dtype.short}{list(b.shape)})")
    if a.dtype is not b.dtype:
        raise ShapeError(f"matmul: operand dtypes differ ({a.dtype} and {b.dtype}); cast one first")
    a_vec, b_vec = a.rank == 1, b.rank == 1
    a2 = _reshape(a, (1,) + a.shape) if a_vec else a
    b2 = _reshape(b, b.shape + (1,)) if b_vec else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"matmul: cannot multiply {a.dtype.short}{list(a.shape)} by {b.dtype.short}"
                         f"{list(b.shape)}: inner dimensions {a2.shape[-1]} and {b2.shape[-2]} differ")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {a.dtype.short}{list(a.shape)} and "
                         f"{b.dtype.short}{list(b.shape)} do not broadcast") from None
    m, n = a2.shape[-2], b2.shape[-1]
    if batch:
        a2, b2 = (_canonical_batched(t, batch) for t in (a2, b2))
    task, attributes = matmul_task(a2.shape, b2.shape, a.dtype)
    out = Operator(OPERATOR, [a2, b2], task, attributes).outputs[0]
    final = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    return _reshape(out, final)


def _canonical_batched(t: Tensor, batch: tuple) -> Tensor:
    """[..., R, C] → [1 or prod(batch), R, C], expanding a partial broadcast."""
    own = t.shape[:-2]
    total = int(np.prod(batch, dtype=np.int64))
    if int(np.prod(own, dtype=np.int64)) == 1:
        return _reshape(t, (1,) + t.shape[-2:])
    if tuple((1,) * (len(batch) - len(own)) + own) != batch:
        t = _registry_op("broadcast_to")(t, batch + t.shape[-2:])
    return _reshape(t, (total,) + t.shape[-2:])


def batch_matmul(a: Tensor, b: Tensor) -> Tensor:
    """[B, M, K] × [B, K, N] → [B, M, N] (batch 1 broadcasts)."""
    if a.rank != 3 or b.rank != 3:
        raise ShapeError(f"batch_matmul: expects 3-D operands, got {a.dtype.short}{list(a.shape)} "
                         f"and {b.dtype.short}{list(b.shape)}")
    return matmul(a, b)
