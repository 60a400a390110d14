"""widen_index_arithmetic: index arithmetic in int64 where a buffer is that large.

Loops, compute axes and the index variables templates derive from them are int32 (the
fast, compact choice), so ``y[(row0 + i) * N + col]`` or ``const int32_t i1 = j;``
silently wraps once a buffer reaches 2^31 elements: the tail reads and writes land at
wrong (negative) offsets and the result is wrong with no error. This pass decides, at
compile time from the parameters' shapes, whether a function can address that far, and
only then rewrites it:

    for (int32_t j = 0; ...)        ->   for (int64_t j = 0; ...)
    const int32_t i1 = j;           ->   const int64_t i1 = j;
    n (an int32 scalar parameter)   ->   (int64_t)n

Every int32 loop variable, every int32 let-bound variable whose value is index
arithmetic (integers, loop and let variables, parameters, calls such as threadIdx.x;
no element loaded from memory), and every int32 declared variable all of whose values
are index arithmetic becomes int64; int32 scalar parameters are widened at each use.
C's usual conversions then carry every product and sum that involves them in 64 bits.
Variables that hold values loaded from memory keep their types: their arithmetic is
the program's, not the addressing's.

"That large" is more than 2^30 elements in some tensor parameter: half the int32 range,
so an index that overshoots its buffer before a predicate discards it (an edge tile
of a template, at most one tile per dimension) cannot wrap either. A symbolic extent
counts with the largest value its integer type holds. Kernels whose buffers are all
smaller are left untouched, so their generated source is byte-identical.
"""
from __future__ import annotations

import math
from typing import Any

import attrs

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Call, Cast, Constant, Dereference, Expr, TensorElement, TensorSlice, Var
from hidet_framework.ir.func import Function, IRModule
from hidet_framework.ir.functors import collect, substitute
from hidet_framework.ir.stmt import AssignStmt, DeclareStmt, ForMappingStmt, ForStmt, LetStmt
from hidet_framework.ir.types import TensorType
from hidet_framework.lowering.pass_base import ModulePass

WIDE_THRESHOLD = 2**30  # elements; see the module docstring


def _is_int32(t: Any) -> bool:
    return isinstance(t, DataType) and t.name == "int32" and t.lanes == 1


def _extent_bound(d: Any) -> float:
    """The largest value an extent can take (inf when unknown)."""
    if isinstance(d, int):
        return d
    if isinstance(d, Constant) and isinstance(d.value, int):
        return d.value
    t = getattr(d, "type", None) if isinstance(d, Var) else None
    if isinstance(t, DataType) and t.name.startswith(("int", "uint")):
        return 2 ** (t.bits - (0 if t.name.startswith("uint") else 1)) - 1
    return math.inf


def max_elements(fn: Function) -> float:
    """The most elements any tensor parameter of `fn` can have."""
    most = 0.0
    for p in fn.params:
        if isinstance(p.type, TensorType):
            most = max(most, math.prod(_extent_bound(d) for d in p.type.shape))
    return most


def needs_wide_indices(fn: Function) -> bool:
    return max_elements(fn) > WIDE_THRESHOLD


def _is_index_arithmetic(value: Expr) -> bool:
    """No element is loaded from memory, and every variable is an integer scalar."""
    if collect(value, (TensorElement, TensorSlice, Dereference)):
        return False
    for v in collect(value, Var):
        t = v.type
        if not (isinstance(t, DataType) and t.name.startswith(("int", "uint")) and t.lanes == 1):
            return False
    return all(not isinstance(c, Call) or isinstance(getattr(c, "ret_type", None), DataType)
               for c in collect(value, Call))


ENTRY_KINDS = ("public", "cpu_kernel", "cuda_kernel")  # called from Python: their ABI stays


class WidenIndexArithmetic(ModulePass):
    name = "widen_index_arithmetic"

    def run(self, module: IRModule, ctx: Any) -> IRModule:
        # Helpers receive offsets from the kernels that call them (often through pointer
        # parameters, whose extent is unknown): the whole module widens together.
        if not any(needs_wide_indices(fn) for fn in module.functions.values()):
            return module
        new = {name: _widen(fn) for name, fn in module.functions.items()}
        return module.with_functions(new)


def _widen(fn: Function) -> Function:
    mapping: dict[Var, Expr] = {}
    for s in collect(fn.body, (ForStmt, LetStmt)):
        if _is_int32(s.var.type) and (isinstance(s, ForStmt) or _is_index_arithmetic(s.value)):
            mapping[s.var] = Var(s.var.hint, dtypes.int64)
    assigned: dict[Var, list[Expr]] = {}
    for s in collect(fn.body, AssignStmt):
        assigned.setdefault(s.var, []).append(s.value)
    for s in collect(fn.body, DeclareStmt):  # a mutable index: every value it takes is index arithmetic
        values = ([s.init] if s.init is not None else []) + assigned.get(s.var, [])
        if _is_int32(s.var.type) and all(_is_index_arithmetic(v) for v in values):
            mapping[s.var] = Var(s.var.hint, dtypes.int64)
    for s in collect(fn.body, ForMappingStmt):  # lowered before this pass; kept for safety
        for v in s.vars:
            if _is_int32(v.type):
                mapping[v] = Var(v.hint, dtypes.int64)
    params = list(fn.params)
    for k, p in enumerate(fn.params):
        if not _is_int32(p.type):
            continue
        if fn.kind in ENTRY_KINDS:
            mapping[p] = Cast(p, dtypes.int64)
        else:  # an internal helper: its int32 offsets become int64 parameters
            params[k] = mapping[p] = Var(p.hint, dtypes.int64)
    if not mapping:
        return fn
    return attrs.evolve(fn, params=tuple(params) if params != list(fn.params) else fn.params,
                        body=substitute(fn.body, mapping))
