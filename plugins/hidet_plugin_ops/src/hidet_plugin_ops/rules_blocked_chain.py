"""The CPU rewrite rules that run chains of convolutions in the channel-blocked layout.

A ResNet backbone is convolutions joined by elementwise operators: the relu between
two convolutions, the residual add (and its relu) between one block's last 1x1 and the
next block's first. Three rules (``targets=("cpu",)``, phase 3: after the weights are
packed and after `rules_blocked.py`'s inverted-residual rules) put such a chain in the
layout of `cpu_blocked.py` (``[N, C/L, H, W, L]``, L the machine's float32 lanes) with
no conversion kernel inside it:

1. `chain_write`: a float32 ``conv2d_packed`` writing NCHW, its O a multiple of L,
   whose output reaches another ``conv2d_packed`` over elementwise operators only (any
   reader, `CHAIN_DEPTH` operators at most), writes the blocked layout:
   ``from_blocked(conv2d_packed(..., out_lanes=L))``.
2. `chain_elementwise`: an elementwise operator (each input of the output's shape read
   at the output's own index, its value independent of the index: the relu, the
   residual add) whose inputs are all ``from_blocked`` of L-lane tensors of the same
   channels runs on the blocked tensors: ``from_blocked(op(t1, t2, ...))``.
3. `chain_read`: a ``conv2d_packed`` whose x is ``from_blocked(t)`` reads ``t``.
4. `chain_pool`: a float32 ``max_pool2d`` whose x is ``from_blocked(t)`` (whole vectors
   of channels) runs on ``t`` (`cpu_max_pool_blocked.py`): ``from_blocked(max_pool2d_
   blocked(t))``; rule 1 looks through max pools as through elementwise operators, so
   ResNet-50's stem writes blocked and its 3x3/2 pool reads and writes blocked.
5. `chain_avg_pool`: the same for a float32 ``avg_pool2d`` (`cpu_avg_pool_blocked.py`).
6. `chain_concat`: a float32 ``concat`` along the channels whose inputs are all
   ``from_blocked`` of L-lane tensors holding whole vectors of channels (no lanes past
   C) joins the blocked tensors along their block axis: ``from_blocked(concat(t1, t2,
   ..., axis=1))``. Rule 1 looks through such concats and average pools too, so
   Inception-V3's blocks run blocked from end to end: each branch's last convolution
   writes blocked (an NCHW store of a 192-channel tile at 17x17 cost 5-10% of the
   convolution against onnxruntime's NCHWc), the concat joins whole blocks, and the
   next block's convolutions and pools read them.
7. `chain_mean`: a float32 ``reduce_mean`` over (H, W) of ``from_blocked(t)`` (a global
   average pool) is ``global_mean_blocked(t)`` (`cpu_mean_blocked.py`), and rule 1 counts
   such a mean as a reader of the blocked layout, so a chain's last convolution writes
   blocked up to the model's global pool: ResNet-50's last bottleneck no longer writes
   NCHW and converts its 400 KB residual (`from_blocked`, 80-92 us on one thread) for the
   add; MobileNet-V2's last 1x1 (with its clip) and Inception-V3's last concat likewise.

Each phase runs to its fixpoint, so the ``from_blocked`` a convolution leaves is pushed
past the elementwise operators and taken away by the next convolution: a
``from_blocked`` remains only before an operator that cannot read the layout (a
pool other than those above, a graph output, an add of a blocked and an NCHW tensor): one
conversion at the chain's end, an element read grafted into that operator's kernel where
the fusion engine can (a bijection: L divides C). A chain's first convolution reads NCHW
and its last writes NCHW when nothing after it is a convolution or a global mean, so the
layout changes only at a chain's two ends (ResNet-50: the stem reads the 3-channel NCHW
image and writes blocked; the global mean reads blocked and writes [N, C]).

Why (AVX-512 Zen 4, ResNet-50, one thread, perf_notes "Session 9/10 cpuconv"): a 1x1
convolution in NCHW either stores its (pixels x channel vectors) tile transposed or
turns the tile around and reads C strided pixel rows per tile (the pointwise form);
blocked, a pixel's channels are one vector on both sides, and the 3x3 reads its taps
from a pixel's contiguous channels.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute import compute, tensor_input
from hidet_framework.compute.definitions import ComputeRewriter, substitute_compute
from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.equality import structural_equal
from hidet_framework.ir.expr import Expr, TensorElement, const, var

from .common import load, make_operator
from .cpu_blocked import FROM_BLOCKED, blocked_lanes, from_blocked
from .cpu_conv import PACKED_OPERATOR, conv2d_packed
from .cpu_avg_pool_blocked import avg_pool2d_blocked
from .cpu_max_pool_blocked import max_pool2d_blocked
from .cpu_mean_blocked import global_mean_blocked
from .shape_select import concat

__all__ = ["RULES", "CHAIN_DEPTH", "ELEMENTWISE_NAMES", "elementwise_form", "reapply", "would_chain"]

CHAIN_DEPTH = 4      # elementwise operators between two convolutions of one chain, at most
# the operators rule 2 is shown (it checks their form; a name here is not a promise)
ELEMENTWISE_NAMES = ("add", "sub", "mul", "maximum", "minimum", "relu", "clip", "sigmoid", "hardswish",
                     "hardsigmoid", "leaky_relu", "silu", "gelu", "tanh")


class _Holes(ComputeRewriter):
    def __init__(self, holes: dict) -> None:
        self.holes, self.reads = holes, []

    def visit_TensorElement(self, e: TensorElement) -> Expr:
        if e.base in self.holes:
            self.reads.append(e)
            return self.holes[e.base]
        return super().visit_TensorElement(e)


def _at_axes(read: TensorElement, axes: list) -> bool:
    """`read` indexes its tensor by the very axis variables, in order (structural_equal
    identifies variables up to renaming: ``x[i0, i1, i3, i2]`` would equal the axes)."""
    return len(read.indices) == len(axes) and all(i is a for i, a in zip(read.indices, axes))


def elementwise_form(op: Any) -> Any:
    """(value with each input read replaced by a hole, the holes in input order) where
    `op` has one output and reads each input, of the output's shape and dtype, only at
    the output's own index, and its value does not depend on the index otherwise;
    else None."""
    task = op.task
    if len(op.outputs) != 1 or len(task.outputs) != 1 or len(task.inputs) != len(op.inputs) or not op.inputs:
        return None
    out, shape = task.outputs[0], tuple(op.outputs[0].shape)
    if any(tuple(t.shape) != shape or t.dtype is not op.outputs[0].dtype for t in op.inputs):
        return None
    axes = list(out.definition.axes)
    holes = {node: var(f"chain_in{k}", node.dtype) for k, node in enumerate(task.inputs)}
    rewriter = _Holes(holes)
    value = rewriter.visit(task.inlined_value(out))
    if not rewriter.reads or any(not _at_axes(r, axes) for r in rewriter.reads):
        return None
    probe = substitute_compute(value, {a: const(0, dtypes.int32) for a in axes})
    if not structural_equal(probe, value):      # the value reads its index elsewhere
        return None
    return value, [holes[node] for node in task.inputs]


def reapply(op: Any, xs: list) -> Tensor | None:
    """`op` (of `elementwise_form`) applied to `xs`, tensors of one shape (any)."""
    form = elementwise_form(op)
    if form is None or len({tuple(x.shape) for x in xs}) != 1:
        return None
    value, holes = form
    nodes = [tensor_input(f"x{k}", x.dtype, x.shape) for k, x in enumerate(xs)]

    def element(*axes):
        return substitute_compute(value, {h: load(n, list(axes)) for h, n in zip(holes, nodes)})

    y = compute("y", list(xs[0].shape), element, dtype=op.outputs[0].dtype)
    return make_operator(op.name, list(xs), nodes, [y], dict(op.attributes))[0]


def _lanes() -> int:
    from hidet_framework.extension import plugin_host

    return blocked_lanes(plugin_host().backend_for("cpu").detect_target())


def _poolable(op: Any) -> bool:
    """A float32 NCHW ``max_pool2d`` or ``avg_pool2d`` (rules 4 and 5 run it blocked)."""
    return op.name in ("max_pool2d", "avg_pool2d") and op.inputs[0].rank == 4 and op.inputs[0].dtype is dtypes.float32


def _joins_blocks(op: Any, lanes: int) -> bool:
    """A float32 NCHW ``concat`` along the channels, each input whole vectors of
    channels (rule 6 runs it blocked where its inputs are)."""
    return op.name == "concat" and op.outputs[0].rank == 4 and int(op.attributes["axis"]) == 1 \
        and all(t.dtype is dtypes.float32 and int(t.shape[1]) % lanes == 0 for t in op.inputs)


def _packed_x(op: Any, index: int) -> bool:
    return op.name == PACKED_OPERATOR and index == 0


def _global_mean(op: Any, index: int = 0) -> bool:
    """A float32 global average pool of an NCHW tensor: ``global_avg_pool2d`` or a
    ``reduce_mean`` over (H, W) (rule 7 runs it on the blocked tensor)."""
    if index != 0 or op.name not in ("reduce_mean", "global_avg_pool2d") or op.inputs[0].rank != 4 \
            or op.inputs[0].dtype is not dtypes.float32:
        return False
    return op.name == "global_avg_pool2d" or tuple(op.attributes.get("axes", ())) == (2, 3)


def _packed_x_or_mean(op: Any, index: int) -> bool:
    """Readers that take a blocked tensor once the rules ran: a convolution's x, a global mean."""
    return _packed_x(op, index) or _global_mean(op, index)


