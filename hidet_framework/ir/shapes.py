"""Nodes named by what they are made of, for rewriters that memoise by shape.

Index expressions are built access by access (a layout applied to the indices of each
load and store, a mapping's loop lowered per use), so one kernel holds the same
subexpression as many distinct objects: on the short-M matmul candidates about three
of every four expression nodes the simplifier met were equal, child for child, to one
it had already rewritten, and seven of every eight offsets `flatten_tensor_index`
computed had been computed before (issue 11). A memo by identity misses them all.

Where a rewriter's result for a node depends only on its class, its own fields and its
children *after* they are rewritten, `visit_children` names the node by exactly that
(`shape key`): the rewritten children by identity (the rewriter's memo holds them, so
their ids are not reused while a key lives) or, for an integer or boolean constant, by
its value, its Python type and its dtype (constants are leaves no memo makes shared);
string fields by value and other fields by identity (a type object: identity is what
``is`` tests in the rules see). Two nodes with one key then give the same result, and
the first one's result object serves both: equal subtrees become one shared object,
which later passes' identity memos also hit. Statements are never shared.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Constant, Dereference, IfThenElse, TensorElement, TensorSlice, UnaryOp,
)
from hidet_framework.ir.functors import IRRewriter, _evolve

def token(x: Any) -> Any:
    """A rewritten child in a key: its identity, or the value of an int or bool constant."""
    if type(x) is Constant and type(x.value) in (int, bool):  # floats: -0.0 == 0.0, so by identity
        return (type(x.value), x.value, id(x.dtype))
    return id(x)


def _tokens(xs: tuple) -> tuple:
    return tuple([id(x) if type(x) is not Constant else token(x) for x in xs])


# One function per node kind: (the node with its children rewritten, its key), visiting
# the children in the order the `IRRewriter` base method does and rebuilding the node
# only when a child changed. The common kinds are written out (this runs once per node
# of every expression the simplifier and flatten_tensor_index see).
def _binary(s: Any, e: BinaryOp) -> tuple:
    a, b = s.visit(e.a), s.visit(e.b)
    key = (BinaryOp, e.op, id(a) if type(a) is not Constant else token(a),
           id(b) if type(b) is not Constant else token(b))
    return (e if a is e.a and b is e.b else BinaryOp(e.op, a, b)), key


def _unary(s: Any, e: UnaryOp) -> tuple:
    a = s.visit(e.a)
    return (e if a is e.a else UnaryOp(e.op, a)), (UnaryOp, e.op, token(a))


def _cast(s: Any, e: Cast) -> tuple:
    x = s.visit(e.expr)
    return (e if x is e.expr else Cast(x, e.dtype)), (Cast, token(x), id(e.dtype))


def _element(s: Any, e: TensorElement) -> tuple:
    base, indices = s.visit(e.base), s.visit_seq(e.indices)
    done = e if base is e.base and indices is e.indices else TensorElement(base, indices)
    return done, (TensorElement, token(base), _tokens(indices))


_VALUE, _CHILD, _CHILDREN, _IDENTITY = range(4)  # how a field enters the key (below)


def _generic(*fields: tuple) -> Callable:
    """Any other kind: each field a string (by value), a child or a tuple of children
    (visited), or another value (by identity: a type object, as the rules' ``is`` sees it)."""
    def visit(s: Any, e: Any) -> tuple:
        key, changes = [type(e)], {}
        for name, kind in fields:
            old = getattr(e, name)
            if kind is _VALUE or kind is _IDENTITY:
                key.append(old if kind is _VALUE else id(old))
                continue
            new = s.visit(old) if kind is _CHILD else s.visit_seq(old)
            key.append(token(new) if kind is _CHILD else _tokens(new))
            if new is not old:
                changes[name] = new
        return (_evolve(e, changes) if changes else e), tuple(key)
    return visit


VISIT: dict[type, Callable] = {
    BinaryOp: _binary, UnaryOp: _unary, Cast: _cast, TensorElement: _element,
    Call: _generic(("func", _VALUE), ("args", _CHILDREN), ("ret_type", _IDENTITY)),
    TensorSlice: _generic(("base", _CHILD), ("indices", _CHILDREN), ("starts", _CHILDREN), ("ends", _CHILDREN)),
    IfThenElse: _generic(("cond", _CHILD), ("then_expr", _CHILD), ("else_expr", _CHILD)),
    Address: _generic(("expr", _CHILD)), Dereference: _generic(("ptr", _CHILD)),
}


def visitor_of(rewriter_cls: type, node_cls: type, cache: dict) -> Optional[Callable]:
    """`VISIT`'s function for `node_cls`, or None where `rewriter_cls` visits that kind
    itself (its own method) or the kind is not one of the IR's."""
    hit = cache.get(node_cls, False)
    if hit is False:
        name = "visit_" + node_cls.__name__
        own = getattr(rewriter_cls, name, None) is not getattr(IRRewriter, name, None)
        hit = cache[node_cls] = None if own else VISIT.get(node_cls)
    return hit
