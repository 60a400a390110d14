"""Index arithmetic on "int or Expr" that folds constants, so a layout or mapping
written once yields both Python ints (concrete offsets) and small IR (lowering).
Re-exported by ``hidet_framework.mapping.layout``, where it used to live."""
from __future__ import annotations

import functools
import operator
from typing import Any, Sequence, Union

from hidet_framework.ir.expr import Constant, Expr, convert

Index = Union[int, Expr]


def _as_index(x: Any) -> Index:
    if isinstance(x, Constant) and isinstance(x.value, int) and not isinstance(x.value, bool):
        return x.value
    if isinstance(x, Expr):
        return x
    return operator.index(x)


def _is(x: Index, value: int) -> bool:
    return isinstance(x, int) and x == value


def index_add(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return b if _is(a, 0) else a if _is(b, 0) else convert(a) + convert(b)


def index_mul(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if _is(a, 0) or _is(b, 0):
        return 0
    return b if _is(a, 1) else a if _is(b, 1) else convert(a) * convert(b)


def index_div(a: Index, b: Index) -> Index:
    """Floor division of non-negative indices (C truncation agrees there)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return a if _is(b, 1) or _is(a, 0) else convert(a) // convert(b)


def index_mod(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return 0 if _is(b, 1) else convert(a) % convert(b)


def index_xor(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a ^ b
    return a if _is(b, 0) else b if _is(a, 0) else convert(a) ^ convert(b)


def index_product(items: Sequence[Index]) -> Index:
    return functools.reduce(index_mul, items, 1)
