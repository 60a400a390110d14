"""In-place epilogues: which outputs of a fused kernel may be written into the buffer
of one of its inputs (``ScheduledTask.output_aliases``).

A grafted epilogue reads its other inputs at the output's own index (a residual
``y = relu(conv(x) + r)`` stores ``y[i] = relu(acc + r[i])``). When `r` dies at that
kernel, `y` can take r's bytes: each element of r is read once, just before the same
element of y is written, so the kernel makes one read-modify-write pass over a buffer
in place of reading r and writing a cold y (two streams and a read-for-ownership).
The compiled graph's memory planner does that (``runtime/memory_plan.py``,
``BufferLifetime.alias_of``) for the pairs this module proves, and only for those:

1. the schedule promises that every element of every output is stored exactly once
   and no output is read back (``ScheduledTask.stores_once``: a template's word;
   grafting keeps it, since each store becomes exactly one store);
2. one launch binds output ``o`` and input ``i`` (one parameter each; no other launch
   binds either), both row-major tensors of the same dtype and shape;
3. in that function the input is used only through element reads that sit in the
   value of a store into ``o`` — or in the values of the ``let`` chain that ends in
   that store, as a chain of grafts leaves it — at exactly the store's indices (the
   same expressions over the same variables); the input is never stored to, passed
   on, or addressed, and the output only stored to.

Then every read of ``r[I]`` happens in the statement that stores ``y[I]``, before the
store, and no other statement stores ``y[I]``: bound to one buffer, r's element is
read before it is overwritten and never read after, on any thread. The printed C then
declares those two parameters without ``__restrict__`` (``ALIASED_PARAMS``), which is
what the C standard requires of pointers to the same object.
"""
from __future__ import annotations

from typing import Any

import attrs

from hidet_framework.ir.equality import StructuralMismatch, _Comparer
from hidet_framework.ir.expr import Address, TensorElement, Var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.functors import IRVisitor
from hidet_framework.ir.stmt import BufferStoreStmt, LetStmt
from hidet_framework.ir.types import TensorType
from hidet_framework.schedule.scheduled_task import ScheduledTask

__all__ = ["ALIASED_PARAMS", "aliasable_pairs", "with_output_aliases", "same_expr", "why_not_in_place"]

# Function.attrs key: positions of parameters that may point into the same buffer as
# another parameter (printed without __restrict__)
ALIASED_PARAMS = "aliased_params"


class _Identical(_Comparer):
    def compare_var(self, a: Any, b: Any, path: str) -> None:
        if a is not b:
            raise StructuralMismatch(path, "different variables")


def same_expr(a: Any, b: Any) -> bool:
    """The same expression: equal structure over the *same* variables (``x[i, j]`` and
    ``x[j, i]`` differ; `structural_equal` would match them up to renaming)."""
    try:
        _Identical().compare(a, b, "")
    except StructuralMismatch:
        return False
    return True


class _InPlaceUses(IRVisitor):
    """Finds the first use of `src` (the input) or `dst` (the output) that breaks rule 3."""

    def __init__(self, src: Var, dst: Var) -> None:
        self.src, self.dst = src, dst
        self.at: tuple | None = None  # indices of the store into dst whose values are being visited
        self.stores = 0
        self.problem = ""

    def _fail(self, what: str) -> None:
        self.problem = self.problem or what

    def visit_LetStmt(self, s: LetStmt) -> None:
        tail = s
        while isinstance(tail, LetStmt):
            tail = tail.body
        if not (isinstance(tail, BufferStoreStmt) and tail.base is self.dst):
            super().visit_LetStmt(s)
            return
        saved, self.at = self.at, tail.indices   # a chain of grafts ending in a store into dst
        while isinstance(s, LetStmt):
            self.visit(s.value)
            s = s.body
        self.at = saved
        self.visit(s)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> None:
        if s.base is self.src:
            self._fail("stores into the input")
        saved, self.at = self.at, None
        self.visit_seq(s.indices)
        if s.base is self.dst:
            self.stores += 1
            self.at = s.indices
        self.visit(s.value)
        self.at = saved
        if s.base is not self.src and s.base is not self.dst:
            self.visit(s.base)

    def visit_TensorElement(self, e: TensorElement) -> None:
        if e.base is self.dst:
            self._fail("reads the output")
        elif e.base is self.src:
            if self.at is None:
                self._fail("reads the input outside a store into the output")
            elif len(e.indices) != len(self.at) or not all(same_expr(a, b) for a, b in zip(e.indices, self.at)):
                self._fail("reads the input at another index than the output's")
            saved, self.at = self.at, None
            self.visit_seq(e.indices)
            self.at = saved
            return
        super().visit_TensorElement(e)

    def visit_Address(self, e: Address) -> None:
        if isinstance(e.expr, TensorElement) and e.expr.base in (self.src, self.dst):
            self._fail("takes the address of an element")
        super().visit_Address(e)

    def visit_Var(self, e: Var) -> None:
        if e is self.src or e is self.dst:
            self._fail("uses the buffer other than through elements")


