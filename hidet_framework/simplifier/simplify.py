"""An arithmetic simplifier for index expressions.

`simplify(expr, var_bounds)` folds constants, applies identities, moves constants to
the right of commutative operators and combines them, and uses variable bounds
(``hidet_framework.analysis.bounds``) to remove divisions, modulos, min/max and comparisons.

Every rule keeps the value the evaluator (``hidet_framework.analysis.evaluator``) computes:
integer division and modulo truncate toward zero and results wrap to their type. So
re-association is only done within one integer type (wrapping arithmetic is a ring),
rules that depend on magnitudes ask `bound_of` (which reports "unbounded" whenever
something may wrap), and a rule never drops a subexpression that may have an effect
(a call). Constants are folded by the evaluator itself, so folding cannot disagree.

The rules are tables: ``BINARY_RULES[op]`` lists the rewrites tried, in order, on a
node whose children are already simplified; the first that applies wins and its
result is simplified again. The rules for division and modulo by a constant live in
``simplify_div_mod``; what rule modules share (the `Rule` signature, integer-type
questions) in ``simplify_rules_common``.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from hidet_framework.analysis.bounds import Bounder, Interval, as_interval, type_range
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import BinaryOp, Cast, Constant, Expr, IfThenElse, TensorElement, UnaryOp, Var, const, convert
from hidet_framework.ir.functors import IRRewriter
from hidet_framework.simplifier.simplify_div_mod import (
    div_mod_by_bounds, nested_div_mod, recombine_div_mod, split_multiples, split_partial_multiples,
)
from hidet_framework.simplifier.purity import Purity
from hidet_framework.ir.shapes import visitor_of
from hidet_framework.simplifier.simplify_rules_common import (  # same_expr, is_pure: also imported from here
    Rule, fits, int_type, is_const, is_pure, same_expr, same_int_type,
)
from hidet_framework.ir.type_infer import cast_if_needed, infer_type

# ----------------------------------------------------------------- the rule tables

# `and`/`or` are left out: swapping them would change what short-circuiting evaluates.
COMMUTATIVE = ("add", "mul", "min", "max", "eq", "ne", "bit_and", "bit_or", "bit_xor")


def fold_constants(s: "Simplifier", e: Expr) -> Optional[Expr]:
    """op(c1, c2) -> c (computed by the evaluator, so with its exact semantics)."""
    if isinstance(e, BinaryOp):  # refused at once: tried first on every node, it rarely applies
        if not (isinstance(e.a, Constant) and isinstance(e.b, Constant)):
            return None
    elif not isinstance(e.a if isinstance(e, UnaryOp) else e.expr, Constant):
        return None
    t = infer_type(e)
    if not isinstance(t, DataType) or t.lanes != 1:
        return None
    from hidet_framework.analysis.evaluator import EvaluationError, evaluate_expr

    try:
        value = evaluate_expr(e)  # IEEE results, no numpy warnings (evaluate_expr turns them off)
    except (EvaluationError, ArithmeticError, ValueError, OverflowError):
        return None  # e.g. division by zero: leave it for run time
    return const(value.item() if hasattr(value, "item") else value, t)


def _may_be_nan(e: Expr) -> bool:
    t = infer_type(e)
    return not isinstance(t, DataType) or t.is_float()


def constant_to_right(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """c op x -> x op c for commutative ops (a canonical form the other rules expect).
    min/max swap only when neither operand is a float: for floats, ``max(a, b)`` is ``b > a ? b : a``, which
    returns `a` when either is NaN, so its operand order decides whether a NaN is kept."""
    if e.op in COMMUTATIVE and is_const(e.a) and not is_const(e.b):
        if e.op in ("min", "max") and any(_may_be_nan(x) for x in (e.a, e.b)):
            return None
        return BinaryOp(e.op, e.b, e.a)
    return None


def _identity(op: str, unit: int) -> Rule:
    def rule(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
        if is_const(e.b, unit) and int_type(e.b) and int_type(e):
            return s.keep_type(e.a, e)
        return None
    rule.__doc__ = f"x {op} {unit} -> x"
    return rule


def _absorb(value: int, result: int) -> Rule:
    def rule(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
        t = int_type(e)
        if t and is_const(e.b, value) and int_type(e.b) and s.may_drop(e.a):
            return const(result, t)
        return None
    rule.__doc__ = f"x op {value} -> {result} for integers"
    return rule


def cancel_self(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """x - x -> 0, x == x -> true, min(x, x) -> x, ... for integers."""
    if not (same_int_type(e.a, e.b) and same_expr(e.a, e.b) and s.may_drop(e.a)):
        return None
    results = {"sub": 0, "eq": True, "le": True, "lt": False, "ne": False, "bit_xor": 0}
    if e.op in results:
        return const(results[e.op], infer_type(e))
    if e.op in ("min", "max", "bit_and", "bit_or"):
        return e.a
    return None


def reassociate(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(x + c1) + c2 -> x + (c1+c2), (x - c1) + c2, (x ± c1) - c2, (x * c1) * c2,
    and constants pulled outward: (x + c) + y -> (x + y) + c, x + (y + c) -> (x + y) + c."""
    a, b, op = e.a, e.b, e.op
    if not (isinstance(a, BinaryOp) and is_const(a.b) or isinstance(b, BinaryOp) and is_const(b.b)):
        return None  # the shapes below first, the types after (same result, most nodes refused cheaply)
    if same_int_type(e, a, b) is None:
        return None
    if isinstance(a, BinaryOp) and is_const(a.b) and same_int_type(a, a.a, a.b):
        if is_const(b) and (op, a.op) in _COMBINE:
            outer, combine = _COMBINE[(op, a.op)]
            return BinaryOp(outer, a.a, BinaryOp(combine, a.b, b))
        if not is_const(b) and op == "add" and a.op in ("add", "sub"):
            return BinaryOp(a.op, BinaryOp("add", a.a, b), a.b)
        if not is_const(b) and op == "mul" and a.op == "mul":
            return BinaryOp("mul", BinaryOp("mul", a.a, b), a.b)
    if (op == "add" and isinstance(b, BinaryOp) and b.op in ("add", "sub") and is_const(b.b)
            and same_int_type(b, b.a, b.b)):
        return BinaryOp(b.op, BinaryOp("add", a, b.a), b.b)
    return None


