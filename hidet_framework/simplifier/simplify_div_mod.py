"""The simplifier's rules for integer division and modulo by a positive constant.

They remove or split ``x / c`` and ``x % c`` using the bounds of `x`
(``hidet_framework.analysis.bounds``): truncating division keeps the sign of `x`, so each
rule asks for non-negative or finite bounds before it applies, and never lets a
rewritten sum wrap around its type. ``hidet_framework.simplifier.simplify`` lists them in its
rule tables for ``div`` and ``mod``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from hidet_framework.analysis.bounds import type_range
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import BinaryOp, Expr, const
from hidet_framework.simplifier.simplify_rules_common import fits, is_const, same_expr, same_int_type
from hidet_framework.ir.type_infer import infer_type

if TYPE_CHECKING:
    from hidet_framework.simplifier.simplify import Simplifier


def div_mod_by_bounds(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """x / c -> 0 and x % c -> x when |x| < c (truncation keeps the sign of x)."""
    if not (same_int_type(e.a, e.b) and is_const(e.b) and e.b.value > 0):
        return None
    c = e.b.value
    if s.bound(e.a).within(-(c - 1), c - 1):
        return const(0, infer_type(e)) if e.op == "div" and s.may_drop(e.a) else e.a if e.op == "mod" else None
    return None


def nested_div_mod(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(x / a) / b -> x / (a*b) and (x % a) % b -> x % b when b divides a (a, b > 0)."""
    a = e.a
    t = same_int_type(e, e.b)
    if not (t and is_const(e.b) and e.b.value > 0 and isinstance(a, BinaryOp) and a.op == e.op
            and is_const(a.b) and a.b.value > 0 and same_int_type(a, a.a, a.b)):
        return None
    if e.op == "div" and fits(a.b.value * e.b.value, t):
        return BinaryOp("div", a.a, const(a.b.value * e.b.value, t))
    if e.op == "mod" and a.b.value % e.b.value == 0:
        return BinaryOp("mod", a.a, e.b)
    return None


