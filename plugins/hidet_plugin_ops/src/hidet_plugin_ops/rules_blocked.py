"""The CPU rewrite rules that put inverted-residual blocks in the channel-blocked layout.

MobileNet-style blocks run ``1x1 expansion → clip → depthwise 3x3 → clip → 1x1
projection``. On the CPU (rules with ``targets=("cpu",)``, phase 2: after the weights
of the convolutions are packed, `cpu_conv.PACK_RULE`):

1. `blocked_depthwise`: a float32 depthwise conv2d (multiplier 1, constant weights)
   whose input is a ``conv2d_packed`` followed only by elementwise operators (the
   clip), and whose output reaches a 1x1 ``conv2d_packed`` over elementwise operators
   only, each tensor on the way read by the next operator alone and none a graph
   output, becomes ``from_blocked(conv2d_depthwise_blocked(xb, blocked_pack(W),
   blocked_pack(b)))`` (`cpu_blocked.py`; L the machine's float32 lanes), where ``xb``
   is the producing convolution rebuilt to write the blocked layout (``out_lanes``)
   with the elementwise operators applied to the blocked tensor.
2. `blocked_pointwise_input`: a 1x1 stride-1 ``conv2d_packed`` whose input is
   ``from_blocked(t)`` followed only by elementwise operators, each read by the next
   alone and none a graph output, reads the blocked ``t`` (the elementwise operators
   applied to it) and writes NCHW as before.

So these rules put the layout inside a block, between a convolution that writes it and a
1x1 that reads it, with no conversion kernel (`rules_blocked_chain.py`, at phase 3,
extends it along chains of convolutions); a depthwise convolution anywhere else
(a graph input, a consumer that cannot read the layout, a tensor read twice or
returned) keeps its NCHW kernel. Elementwise operators move into the layout only when
they read one tensor at the output's own index (their math does not depend on it).
The lanes past C hold zeros (zero weights and bias) and are never read as channels.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute import compute, tensor_input
from hidet_framework.compute.definitions import substitute_compute
from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Tensor
from hidet_framework.ir import dtypes

from .common import load, make_operator
from .cpu_blocked import (
    FROM_BLOCKED, blocked_lanes, blocked_pack, conv2d_depthwise_blocked, from_blocked,
)
from .cpu_conv import PACKED_OPERATOR, conv2d_packed
from .rules_blocked_chain import elementwise_form

__all__ = ["RULES", "reapply_elementwise"]


def _elementwise_form(op: Any) -> Any:
    """(value with the input read replaced by a hole, the hole) where `op` reads one
    tensor, of its output's shape, only at the output's own index, and its value does
    not depend on the index otherwise (`rules_blocked_chain.elementwise_form` of one
    input); else None."""
    form = elementwise_form(op)
    if form is None or len(form[1]) != 1:
        return None
    return form[0], form[1][0]


def reapply_elementwise(op: Any, x: Tensor) -> Tensor | None:
    """`op` (an elementwise operator of one input, `_elementwise_form`) applied to `x`
    of any shape; None where `op` is not of that form."""
    form = _elementwise_form(op)
    if form is None:
        return None
    value, hole = form
    xn = tensor_input("x0", x.dtype, x.shape)
    y = compute("y", list(x.shape), lambda *axes: substitute_compute(value, {hole: load(xn, list(axes))}),
                dtype=op.outputs[0].dtype)
    return make_operator(op.name, [x], [xn], [y], dict(op.attributes))[0]


def _private(t: Tensor, uses: Any) -> bool:
    """`t` is read by one operator only and is not a graph output."""
    return _only_reader(t, uses) is not None


def _only_reader(t: Tensor, uses: Any) -> Any:
    """The one operator reading `t` (at input 0) where `t` is not a graph output; else None."""
    readers = uses.original_readers(t)
    if readers is None or len(readers) != 1 or uses.is_output(t) or readers[0][1] != 0:
        return None
    return readers[0][0]


def _is_pointwise(op: Any) -> bool:
    """A 1x1 stride-1 unpadded ``conv2d_packed``: the template reads a blocked x there."""
    if op.name != PACKED_OPERATOR:
        return False
    a = op.attributes
    return tuple(op.inputs[1].shape[2:4]) == (1, 1) and tuple(a["stride"]) == (1, 1) \
        and tuple(a["padding"]) == (0,) * 4


def _feeds_pointwise(t: Tensor, uses: Any) -> bool:
    """`t` reaches a `_is_pointwise` convolution over private elementwise operators only."""
    while True:
        op = _only_reader(t, uses)
        if op is None:
            return False
        if _is_pointwise(op) and op.inputs[0].rank == 4:
            return True
        if _elementwise_form(op) is None:
            return False
        t = op.outputs[0]


def _chain_back(t: Tensor, uses: Any, stop: Any) -> tuple[Any, list] | None:
    """Walks from `t` back over private elementwise operators to a private producer
    `stop(op)` accepts: (that producer, the elementwise operators in graph order)."""
    chain = []
    while True:
        op = t.producer
        if op is None or not _private(t, uses):
            return None
        if stop(op):
            return op, chain[::-1]
        if _elementwise_form(op) is None:
            return None
        chain.append(op)
        t = op.inputs[0]


def _apply_chain(chain: list, t: Tensor) -> Tensor | None:
    for op in chain:
        t = reapply_elementwise(op, t)
        if t is None:
            return None
    return t


def _target_lanes() -> int:
    from hidet_framework.extension import plugin_host

    return blocked_lanes(plugin_host().backend_for("cpu").detect_target())


def _is_plain_packed(op: Any) -> bool:
    return op.name == PACKED_OPERATOR and op.inputs[0].rank == 4 and not op.attributes.get("out_lanes")


def blocked_depthwise(op: Any, uses: Any) -> list[Tensor] | None:
    if op.name != "conv2d" or len(op.inputs) < 2:
        return None
    x, weight = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    a = op.attributes
    if x.rank != 4 or weight.rank != 4 or x.dtype is not dtypes.float32 or weight.dtype is not dtypes.float32:
        return None
    c = x.shape[1]
    if int(a["groups"]) != c or c < 2 or tuple(weight.shape[:2]) != (c, 1) \
            or not weight.computed_from_constants() or (bias is not None and not bias.computed_from_constants()):
        return None
    lanes = _target_lanes()
    found = _chain_back(x, uses, _is_plain_packed)
    # only inside a block: the producer writes the layout and a 1x1 consumer reads it
    if lanes < 2 or found is None or not _feeds_pointwise(op.outputs[0], uses):
        return None
    conv, chain = found
    p = conv.inputs
    ca = conv.attributes
    yb = conv2d_packed(p[0], p[1], p[2] if len(p) > 2 else None, ca["out_channels"], ca["stride"], ca["padding"],
                       ca["dilation"], out_lanes=lanes)
    xb = _apply_chain(chain, yb)
    if xb is None:
        return None
    y = conv2d_depthwise_blocked(xb, blocked_pack(weight, lanes), blocked_pack(bias, lanes) if bias is not None else None,
                                 a["stride"], a["padding"], a["dilation"])
    out = from_blocked(y, c)
    return [out] if tuple(out.shape) == tuple(op.outputs[0].shape) else None


def blocked_pointwise_input(op: Any, uses: Any) -> list[Tensor] | None:
    if not _is_pointwise(op) or op.inputs[0].rank != 4:
        return None
    a = op.attributes
    found = _chain_back(op.inputs[0], uses, lambda p: p.name == FROM_BLOCKED)
    if found is None:
        return None
    conv, chain = found
    xb = _apply_chain(chain, conv.inputs[0])
    if xb is None:
        return None
    p = op.inputs
    return [conv2d_packed(xb, p[1], p[2] if len(p) > 2 else None, a["out_channels"], a["stride"], a["padding"],
                          a["dilation"], out_lanes=a.get("out_lanes", 0))]


RULES = (
    RewriteRule("cpu_blocked_depthwise", ("conv2d",), blocked_depthwise, phase=2, needs_uses=True, targets=("cpu",),
                description="float32 depthwise conv2d in the channel-blocked layout, its producing conv writing it"),
    RewriteRule("cpu_blocked_pointwise_input", (PACKED_OPERATOR,), blocked_pointwise_input, phase=2, needs_uses=True,
                targets=("cpu",), description="a 1x1 conv2d_packed reads a blocked tensor in place of from_blocked"),
)