# (outer op, inner op) of (x inner c1) outer c2 -> x result_op (c1 combine c2)
_COMBINE = {
    ("add", "add"): ("add", "add"), ("add", "sub"): ("sub", "sub"),
    ("sub", "add"): ("add", "sub"), ("sub", "sub"): ("sub", "add"),
    ("mul", "mul"): ("mul", "mul"),
}


def distribute_constant(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """(x ± c1) * c2 -> x * c2 ± c1 * c2: index arithmetic keeps constants outermost."""
    a = e.a
    if (is_const(e.b) and isinstance(a, BinaryOp) and a.op in ("add", "sub") and is_const(a.b)
            and same_int_type(e, a, a.a, a.b, e.b)):
        return BinaryOp(a.op, BinaryOp("mul", a.a, e.b), BinaryOp("mul", a.b, e.b))
    return None


def negative_constant_flip(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """x + (-c) -> x - c and x - (-c) -> x + c: constants stay positive where they can
    (reads better, and `reassociate` treats both alike)."""
    if not (is_const(e.b) and e.b.value < 0):  # the cheap test first (same result)
        return None
    t = same_int_type(e, e.a, e.b)
    if t and fits(-e.b.value, t):
        return BinaryOp("sub" if e.op == "add" else "add", e.a, const(-e.b.value, t))
    return None


def min_max_by_bounds(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """min(a, b) -> a when a <= b always (and the mirror cases for max)."""
    if not same_int_type(e.a, e.b):
        return None
    a, b = s.bound(e.a), s.bound(e.b)
    first = a.hi <= b.lo if e.op == "min" else a.lo >= b.hi
    second = b.hi <= a.lo if e.op == "min" else b.lo >= a.hi
    if first and s.may_drop(e.b):
        return e.a
    if second and s.may_drop(e.a):
        return e.b
    return None


def logic_with_constant(s: "Simplifier", e: BinaryOp) -> Optional[Expr]:
    """true && x -> x, false && x -> false, x || true -> true, ... (x boolean)."""
    absorbing = e.op == "or"  # the value that decides: true for ||, false for &&
    for c, x, x_evaluated_first in ((e.a, e.b, False), (e.b, e.a, True)):
        if is_const(c) and c.dtype.is_bool():
            if bool(c.value) == absorbing and (not x_evaluated_first or s.may_drop(x)):
                return const(absorbing)
            if bool(c.value) != absorbing and infer_type(x) is c.dtype:
                return x
    if same_expr(e.a, e.b) and infer_type(e.a) is infer_type(e) and s.may_drop(e.b):
        return e.a
    return None


BINARY_RULES: dict[str, tuple[Rule, ...]] = {
    "add": (fold_constants, constant_to_right, _identity("+", 0), reassociate, negative_constant_flip,
            recombine_div_mod),
    "sub": (fold_constants, _identity("-", 0), cancel_self, reassociate, negative_constant_flip),
    "mul": (fold_constants, constant_to_right, _identity("*", 1), _absorb(0, 0), reassociate,
            distribute_constant),
    "div": (fold_constants, _identity("/", 1), div_mod_by_bounds, nested_div_mod, split_multiples,
            split_partial_multiples),
    "mod": (fold_constants, _absorb(1, 0), div_mod_by_bounds, nested_div_mod, split_multiples,
            split_partial_multiples),
    "min": (fold_constants, constant_to_right, cancel_self, min_max_by_bounds),
    "max": (fold_constants, constant_to_right, cancel_self, min_max_by_bounds),
    "lt": (fold_constants, cancel_self), "le": (fold_constants, cancel_self),
    "eq": (fold_constants, constant_to_right, cancel_self),
    "ne": (fold_constants, constant_to_right, cancel_self),
    "and": (fold_constants, logic_with_constant), "or": (fold_constants, logic_with_constant),
    "bit_and": (fold_constants, constant_to_right, cancel_self),
    "bit_or": (fold_constants, constant_to_right, cancel_self),
    "bit_xor": (fold_constants, constant_to_right, cancel_self),
    "shl": (fold_constants,), "shr": (fold_constants,),
}

# not (a < b) -> b <= a and friends; integers only (with NaN, floats have no such law).
_NEGATED_COMPARISON = {"lt": ("le", True), "le": ("lt", True), "eq": ("ne", False), "ne": ("eq", False)}


def double_negation(s: "Simplifier", e: UnaryOp) -> Optional[Expr]:
    """not not x -> x (x boolean), -(-x) -> x, ~~x -> x; not (a < b) -> b <= a (ints)."""
    a = e.a
    if isinstance(a, UnaryOp) and a.op == e.op and infer_type(a.a) is infer_type(e):
        return a.a
    if e.op == "not" and isinstance(a, BinaryOp) and a.op in _NEGATED_COMPARISON and same_int_type(a.a, a.b):
        op, swap = _NEGATED_COMPARISON[a.op]
        return BinaryOp(op, a.b, a.a) if swap else BinaryOp(op, a.a, a.b)
    return None


UNARY_RULES: tuple[Rule, ...] = (fold_constants, double_negation)


# ------------------------------------------------------------------- the rewriter


class Simplifier(IRRewriter):
    """Simplifies expressions bottom-up. `var_bounds` may grow while a statement
    rewriter walks into loops (`bind`); results are memoised per expression object."""

    max_rewrites = 64  # per node: a guard against a rule cycle, never reached by design
    capped = False  # set when that guard stopped a node's rewrites (simplify_expr reads it)

    def __init__(self, var_bounds: Optional[Mapping[Var, Any]] = None) -> None:
        self.var_bounds: dict[Var, Interval] = {v: as_interval(b) for v, b in (var_bounds or {}).items()}
        self._purity = Purity()  # purity does not depend on bounds: never reset
        self._visitors: dict = {}  # node class -> how its children are visited (`ir.shapes.visitor_of`)
        self._reset_memo()

    def _reset_memo(self) -> None:
        self._bounder = Bounder(self.var_bounds)
        self._memo: dict[int, tuple[Expr, Expr]] = {}  # id -> (expr kept alive, result)
        self._shapes: dict[tuple, tuple[Expr, Expr]] = {}  # shape key -> (node, result): `shapes`
        self._seen_vars: set[Var] = set()  # every variable in an expression the memos hold

    def bind(self, v: Var, bound: Any) -> None:
        """Record that `v` lies in `bound` from now on. The memos are dropped only when
        an expression they hold has `v` in it: a result depends on the bounds of its own
        variables alone, and a variable declared here was never seen before."""
        self.var_bounds[v] = as_interval(bound)
        if v in self._seen_vars:
            self._reset_memo()

    def visit_Var(self, e: Var) -> Expr:
        self._seen_vars.add(e)
        return e

    def bound(self, e: Expr) -> Interval:
        return self._bounder.bound(e)

    def may_drop(self, e: Expr) -> bool:
        return self._purity.check(e)

    def keep_type(self, result: Expr, original: Expr) -> Expr:
        """`result`, cast to the type of `original` when its own type differs (x + 0 with
        an int8 x and an int32 0 is an int32)."""
        return cast_if_needed(result, infer_type(original))

    def simplify(self, e: Expr) -> Expr:
        return self.visit(e)

    def visit(self, node: Any) -> Any:
        cls = type(node)
        if cls is Constant:  # a leaf no rule rewrites (the memo would hold it as itself)
            return node
        if cls is Var:
            self._seen_vars.add(node)
            return node
        if not isinstance(node, Expr):
            return super().visit(node)
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        children = visitor_of(type(self), cls, self._visitors)
        if children is None:
            result = self._rewrite(node, None)
        else:  # children first, then the node by its shape (`ir.shapes`: equal nodes rewrite alike)
            children_done, key = children(self, node)
            shape = self._shapes.get(key)
            if shape is None:
                result = self._rewrite(node, children_done)
                self._shapes[key] = (children_done, result)  # children_done keeps the key's ids alive
            else:  # no rule applied to an equal node: this one stays itself (unchanged trees keep their identity)
                result = children_done if shape[1] is shape[0] else shape[1]
        self._memo[id(node)] = (node, result)
        return result

    def _rewrite(self, node: Expr, children_done: Optional[Expr]) -> Expr:
        """Rules applied until none does; each rewritten node's children are simplified
        before its own rules are tried. `children_done`: the first step, when known."""
        result = node
        table = self._visit_table
        for _ in range(self.max_rewrites):
            if children_done is None:
                method = table.get(type(result)) or self._visit_method(type(result))  # the dispatch, inlined
                children_done = method(self, result)
            rewritten = self._rewrite_once(children_done)
            if rewritten is None:
                result = children_done
                break
            result, children_done = rewritten, None
        else:
            self.capped = True  # the guard stopped the rewrites: `result` may not be final
        return result

    def _rewrite_once(self, e: Expr) -> Optional[Expr]:
        if isinstance(e, (Constant, Var)):
            return None
        decided = self._decided_by_bounds(e)
        if decided is not None:
            return decided
        if isinstance(e, BinaryOp):
            rules = BINARY_RULES.get(e.op, ())
        elif isinstance(e, UnaryOp):
            rules = UNARY_RULES
        elif isinstance(e, Cast):
            rules = (fold_constants, _cast_to_same_type)
        elif isinstance(e, IfThenElse):
            rules = (_select_branch,)
        else:
            rules = ()
        for rule in rules:
            out = rule(self, e)
            if out is not None:
                return out
        return None

    def _decided_by_bounds(self, e: Expr) -> Optional[Expr]:
        """An integer or boolean expression whose bounds are one value is that value."""
        if isinstance(e, TensorElement):
            return None
        t = infer_type(e)
        if type_range(t) is None:
            return None
        b = self.bound(e)
        if b.is_point() and self._purity.check(e):
            return const(b.lo, t)
        return None


def _cast_to_same_type(s: Simplifier, e: Cast) -> Optional[Expr]:
    """cast(x, T) -> x when x already has type T."""
    return e.expr if infer_type(e.expr) is e.dtype else None


def _select_branch(s: Simplifier, e: IfThenElse) -> Optional[Expr]:
    """c ? a : b -> a or b for a constant c; c ? a : a -> a."""
    if is_const(e.cond):
        return s.keep_type(e.then_expr if e.cond.value else e.else_expr, e)
    if same_expr(e.then_expr, e.else_expr) and s.may_drop(e.cond):
        return s.keep_type(e.then_expr, e)
    return None


def simplify(expr: Expr, var_bounds: Optional[Mapping[Var, Any]] = None) -> Expr:
    """The simplified `expr`; same value as `expr` for every assignment of its
    variables within `var_bounds` (`Interval`s, or half-open ``(lo, hi)`` pairs)."""
    return Simplifier(var_bounds).simplify(convert(expr))