def _packable_x(op: Any, index: int) -> bool:
    """x of a conv2d that the packing rule (`cpu_conv.pack_conv2d_weights`, phase 1) makes a
    ``conv2d_packed``: float32, groups 1, weights from constants."""
    return op.name == "conv2d" and index == 0 and int(op.attributes["groups"]) == 1 \
        and op.inputs[0].dtype is dtypes.float32 and all(t.computed_from_constants() for t in op.inputs[1:])


def _reaches_conv(t: Tensor, uses: Any, depth: int, is_conv: Any = _packed_x) -> bool:
    """`t` is read by a ``conv2d_packed`` (as x; `is_conv` says which readers count)
    directly or over at most `depth` elementwise operators, pools and channel concats."""
    for reader, index in uses.original_readers(t) or ():
        if is_conv(reader, index):
            return True
        passes = (reader.name in ELEMENTWISE_NAMES and elementwise_form(reader) is not None) or _poolable(reader) \
            or _joins_blocks(reader, _lanes())
        if depth > 0 and passes and _reaches_conv(reader.outputs[0], uses, depth - 1, is_conv):
            return True
    return False


def would_chain(t: Tensor, uses: Any) -> bool:
    """Before the packing rule (phase 0): a float32 NCHW `t`, the output of a
    convolution (or of its activation), would be written blocked by rule 1 once packed:
    its channels are whole vectors and it reaches another packable convolution over
    elementwise operators, pools and channel concats (`CHAIN_DEPTH` at most)."""
    lanes = _lanes()
    return t.rank == 4 and t.dtype is dtypes.float32 and lanes >= 2 and int(t.shape[1]) % lanes == 0 \
        and _reaches_conv(t, uses, CHAIN_DEPTH, _packable_x)


