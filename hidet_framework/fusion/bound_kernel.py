"""A scheduled task opened up for grafting: every launched function's buffer
parameters bound to the buffers they receive, named by keys the caller chooses.

A ScheduledTask says which buffer each parameter gets only through its launches
(``Launch.buffers[p]`` feeds ``params[p]``; scalars follow). Grafting replaces a
parameter by others (a producer's inputs, a consumer's output), so it works on this
form — function bodies plus one key per buffer parameter — and turns it back into a
ScheduledTask over the fused group's inputs and outputs at the end.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from hidet_framework.fusion.plan import FusionError
from hidet_framework.ir.expr import Address, TensorElement, Var, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.functors import IRVisitor
from hidet_framework.ir.stmt import BufferStoreStmt
from hidet_framework.ir.types import TensorType
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask


class _ParamUses(IRVisitor):
    """Finds the first use of `param` that grafting cannot rewrite: anything but a
    full-rank element read (``mode == "read"``) or element store (``"write"``)."""

    def __init__(self, param: Var, mode: str) -> None:
        self.param, self.mode = param, mode
        self.rank = len(param.type.shape)
        self.problem = ""

    def _fail(self, what: str) -> None:
        self.problem = self.problem or what

    def visit_TensorElement(self, e: TensorElement) -> None:
        if e.base is self.param:
            if self.mode != "read":
                self._fail("reads back its output")
            elif len(e.indices) != self.rank:
                self._fail(f"reads it with {len(e.indices)} indices (rank {self.rank})")
            self.visit_seq(e.indices)
            return
        super().visit_TensorElement(e)

    def visit_Address(self, e: Address) -> None:
        if isinstance(e.expr, TensorElement) and e.expr.base is self.param:
            self._fail("takes the address of an element")
        super().visit_Address(e)

    def visit_BufferStoreStmt(self, s: BufferStoreStmt) -> None:
        if s.base is self.param:
            if self.mode != "write":
                self._fail("writes to an input")
            elif len(s.indices) != self.rank:
                self._fail(f"stores with {len(s.indices)} indices (rank {self.rank})")
            self.visit_seq(s.indices)
            self.visit(s.value)
            return
        super().visit_BufferStoreStmt(s)

    def visit_Var(self, e: Var) -> None:
        if e is self.param:
            self._fail("uses the tensor other than through elements (a pointer, a slice, a call argument)")


def check_param_uses(fn: Function, param: Var, mode: str, shape: Sequence[int]) -> None:
    """Raise FusionError unless `fn` touches `param` only through element reads
    (``mode == "read"``) or element stores (``"write"``) of a row-major tensor of
    `shape` — the template contract that makes a graft a plain substitution."""
    where = f"function {fn.name!r}, parameter {param.hint!r}"
    ptype = param.type
    if not isinstance(ptype, TensorType) or ptype.layout is not None:
        raise FusionError(f"{where}: not a row-major tensor parameter ({ptype})")
    if tuple(ptype.shape) != tuple(int(s) for s in shape):
        raise FusionError(f"{where}: declared {ptype}, the buffer has shape {list(shape)}")
    uses = _ParamUses(param, mode)
    uses.visit(fn.body)
    if uses.problem:
        raise FusionError(f"{where}: the kernel {uses.problem}")


def tensor_param(hint: str, dtype: Any, shape: Sequence[int]) -> Var:
    """A fresh row-major tensor parameter for a buffer the graft adds."""
    return var(hint, TensorType(dtype, tuple(int(s) for s in shape)))


class BoundKernel:
    """The functions of a ScheduledTask with each launched function's buffer
    parameters bound to keys.

    :param scheduled: what the anchor's template or the auto-scheduler produced.
    :param input_keys: the key of each of its input buffers (``BufferRef("input", k)``).
    :param output_keys: the key of each output buffer. Workspace ``k`` gets the key
        ``("workspace", k)``.
    """

    def __init__(self, scheduled: ScheduledTask, input_keys: Sequence[Hashable],
                 output_keys: Sequence[Hashable]) -> None:
        self.name = scheduled.module.name
        self.functions: dict[str, Function] = dict(scheduled.module.functions)
        self.workspace = tuple(scheduled.workspace)
        self.source, self.params = scheduled.source, scheduled.params
        self.stores_once = scheduled.stores_once  # grafts replace each store by one store: kept
        self.calls = [(launch.function, tuple(launch.scalars)) for launch in scheduled.launches]
        self.bindings: dict[str, list[Hashable]] = {}
        bound = scheduled.bind(input_keys, output_keys, [("workspace", k) for k in range(len(self.workspace))])
        for name, buffers, scalars in bound:
            keys = list(buffers)
            if self.bindings.setdefault(name, keys) != keys:
                # one function over two sets of buffers: a graft would have to fork it
                raise FusionError(f"function {name!r} is launched over different buffers")
            fn = self.functions[name]
            if len(fn.params) != len(keys) + len(scalars):
                raise FusionError(f"function {fn.name!r} takes {len(fn.params)} parameters, its launch "
                                  f"passes {len(keys)} buffers and {len(scalars)} scalars")

    def sites(self, key: Hashable) -> list[tuple[str, Var]]:
        """(function name, parameter) for every buffer parameter bound to `key`."""
        out = []
        for name, keys in self.bindings.items():
            params = self.functions[name].params
            out += [(name, params[p]) for p, k in enumerate(keys) if k == key]
        return out

    def update(self, name: str, body: Any, drop: Var, add: Sequence[tuple[Var, Hashable]],
               replace_with: tuple[Var, Hashable] | None = None) -> None:
        """Function `name` gets `body`; its buffer parameter `drop` is removed (or
        replaced in place by `replace_with`) and the `add` ones are appended after the
        buffer parameters (scalars stay last)."""
        fn, keys = self.functions[name], self.bindings[name]
        buffers = list(zip(fn.params[:len(keys)], keys))
        scalars = list(fn.params[len(keys):])
        if replace_with is None:
            buffers = [(p, k) for p, k in buffers if p is not drop]
        else:
            buffers = [replace_with if p is drop else (p, k) for p, k in buffers]
        buffers += list(add)
        self.functions[name] = Function(fn.name, [p for p, _ in buffers] + scalars, body, fn.kind,
                                        fn.ret_type, fn.attrs)
        self.bindings[name] = [k for _, k in buffers]

    def to_scheduled(self, input_keys: Sequence[Hashable], output_keys: Sequence[Hashable],
                     name: str) -> ScheduledTask:
        """The ScheduledTask whose input k is `input_keys[k]` and output k is
        `output_keys[k]`; every parameter must be bound to one of those or a workspace."""
        refs: dict[Hashable, BufferRef] = {("workspace", k): BufferRef("workspace", k)
                                           for k in range(len(self.workspace))}
        refs.update({key: BufferRef("input", k) for k, key in enumerate(input_keys)})
        refs.update({key: BufferRef("output", k) for k, key in enumerate(output_keys)})
        launches = []
        for fname, scalars in self.calls:
            missing = [k for k in self.bindings[fname] if k not in refs]
            if missing:
                raise FusionError(f"function {fname!r} still uses {missing[0]}, which is neither an "
                                  "input nor an output of the fused group")
            launches.append(Launch(fname, tuple(refs[k] for k in self.bindings[fname]), scalars))
        return ScheduledTask(module(name, list(self.functions.values())), tuple(launches), self.workspace,
                             source=self.source, params=self.params, stores_once=self.stores_once)