def split_multiples(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(i*c + j) / c -> i and (i*c + j) % c -> j when 0 <= j < c and the sum is not
    negative; more generally (c*q + r) / c -> q + r / c and % c -> r % c when both
    parts are non-negative. Nothing may wrap: all parts must have finite bounds."""
    t = same_int_type(e, e.a, e.b)
    if not (t and is_const(e.b) and e.b.value > 0):
        return None
    c = e.b.value
    quotients, rest = [], []
    for term in _add_terms(e.a, t):
        q = _exact_quotient(term, c, t)
        (rest.append(term) if q is None else quotients.append(q))
    if not quotients:
        return None
    whole = s.bound(e.a)
    multiple = _sum([BinaryOp("mul", q, const(c, t)) for q in quotients])
    q_sum = _sum(quotients)
    if not (whole.is_bounded() and s.bound(multiple).is_bounded()):
        return None
    if not rest:  # exact: c*q / c == q and c*q % c == 0 whatever the sign
        return q_sum if e.op == "div" else const(0, t) if s.may_drop(e.a) else None
    r = _sum(rest)
    rb = s.bound(r)
    if not rb.is_bounded() or not s.may_drop(e.a):
        return None
    if rb.within(0, c - 1) and (whole.lo >= 0 or s.bound(multiple).lo >= 0):
        return q_sum if e.op == "div" else r
    if rb.lo >= 0 and s.bound(multiple).lo >= 0:
        return BinaryOp("add", q_sum, BinaryOp("div", r, e.b)) if e.op == "div" else BinaryOp("mod", r, e.b)
    return None


def split_partial_multiples(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(x*c + y) / (c*k) -> x / k and % (c*k) -> (x % k)*c + y when 0 <= y < c and
    x*c >= 0: the stride c of an inner axis divides the divisor, as when the index of
    a reshaped tensor is divided by a coarser axis' stride (GPT-2's head split:
    ((h*64 + r)*128 + j) / 8192 with j < 128 is (h*64 + r) / 64). c is tried from the
    sum's own multipliers (their gcd with the divisor); nothing may wrap: every part
    has finite, non-negative bounds. With q = x = q'k + s (0 <= s < k), x*c + y =
    q'kc + (sc + y) and 0 <= sc + y <= kc - 1, so the quotient is q' and the rest sc + y."""
    t = same_int_type(e, e.a, e.b)
    if not (t and is_const(e.b) and e.b.value > 0):
        return None
    d = e.b.value
    terms = _add_terms(e.a, t)
    if len(terms) < 2:
        return None
    strides = sorted({math.gcd(term.b.value, d) for term in terms
                      if isinstance(term, BinaryOp) and term.op == "mul" and is_const(term.b) and term.b.value > 0},
                     reverse=True)
    for c in strides:
        if c in (1, d):  # 1: nothing to split; d itself: split_multiples' case
            continue
        quotients, rest = [], []
        for term in terms:
            q = _exact_quotient(term, c, t)
            (rest.append(term) if q is None else quotients.append(q))
        if not quotients or not rest:
            continue
        x, y = _sum(quotients), _sum(rest)
        xb, yb = s.bound(x), s.bound(y)
        if not (xb.is_bounded() and xb.lo >= 0 and yb.within(0, c - 1) and s.bound(e.a).within(0, type_range(t).hi)):
            continue
        k = const(d // c, t)
        if e.op == "div":
            return BinaryOp("div", x, k) if s.may_drop(y) else None
        return BinaryOp("add", BinaryOp("mul", BinaryOp("mod", x, k), const(c, t)), y)
    return None


def recombine_div_mod(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(x / c) * c + x % c -> x and (x / a % b) * a + x % a -> x % (a*b), wherever the
    two terms sit in a sum (a reshape's unravel-then-ravel leaves these). With C's
    truncating division both hold for every x: x = (x/a)*a + x%a, and x/a = (x/a/b)*b
    + x/a%b, the remainders taking the sign of x; needs a, b > 0, a*b fitting the type
    and x free of side effects (one copy of it is dropped)."""
    if e.op != "add" or not _may_hold_mod_term(e):
        return None
    t = same_int_type(e, e.a, e.b)
    if not t:
        return None
    terms = _add_terms(e, t)
    for i, rem in enumerate(terms):
        if not (isinstance(rem, BinaryOp) and rem.op == "mod" and is_const(rem.b) and rem.b.value > 0):
            continue
        x, a = rem.a, rem.b.value
        for j, other in enumerate(terms):
            q = _exact_quotient(other, a, t) if j != i and not is_const(other) else None
            if q is None or not isinstance(q, BinaryOp):
                continue
            if q.op == "div" and is_const(q.b, a) and same_expr(q.a, x) and s.may_drop(x):
                whole = x                                                   # (x / a) * a + x % a
            elif (q.op == "mod" and is_const(q.b) and q.b.value > 0 and isinstance(q.a, BinaryOp)
                  and q.a.op == "div" and is_const(q.a.b, a) and same_expr(q.a.a, x)
                  and fits(a * q.b.value, t) and s.may_drop(x)):
                whole = BinaryOp("mod", x, const(a * q.b.value, t))         # (x / a % b) * a + x % a
            else:
                continue
            rest = [term for k, term in enumerate(terms) if k not in (i, j)]
            return _sum(rest + [whole]) if rest else whole
    return None


def _may_hold_mod_term(e: Expr) -> bool:
    """Whether a ``%`` may be among the terms `_add_terms` finds: the same walk without the
    types (so it may say yes where the typed walk stops early) and without building the list.
    Tried on every sum, `recombine_div_mod` applies to few, and its terms cost more (issue 11)."""
    while isinstance(e, BinaryOp):
        if e.op == "mod":
            return True
        if e.op == "add" and _may_hold_mod_term(e.b):
            return True
        if e.op not in ("add", "sub"):
            return False
        e = e.a
    return False


def _add_terms(e: Expr, t: DataType) -> list[Expr]:
    """The terms of a sum (x - c counts as the term -c), all of type `t`."""
    if isinstance(e, BinaryOp) and infer_type(e) is t and same_int_type(e.a, e.b):
        if e.op == "add":
            return _add_terms(e.a, t) + _add_terms(e.b, t)
        if e.op == "sub" and is_const(e.b) and fits(-e.b.value, t):
            return _add_terms(e.a, t) + [const(-e.b.value, t)]
    return [e]


def _exact_quotient(term: Expr, c: int, t: DataType) -> Optional[Expr]:
    if is_const(term) and term.value % c == 0:
        return const(term.value // c, t)
    if isinstance(term, BinaryOp) and term.op == "mul" and is_const(term.b) and term.b.value % c == 0:
        k = term.b.value // c
        return term.a if k == 1 else BinaryOp("mul", term.a, const(k, t))
    return None


def _sum(terms: list[Expr]) -> Expr:
    out = terms[0]
    for term in terms[1:]:
        out = BinaryOp("add", out, term)
    return out