def _packed_args(op: Any) -> tuple:
    p, a = op.inputs, op.attributes
    return p[1], (p[2] if len(p) > 2 else None), a["out_channels"], a["stride"], a["padding"], a["dilation"]


def chain_write(op: Any, uses: Any) -> list[Tensor] | None:
    if op.name != PACKED_OPERATOR or op.attributes.get("out_lanes") or op.outputs[0].rank != 4:
        return None
    lanes = _lanes()
    o, ob = int(op.attributes["out_channels"]), int(op.inputs[1].shape[4])
    if lanes < 2 or o % lanes or ob % lanes or op.outputs[0].dtype is not dtypes.float32 or uses.is_output(op.outputs[0]):
        return None
    if not _reaches_conv(op.outputs[0], uses, CHAIN_DEPTH, _packed_x_or_mean):
        return None
    return [from_blocked(conv2d_packed(op.inputs[0], *_packed_args(op), out_lanes=lanes), o)]


def _blocked_source(t: Tensor) -> Tensor | None:
    p = t.producer
    return p.inputs[0] if p is not None and p.name == FROM_BLOCKED and t.rank == 4 else None


def chain_elementwise(op: Any) -> list[Tensor] | None:
    if op.name not in ELEMENTWISE_NAMES:
        return None
    sources = [_blocked_source(t) for t in op.inputs]
    if not sources or any(s is None for s in sources) or len({tuple(s.shape) for s in sources}) != 1:
        return None
    if len({t.shape[1] for t in op.inputs}) != 1:
        return None
    y = reapply(op, sources)
    return None if y is None else [from_blocked(y, op.outputs[0].shape[1])]


