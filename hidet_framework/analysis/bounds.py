"""Interval analysis of integer expressions.

`bound_of(expr, var_bounds)` gives an `Interval` that contains every value `expr` can
take under the evaluator's semantics (``hidet_framework.analysis.evaluator``), given intervals
of some variables. The simplifier uses it to drop divisions, modulos and comparisons.

Soundness over precision: whenever an operation might wrap around its integer type
(the evaluator wraps results to the type's width), the result is "anything"
(`Interval.unbounded()`), never a guess. Non-integer expressions are unbounded.
"""
from __future__ import annotations

import functools

import math
from typing import Any, Mapping, Optional

import attrs

from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import BinaryOp, Call, Cast, Constant, Expr, IfThenElse, UnaryOp, Var
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.ir.type_infer import infer_type

INF = math.inf


@attrs.frozen(slots=True)
class Interval:
    """The integers ``lo <= x <= hi`` (both inclusive); ``-inf``/``inf`` when unknown."""

    lo: Any = -INF
    hi: Any = INF

    @staticmethod
    def unbounded() -> "Interval":
        return Interval(-INF, INF)

    @staticmethod
    def point(value: int) -> "Interval":
        return Interval(value, value)

    def is_point(self) -> bool:
        return self.lo == self.hi and self.lo not in (-INF, INF)

    def is_bounded(self) -> bool:
        return self.lo != -INF and self.hi != INF

    def within(self, lo: Any, hi: Any) -> bool:
        """Whether every value lies in ``[lo, hi]`` (inclusive)."""
        return self.lo >= lo and self.hi <= hi

    def union(self, other: "Interval") -> "Interval":
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def __str__(self) -> str:
        return f"[{self.lo}, {self.hi}]"


BOOL_INTERVAL = Interval(0, 1)


def as_interval(value: Any) -> Interval:
    """An `Interval` as is; a ``(lo, hi)`` pair is half-open like ``range`` and like
    primitives' `bounds`; an int is a point."""
    if isinstance(value, Interval):
        return value
    if isinstance(value, range):
        return Interval(value.start, value.stop - 1)
    if isinstance(value, tuple) and len(value) == 2:
        return Interval(value[0], value[1] - 1)
    if isinstance(value, int):
        return Interval.point(value)
    raise TypeError(f"cannot read {value!r} as an interval")


def _mul(a: Any, b: Any) -> Any:
    # 0 * inf is 0 here: an exact zero times any finite value is zero.
    return 0 if a == 0 or b == 0 else a * b


