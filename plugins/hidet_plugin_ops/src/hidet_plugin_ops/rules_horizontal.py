"""Horizontal matmul fusion: the matmuls that read one input with constant weights
become one matmul on the weights side by side, each old product a slice of it.

    y_i = x @ W_i (+ b_i)            i = 1..k, every W_i [K, N_i] from constants
    ->  Y = x @ [W_1 | ... | W_k] (+ [b_1 | ... | b_k]),   y_i = Y[..., o_i : o_i + N_i]

BERT's query, key and value projections (three 128x768x768 launches a layer) become
one 128x2304x768 launch, as GPT-2 exports them. What the rule keeps:

- **Members.** Every reader of `x` that is a canonical ``matmul`` with `x` as its
  left operand (position 0), an unbatched right operand computed from constants
  only (constant folding makes it one), the dtype of the others and the same output
  shape except the last extent. A matmul reading `x` as its weight, one with a
  batched or computed weight, or one of another dtype is not a member and stays as
  it was. Fewer than two members: nothing happens.
- **Biases.** A member whose product is read exactly once, by an ``add`` with a
  constant of the product's dtype that varies along the last axis only ([N_i] or
  [1, ..., 1, N_i]), and is not a graph output, takes that bias into the wide
  product (the members without one get zeros there), so the add is the wide
  matmul's epilogue and each slice replaces the ``add``. Any other reader (a
  residual add, a second reader, a bias over rows) stays after the slice.
- **Epilogues.** Everything that followed a member (reshapes, transposes, a scale)
  follows its slice unchanged. Fusion stores the wide product (it has k readers)
  and grafts each slice with what follows onto the next kernel's loads (the
  attention kernel reads q, kt and v through them), so the slices are never copies.

The rule runs at phase 0 (before the CPU's weight prepacking and the im2col
rewrite see the matmuls) and reads who else reads `x` through the engine's
`GraphUses` (``needs_uses``). Every member of a group is visited in the same round
and must get slices of one wide product: the groups built in a round are kept, keyed
by their members' output tensors and the tails they are replaced at (the same anchors in
another graph may have other tails), so a member met later reuses its group's product.
That machinery is `HorizontalRule`, shared with the horizontal conv2d rule
(``rules_horizontal_conv.py``); `HorizontalMatmul` says who the members are and how the
wide product is built.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import attrs
import numpy as np

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor, constant

from . import binary, shape_layout, shape_select

MAX_REMEMBERED = 512  # groups kept between the visits of their members (a few per layer)


@attrs.frozen
class Member:
    """One operator of a horizontal group: its `anchor` (the matmul or conv2d reading the
    shared input), the `tail` operator whose output its slice replaces (None: the
    anchor's), and, for a matmul, the constant `bias` the tail (an add) puts on it."""
    anchor: Operator
    tail: Operator | None = None
    bias: Tensor | None = None


def _registered_matmul():
    from hidet_framework.extension import plugin_host

    ops = plugin_host().operators
    return ops["matmul"] if "matmul" in ops else None


def _weight_ok(op: Operator, x: Tensor) -> bool:
    a = op.attributes
    if op.name != "matmul" or len(op.inputs) != 2 or op.inputs[0] is not x or a.get("b_batched"):
        return False
    w = op.inputs[1]
    return w.dtype is x.dtype and w.rank in (2, 3) and w.computed_from_constants()


def _bias_of(op: Operator, uses: Any) -> tuple[Tensor, Operator] | None:
    """The constant bias an ``add`` puts on `op`'s product alone, with that add."""
    out = op.outputs[0]
    readers = uses.readers(out)
    if not readers or len(readers) != 1 or uses.is_output(out):
        return None
    add, pos = readers[0]
    if add.name != "add" or len(add.inputs) != 2 or add.inputs[1 - pos] is out:
        return None
    bias, n = add.inputs[1 - pos], out.shape[-1]
    if (bias.dtype is not out.dtype or add.outputs[0].dtype is not out.dtype
            or tuple(add.outputs[0].shape) != tuple(out.shape) or not bias.computed_from_constants()
            or bias.rank > out.rank or bias.rank < 1 or bias.shape[-1] != n or any(s != 1 for s in bias.shape[:-1])):
        return None
    return bias, add


def _members(x: Tensor, uses: Any) -> list[Member] | None:
    readers = uses.readers(x)
    if readers is None:
        return None
    found: list[Member] = []
    for op, pos in readers:
        if pos != 0 or not _weight_ok(op, x) or any(op is m.anchor for m in found):
            continue
        bias, add = _bias_of(op, uses) or (None, None)
        found.append(Member(op, add, bias))
    if len(found) < 2:
        return None
    lead = tuple(found[0].anchor.outputs[0].shape[:-1])
    if any(tuple(m.anchor.outputs[0].shape[:-1]) != lead for m in found):
        return None
    return found


def side_by_side(parts: list[Tensor], shapes: list[tuple], axis: int = -1) -> Tensor:
    """The parts, each viewed as `shapes[i]`, joined along `axis`: one constant when all
    are constants, else a concat that constant folding evaluates."""
    if all(t.is_constant() for t in parts):
        arrays = [np.asarray(t.storage).reshape(s) for t, s in zip(parts, shapes)]
        return constant(np.concatenate(arrays, axis=axis), dtype=parts[0].dtype)
    views = [t if tuple(t.shape) == tuple(s) else shape_layout.reshape(t, list(s)) for t, s in zip(parts, shapes)]
    return shape_select.concat(views, axis=axis if axis >= 0 else len(shapes[0]) + axis)


def zeros_or(bias: Tensor | None, n: int, dtype: Any) -> Tensor:
    """`bias`, or n zeros of `dtype` for a member without one."""
    return bias if bias is not None else constant(np.zeros(n, dtype=np.float64), dtype=dtype)


class HorizontalRule:
    """What every horizontal rule does with a group of members (the module docstring):
    visited at a member's replacement point (its tail, else its anchor), it builds the
    group's wide result once (remembered for the other members of the round) and
    returns the member's slice of it along `axis`. A subclass says who the members
    are (`members`) and how the wide result is built (`build`)."""

    anchor_name = ""
    axis = -1  # the axis the members' results are side by side on

    def __init__(self) -> None:
        self._groups: OrderedDict[tuple, Tensor] = OrderedDict()

    def members(self, anchor: Operator, uses: Any) -> list[Member] | None:
        raise NotImplementedError

    def build(self, x: Tensor, members: list[Member]) -> Tensor | None:
        raise NotImplementedError

    def width(self, member: Member) -> int:
        return int(member.anchor.outputs[0].shape[self.axis])

    def rewrite(self, op: Operator, uses: Any) -> list[Tensor] | None:
        if op.name == self.anchor_name:
            candidates = [op]
        else:  # a tail: the bias add or activation of a member?
            candidates = [t.producer for t in op.inputs
                          if t.producer is not None and t.producer.name == self.anchor_name]
        for anchor in candidates:
            members = self.members(anchor, uses) if anchor.inputs else None
            mine = next((k for k, m in enumerate(members or ()) if m.anchor is anchor), None)
            # a member with a tail is replaced at its tail, one without at its anchor
            if mine is not None and members[mine].tail is (None if op is anchor else op):
                return self._replace(anchor.inputs[0], members, mine)
        return None

    def _wide(self, x: Tensor, members: list[Member]) -> Tensor | None:
        # the tails are part of the key: the same anchors traced into another graph (a
        # product returned there, say) may have other tails, so another wide result
        key = tuple((m.anchor.outputs[0].uid, m.tail.outputs[0].uid if m.tail else None) for m in members)
        if key in self._groups:
            self._groups.move_to_end(key)
            return self._groups[key]
        wide = self.build(x, members)
        if wide is None:
            return None
        self._groups[key] = wide
        while len(self._groups) > MAX_REMEMBERED:
            self._groups.popitem(last=False)
        return wide

    def _replace(self, x: Tensor, members: list[Member], mine: int) -> list[Tensor] | None:
        wide = self._wide(x, members)
        member = members[mine]
        expected = (member.tail or member.anchor).outputs[0]
        if wide is None or wide.rank != expected.rank or wide.dtype is not expected.dtype:
            return None
        axis = self.axis % wide.rank
        start = sum(self.width(m) for m in members[:mine])
        part = shape_select.slice_(wide, [start], [start + self.width(member)], [axis])
        return [part] if tuple(part.shape) == tuple(expected.shape) else None


class HorizontalMatmul(HorizontalRule):
    """The matmul rule (module docstring)."""

    anchor_name = "matmul"

    def members(self, anchor: Operator, uses: Any) -> list[Member] | None:
        return _members(anchor.inputs[0], uses)

    def build(self, x: Tensor, members: list[Member]) -> Tensor | None:
        matmul = _registered_matmul()
        if matmul is None:
            return None
        k = int(x.shape[-1])
        widths = [self.width(m) for m in members]
        rank = max(m.anchor.inputs[1].rank for m in members)
        lead = (1,) * (rank - 2)
        wide = matmul(x, side_by_side([m.anchor.inputs[1] for m in members], [(*lead, k, n) for n in widths]))
        if any(m.bias is not None for m in members):
            dtype = members[0].anchor.outputs[0].dtype
            biases = [zeros_or(m.bias, n, dtype) for m, n in zip(members, widths)]
            wide = binary.add(wide, side_by_side(biases, [(n,) for n in widths]))
        return wide


def split_to_slices(op: Operator, uses: Any) -> list[Tensor] | None:
    """``split`` -> one ``slice`` per output, where every output is read by exactly one
    injective operator and is not a graph output: each slice then joins its reader's
    group (a prologue of the kernel after it), so the pieces are never copied out, as
    one multi-output split kernel must (GPT-2's query/key/value split: 12 launches).
    Left alone otherwise: an output read twice or by a reduction would make its slice
    a kernel of its own, k launches where the split is one."""
    if op.name != "split" or len(op.inputs) != 1:
        return None
    for out in op.outputs:
        readers = uses.readers(out)
        if not readers or len(readers) != 1 or uses.is_output(out) or len(readers[0][0].outputs) != 1 \
                or not readers[0][0].task.is_injective():
            return None
    x, axis, offset, parts = op.inputs[0], int(op.attributes["axis"]), 0, []
    for out in op.outputs:
        size = int(out.shape[axis])
        parts.append(shape_select.slice_(x, [offset], [offset + size], [axis]))
        offset += size
    if any(tuple(p.shape) != tuple(o.shape) for p, o in zip(parts, op.outputs)):
        return None
    return parts


RULES: tuple[RewriteRule, ...] = (
    RewriteRule("fuse_horizontal_matmul", ("matmul", "add"), HorizontalMatmul().rewrite, phase=0, needs_uses=True,
                description="matmuls reading one input with constant weights as one wide matmul and slices"),
    RewriteRule("split_to_slices", ("split",), split_to_slices, phase=0, needs_uses=True,
                description="a split whose pieces each feed one injective reader as slices fusion grafts"),
)