def why_not_in_place(scheduled: ScheduledTask, output: int, inp: int) -> str:
    """'' when output `output` may take input `inp`'s buffer (rules 1-3), else why not."""
    if not scheduled.stores_once:
        return "the schedule does not promise to store each output element once"
    places = {"output": [], "input": []}
    for launch in scheduled.launches:
        fn = scheduled.module.functions[launch.function]
        for p, ref in enumerate(launch.buffers):
            if (ref.kind, ref.index) in (("output", output), ("input", inp)):
                places[ref.kind].append((launch.function, fn, p))
    if len(places["output"]) != 1 or len(places["input"]) != 1:
        return "the output and the input are not each bound once, by one launch"
    (fname, fn, po), (fname_in, _, pi) = places["output"][0], places["input"][0]
    if fname != fname_in:
        return "the input is read by another launch than the one that stores the output"
    dst, src = fn.params[po], fn.params[pi]
    for v in (dst, src):
        if not isinstance(v.type, TensorType) or v.type.layout is not None:
            return "not a row-major tensor parameter"
    if dst.type.dtype is not src.type.dtype or tuple(dst.type.shape) != tuple(src.type.shape):
        return "the input and the output differ in dtype or shape"
    uses = _InPlaceUses(src, dst)
    uses.visit(fn.body)
    if not uses.problem and not uses.stores:
        return "the function never stores the output"
    return uses.problem


def aliasable_pairs(scheduled: ScheduledTask, num_inputs: int, num_outputs: int) -> tuple:
    """Every ``(output, input)`` pair of `scheduled` proven safe in place (the module
    docstring), outputs in order, then inputs: the compiled graph gives an output the
    first of its inputs that dies there."""
    return tuple((o, i) for o in range(num_outputs) for i in range(num_inputs)
                 if not why_not_in_place(scheduled, o, i))


def with_output_aliases(scheduled: ScheduledTask, num_inputs: int, num_outputs: int) -> ScheduledTask:
    """`scheduled` with its provable in-place pairs recorded (``output_aliases``) and
    their parameters marked `ALIASED_PARAMS` in the launched function (no restrict)."""
    pairs = aliasable_pairs(scheduled, num_inputs, num_outputs)
    if not pairs:
        return scheduled
    functions = dict(scheduled.module.functions)
    for o, i in pairs:
        for launch in scheduled.launches:
            positions = [p for p, ref in enumerate(launch.buffers)
                         if (ref.kind, ref.index) in (("output", o), ("input", i))]
            if positions:
                fn = functions[launch.function]
                marked = tuple(sorted(set(fn.attrs.get(ALIASED_PARAMS, ())) | set(positions)))
                functions[launch.function] = Function(fn.name, fn.params, fn.body, fn.kind, fn.ret_type,
                                                      {**fn.attrs, ALIASED_PARAMS: marked})
    return attrs.evolve(scheduled, module=module(scheduled.module.name, list(functions.values())),
                        output_aliases=pairs)