def _c_div(a: Any, b: Any) -> Any:
    """Truncating division extended to infinities (b is never zero here)."""
    if a in (-INF, INF):
        return a if b > 0 else -a
    if b in (-INF, INF):
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _corners(op: Any, a: Interval, b: Interval) -> Interval:
    values = [op(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Interval(min(values), max(values))


def _div(a: Interval, b: Interval) -> Interval:
    # Truncating division is monotone in each argument on either side of zero, so the
    # extremes sit at the corners when the divisor keeps one sign.
    if b.lo > 0 or b.hi < 0:
        return _corners(_c_div, a, b)
    return Interval.unbounded()


def _mod(a: Interval, b: Interval) -> Interval:
    # C's a % b has the sign of a and |a % b| < |b|.
    if not (b.lo > 0 or b.hi < 0):
        return Interval.unbounded()
    m = max(abs(b.lo), abs(b.hi)) - 1
    if a.lo >= 0:
        if a.hi < min(abs(b.lo), abs(b.hi)):
            return a  # a % b == a
        return Interval(0, min(a.hi, m))
    if a.hi <= 0:
        return Interval(max(a.lo, -m), 0)
    return Interval(max(a.lo, -m), min(a.hi, m))


def _compare(op: str, a: Interval, b: Interval) -> Interval:
    """Decided comparisons give a point (1 true, 0 false)."""
    if op == "lt":
        true, false = a.hi < b.lo, a.lo >= b.hi
    elif op == "le":
        true, false = a.hi <= b.lo, a.lo > b.hi
    elif op == "eq":
        true, false = a.is_point() and a == b, a.hi < b.lo or b.hi < a.lo
    else:  # ne
        true, false = a.hi < b.lo or b.hi < a.lo, a.is_point() and a == b
    return Interval.point(1) if true else Interval.point(0) if false else BOOL_INTERVAL


# Interval arithmetic of the integer binary operators, as a table.
_ARITHMETIC = {
    "add": lambda a, b: Interval(a.lo + b.lo, a.hi + b.hi),
    "sub": lambda a, b: Interval(a.lo - b.hi, a.hi - b.lo),
    "mul": lambda a, b: _corners(_mul, a, b),
    "div": _div,
    "mod": _mod,
    "min": lambda a, b: Interval(min(a.lo, b.lo), min(a.hi, b.hi)),
    "max": lambda a, b: Interval(max(a.lo, b.lo), max(a.hi, b.hi)),
}


def type_range(t: Any) -> Optional[Interval]:
    """All values of an integer or boolean type; None for other types."""
    hit = _TYPE_RANGES.get(id(t))  # asked of nearly every subexpression the simplifier visits
    if hit is not None and hit[0] is t:
        return hit[1]
    if isinstance(t, DataType) and t.lanes == 1 and (t.is_integer() or t.is_bool()):
        r = _full_range(t)
    else:
        r = None
    if isinstance(t, DataType):  # interned and few; the entry keeps it alive, so its id is never reused
        _TYPE_RANGES[id(t)] = (t, r)
    return r


_TYPE_RANGES: dict[int, tuple] = {}


@functools.lru_cache(maxsize=None)
def _full_range(t: DataType) -> Interval:
    """Memoised: Intervals are immutable, and the simplifier asks for a type's range of
    nearly every subexpression it visits."""
    return Interval(int(t.min_value()), int(t.max_value()))


def _fit(value: Interval, t: Any) -> Interval:
    """`value` when it fits type `t`; unbounded when the evaluator may have wrapped."""
    full = type_range(t)
    if full is None:
        return Interval.unbounded()
    return value if value.within(full.lo, full.hi) else Interval.unbounded()


def bound_of(expr: Expr, var_bounds: Optional[Mapping[Var, Any]] = None) -> Interval:
    """An interval containing every value of `expr`.

    :param var_bounds: known ranges of variables (`Interval`, half-open ``(lo, hi)``
        pair, or ``range``); other variables range over their whole type.
    """
    bounds = {v: as_interval(b) for v, b in (var_bounds or {}).items()}
    return Bounder(bounds).bound(expr)


class Bounder:
    """Bounds of expressions under fixed variable bounds, memoised per expression."""

    def __init__(self, var_bounds: Mapping[Var, Interval]) -> None:
        self.var_bounds = var_bounds
        # id -> (expr, interval): the expression is kept alive so its id is never reused
        self.memo: dict[int, tuple[Expr, Interval]] = {}

    def bound(self, e: Expr) -> Interval:
        hit = self.memo.get(id(e))
        if hit is None or hit[0] is not e:
            hit = self.memo[id(e)] = (e, self._bound(e))
        return hit[1]

    def _bound(self, e: Expr) -> Interval:
        try:
            t = infer_type(e)
        except TypeError:
            return Interval.unbounded()
        if type_range(t) is None:
            return Interval.unbounded()
        if isinstance(e, Constant):
            return Interval.point(int(e.value))
        if isinstance(e, Var):
            known = self.var_bounds.get(e)
            full = type_range(t)
            if known is None:
                return full
            return Interval(max(known.lo, full.lo), min(known.hi, full.hi))
        if isinstance(e, BinaryOp):
            return self._binary(e, t)
        if isinstance(e, UnaryOp):
            a = self.bound(e.a)
            if e.op == "neg":
                return _fit(Interval(-a.hi, -a.lo), t)
            if e.op == "not":
                if a.lo > 0 or a.hi < 0:  # a is surely true
                    return Interval.point(0)
                return Interval.point(1) if a == Interval.point(0) else BOOL_INTERVAL
            return type_range(t)
        if isinstance(e, Cast):
            return _fit(self.bound(e.expr), t) if type_range(infer_type(e.expr)) else type_range(t)
        if isinstance(e, IfThenElse):
            cond = self.bound(e.cond)
            if cond.is_point():
                return self.bound(e.then_expr if cond.lo else e.else_expr)
            return self.bound(e.then_expr).union(self.bound(e.else_expr))
        if isinstance(e, Call):
            prim = lookup_primitive(e.func)
            if prim is not None and prim.bounds is not None:
                return as_interval(tuple(prim.bounds))
        return type_range(t)

    def _binary(self, e: BinaryOp, t: Any) -> Interval:
        a, b = self.bound(e.a), self.bound(e.b)
        if e.op in ("lt", "le", "eq", "ne"):
            return _compare(e.op, a, b)
        if e.op in ("and", "or"):
            a_true, b_true = a.lo > 0 or a.hi < 0, b.lo > 0 or b.hi < 0
            a_false, b_false = a == Interval.point(0), b == Interval.point(0)
            if e.op == "and":
                return Interval.point(1) if a_true and b_true else Interval.point(0) if a_false or b_false else BOOL_INTERVAL
            return Interval.point(1) if a_true or b_true else Interval.point(0) if a_false and b_false else BOOL_INTERVAL
        rule = _ARITHMETIC.get(e.op)
        if rule is None:  # bit operations, shifts: the type's range
            return type_range(t)
        return _fit(rule(a, b), t)