def chain_read(op: Any) -> list[Tensor] | None:
    if op.name != PACKED_OPERATOR or op.inputs[0].rank != 4:
        return None
    t = _blocked_source(op.inputs[0])
    if t is None:
        return None
    return [conv2d_packed(t, *_packed_args(op), out_lanes=op.attributes.get("out_lanes", 0))]


def chain_pool(op: Any) -> list[Tensor] | None:
    if not _poolable(op) or op.name != "max_pool2d":
        return None
    t = _blocked_source(op.inputs[0])
    if t is None or int(t.shape[1]) * int(t.shape[4]) != int(op.inputs[0].shape[1]):
        return None         # lanes past C: the pool would not see them as NCHW does (not made by rule 1)
    a = op.attributes
    y = max_pool2d_blocked(t, a["kernel"], a["stride"], a["dilation"], a["pads"], tuple(op.outputs[0].shape[2:]))
    return [from_blocked(y, op.outputs[0].shape[1])]


def chain_avg_pool(op: Any) -> list[Tensor] | None:
    if not _poolable(op) or op.name != "avg_pool2d":
        return None
    t = _blocked_source(op.inputs[0])
    if t is None or int(t.shape[1]) * int(t.shape[4]) != int(op.inputs[0].shape[1]):
        return None         # lanes past C: as for the max pool
    a = op.attributes
    y = avg_pool2d_blocked(t, a["kernel"], a["stride"], a["pads"], tuple(op.outputs[0].shape[2:]),
                           a["count_include_pad"], a["ceil_mode"])
    return [from_blocked(y, op.outputs[0].shape[1])]


def chain_concat(op: Any) -> list[Tensor] | None:
    if op.name != "concat" or op.outputs[0].rank != 4 or int(op.attributes["axis"]) != 1:
        return None
    sources = [_blocked_source(t) for t in op.inputs]
    if not sources or any(s is None for s in sources) or len({int(s.shape[4]) for s in sources}) != 1:
        return None
    if any(s.dtype is not op.outputs[0].dtype or int(s.shape[1]) * int(s.shape[4]) != int(t.shape[1])
           for s, t in zip(sources, op.inputs)):
        return None         # a conversion, or lanes past an input's C: NCHW joins them
    return [from_blocked(concat(sources, axis=1), op.outputs[0].shape[1])]


def chain_mean(op: Any) -> list[Tensor] | None:
    if not _global_mean(op):
        return None
    t = _blocked_source(op.inputs[0])
    if t is None:
        return None
    keepdims = bool(op.attributes.get("keepdims", True))     # global_avg_pool2d keeps H, W as 1, 1
    y = global_mean_blocked(t, op.inputs[0].shape[1], keepdims)
    return [y] if tuple(y.shape) == tuple(op.outputs[0].shape) else None


RULES = (
    RewriteRule("cpu_chain_write", (PACKED_OPERATOR,), chain_write, phase=3, needs_uses=True, targets=("cpu",),
                description="a conv2d_packed whose output reaches another convolution writes the blocked layout"),
    RewriteRule("cpu_chain_elementwise", ELEMENTWISE_NAMES, chain_elementwise, phase=3, targets=("cpu",),
                description="an elementwise operator of blocked inputs runs on the blocked layout"),
    RewriteRule("cpu_chain_pool", ("max_pool2d",), chain_pool, phase=3, targets=("cpu",),
                description="a max_pool2d of a blocked tensor runs on the blocked layout"),
    RewriteRule("cpu_chain_avg_pool", ("avg_pool2d",), chain_avg_pool, phase=3, targets=("cpu",),
                description="an avg_pool2d of a blocked tensor runs on the blocked layout"),
    RewriteRule("cpu_chain_concat", ("concat",), chain_concat, phase=3, targets=("cpu",),
                description="a channel concat of blocked tensors (whole vectors each) joins their blocks"),
    RewriteRule("cpu_chain_mean", ("reduce_mean", "global_avg_pool2d"), chain_mean, phase=3, targets=("cpu",),
                description="a global mean (over H, W) of a blocked tensor reads it blocked"),
    RewriteRule("cpu_chain_read", (PACKED_OPERATOR,), chain_read, phase=3, targets=("cpu",),
                description="a conv2d_packed reads a blocked tensor in place of from_blocked"),
)
