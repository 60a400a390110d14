"""A Task: the compute definitions of one operator, from its inputs to its outputs.

A task knows whether it is injective (no reduction anywhere), the inverse index map
of a bijective task (input index → output index: what epilogue fusion needs), its
stages (the computed tensors that must be materialised: outputs and reductions others
read), and a stable fingerprint (same math and shapes → same fingerprint, across
processes; names do not matter).
"""
from __future__ import annotations

import weakref
from typing import Any, Mapping, Optional

import attrs

from hidet_framework.compute.definitions import (
    ComputeRewriter, ComputeVisitor, TensorNode, contains_reduce, substitute_compute, tensors_read,
)
from hidet_framework.ir.equality import structural_hash
from hidet_framework.ir.expr import Expr, TensorElement, Var, var
from hidet_framework.ir import dtypes


@attrs.frozen(eq=False)
class InverseMap:
    """For a bijective task: the output index of an input element.

    :param axes: one variable per input dimension.
    :param out_indices: the output index, as expressions over `axes`.
    """

    axes: tuple
    out_indices: tuple


@attrs.frozen(eq=False)
class Task:
    """The math of one operator.

    :param name: operator/task name.
    :param inputs: input tensors (`tensor_input`).
    :param outputs: computed output tensors.
    :param attributes: operator attributes that change the math (kept in the fingerprint).
    :param inverse_maps: inverse maps given by the operator (e.g. reshape); detected
        for elementwise and permutation tasks when not given.
    """

    name: str
    inputs: tuple = attrs.field(converter=tuple)
    outputs: tuple = attrs.field(converter=tuple)
    attributes: Mapping[str, Any] = attrs.field(factory=dict)
    inverse_maps: Mapping[TensorNode, InverseMap] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for t in self.outputs:
            if not isinstance(t, TensorNode) or t.is_input():
                raise TypeError(f"task {self.name!r}: outputs must be computed tensors, got {t}")
        missing = [t.name for t in self.tensors() if t.is_input() and t not in self.inputs]
        if missing:
            raise ValueError(f"task {self.name!r} reads tensors that are not among its inputs: {missing}")

    # ---------------------------------------------------------------- structure
    def tensors(self) -> list[TensorNode]:
        """Every tensor reachable from the outputs, producers before consumers."""
        order: list[TensorNode] = []
        seen: set[int] = set()

        def visit(t: TensorNode) -> None:
            if id(t) in seen:
                return
            seen.add(id(t))
            if t.definition is not None:
                for src in tensors_read(t.definition.value):
                    visit(src)
            order.append(t)

        for t in self.inputs:
            visit(t)
        for t in self.outputs:
            visit(t)
        return order

    def is_injective(self) -> bool:
        """No reduction anywhere: every output element is a function of input elements."""
        return not any(t.definition is not None and contains_reduce(t.definition.value) for t in self.tensors())

    def stages(self) -> list[TensorNode]:
        """Computed tensors that get their own loop nest: the outputs and every
        intermediate that holds a reduction (injective intermediates are inlined)."""
        return [t for t in self.tensors() if t.definition is not None
                and (t in self.outputs or contains_reduce(t.definition.value))]

    def inlined_value(self, t: TensorNode) -> Expr:
        """The definition of `t` with every injective intermediate it reads replaced by
        its own (inlined) definition."""
        return _Inliner(self).visit(t.definition.value)

    # ------------------------------------------------------------ bijectivity
    def inverse_map(self, inp: TensorNode) -> Optional[InverseMap]:
        """The inverse index map from `inp` to the single output, when the task is a
        bijection between them (elementwise, permutation, or given by the operator)."""
        if inp in self.inverse_maps:
            return self.inverse_maps[inp]
        if len(self.outputs) != 1 or not self.is_injective():
            return None
        out = self.outputs[0]
        reads = _element_reads(self.inlined_value(out), inp)
        if len(reads) != 1 or any(isinstance(x, Expr) for x in inp.shape + out.shape):
            return None
        axes = out.definition.axes
        indices = reads[0].indices
        if len(indices) != len(axes) or sorted(map(id, indices)) != sorted(map(id, axes)):
            return None
        # out[axes] reads inp[indices] with indices a permutation of axes
        if [out.shape[axes.index(i)] for i in indices] != list(inp.shape):
            return None
        in_axes = tuple(var(f"j{d}", dtypes.int32) for d in range(len(indices)))
        by_axis = {id(ax): in_axes[k] for k, ax in enumerate(indices)}
        return InverseMap(in_axes, tuple(by_axis[id(ax)] for ax in axes))

    def is_bijective(self, inp: TensorNode) -> bool:
        return self.inverse_map(inp) is not None

    # ------------------------------------------------------------ fingerprint
    def fingerprint(self) -> str:
        """Stable across processes: the compute DAG's structure, dtypes, shapes and
        attributes; not the names.

        Remembered per task (a graph compile asks for it about 20 times a task): the
        compute DAG is frozen, so only the attributes' text can change, and the
        remembered value is used only while that text is the same."""
        attrs_text = repr(sorted((str(k), repr(v)) for k, v in self.attributes.items()))
        known = _FINGERPRINTS.get(self)
        if known is not None and known[0] == attrs_text:
            return known[1]
        parts: list[Any] = [list(self.inputs), list(self.outputs)]
        for t in self.tensors():
            if t.definition is not None:
                parts.append([t, list(t.definition.axes), t.definition.value])
        fingerprint = structural_hash([parts, attrs_text])[:24]
        _FINGERPRINTS[self] = (attrs_text, fingerprint)
        return fingerprint


# Task -> (attributes' text, fingerprint); by identity (Task has eq=False), dropped with the task.
_FINGERPRINTS: "weakref.WeakKeyDictionary[Task, tuple[str, str]]" = weakref.WeakKeyDictionary()


class _Inliner(ComputeRewriter):
    def __init__(self, task: Task) -> None:
        self.task = task

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        e = super().visit_TensorElement(e)
        base = e.base
        if (isinstance(base, TensorNode) and base.definition is not None
                and base not in self.task.outputs and not contains_reduce(base.definition.value)):
            mapping = dict(zip(base.definition.axes, e.indices))
            return self.visit(substitute_compute(base.definition.value, mapping))
        return e


class _ElementReads(ComputeVisitor):
    def __init__(self, tensor: Var) -> None:
        self.tensor = tensor
        self.found: list[TensorElement] = []

    def visit_TensorElement(self, e: TensorElement) -> None:
        if e.base is self.tensor:
            self.found.append(e)
        super().visit_TensorElement(e)


def _element_reads(value: Expr, tensor: Var) -> list[TensorElement]:
    c = _ElementReads(tensor)
    c.visit(value)
    return c.found
