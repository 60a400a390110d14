"""The channel-blocked activation layout (NCHWc) of the CPU's inverted-residual blocks.

A tensor ``[N, C, H, W]`` in the blocked layout is ``[N, ceil(C/L), H, W, L]``: channel
``c`` at ``[n, c // L, h, w, c % L]``, ``L`` the float32 lanes of the machine's widest
SIMD register (16 with AVX-512, 8 with AVX2: read from the target, `blocked_lanes`), the
lanes past C zero where `to_blocked` makes them. One pixel's L channels are one vector,
so a depthwise convolution loads its taps where they lie (no copy, no transposition)
and a 1x1 convolution whose register tile is (pixels x channel vectors) stores its
accumulators as whole vectors. The layout lives only inside the graph's
inverted-residual blocks: `rules_blocked.py` inserts it; every operator the graph
returns and every operator that cannot read it keeps NCHW.

Operators (all float32 on the CPU path; their math is defined for any dtype):

- ``to_blocked(x, lanes)`` / ``from_blocked(xb, channels)``: the conversions (a reshape
  and a transpose where L divides C: then bijections, which the fusion engine grafts
  onto a neighbour's stores);
- ``blocked_pack(t, lanes)``: a depthwise weight ``[C, 1, KH, KW]`` as ``[ceil(C/L), KH,
  KW, L]`` or a bias ``[C]`` as ``[ceil(C/L), L]``, zero past C (folded at compile time);
- ``conv2d_depthwise_blocked(xb, wpk, bpk, stride, padding, dilation)``: the depthwise
  convolution (one channel per group, multiplier 1) from blocked to blocked; its
  kernel is `cpu_depthwise_blocked.py`.

Like ``conv2d_packed`` (`cpu_conv.py`) they are made by rewrite rules, not registered
as user-facing operators (``hidet_framework.ops``).
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.compute.task import InverseMap
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir.expr import BinaryOp, const, if_then_else, logical_and, var

from .common import describe, load, make_operator, require_tensor
from .pooling import conv_window, window_origin

__all__ = ["TO_BLOCKED", "FROM_BLOCKED", "BLOCKED_PACK", "DEPTHWISE_BLOCKED", "blocked_lanes", "to_blocked",
           "from_blocked", "blocked_pack", "conv2d_depthwise_blocked", "read_padded_at"]

TO_BLOCKED = "to_blocked"
FROM_BLOCKED = "from_blocked"
BLOCKED_PACK = "blocked_pack"
DEPTHWISE_BLOCKED = "conv2d_depthwise_blocked"


def blocked_lanes(target: Any) -> int:
    """Channels per block: the float32 lanes of the target's widest SIMD register."""
    return max(1, int(target.get("vector_bits", 256)) // 32)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def read_padded_at(x, head: list, h, w, tail: list, hw: tuple, fill):
    """``x[*head, h, w, *tail]`` or `fill` outside the image (pooling.read_padded's rule)."""
    inside = logical_and(BinaryOp("le", const(0), h), BinaryOp("lt", h, const(hw[0])),
                         BinaryOp("le", const(0), w), BinaryOp("lt", w, const(hw[1])))
    return if_then_else(inside, load(x, list(head) + [h, w] + list(tail)), fill)


def to_blocked(x: Tensor, lanes: int) -> Tensor:
    """NCHW ``[N, C, H, W]`` → ``[N, ceil(C/lanes), H, W, lanes]`` (zeros past C)."""
    x = require_tensor(TO_BLOCKED, x)
    if x.rank != 4 or int(lanes) < 1:
        raise ShapeError(f"{TO_BLOCKED}: expects NCHW and lanes >= 1, got {describe(x)}, lanes={lanes}")
    lanes = int(lanes)
    n, c, h, w = x.shape
    xn = tensor_input("x", x.dtype, x.shape)

    def element(ni, cb, hi, wi, li):
        ch = cb * lanes + li
        if c % lanes == 0:
            return load(xn, [ni, ch, hi, wi])
        return if_then_else(ch < c, load(xn, [ni, ch, hi, wi]), const(0, x.dtype))

    y = compute("y", [n, _ceil(c, lanes), h, w, lanes], element, dtype=x.dtype)
    maps = {}
    if c % lanes == 0:      # a reshape and a transpose: the inverse map (for the fusion engine)
        axes = tuple(var(f"i{k}", "int32") for k in range(4))
        maps[xn] = InverseMap(axes, (axes[0], axes[1] / lanes, axes[2], axes[3], axes[1] % lanes))
    return make_operator(TO_BLOCKED, [x], [xn], [y], {"lanes": lanes, "channels": c}, maps)[0]


def from_blocked(xb: Tensor, channels: int) -> Tensor:
    """``[N, Cb, H, W, L]`` → NCHW ``[N, channels, H, W]`` (lanes past `channels` dropped)."""
    xb = require_tensor(FROM_BLOCKED, xb)
    if xb.rank != 5:
        raise ShapeError(f"{FROM_BLOCKED}: expects [N, Cb, H, W, L], got {describe(xb)}")
    n, cb, h, w, lanes = xb.shape
    c = int(channels)
    if not (cb - 1) * lanes < c <= cb * lanes:
        raise ShapeError(f"{FROM_BLOCKED}: {describe(xb)} does not hold {c} channels")
    xn = tensor_input("xb", xb.dtype, xb.shape)
    y = compute("y", [n, c, h, w], lambda ni, ci, hi, wi: load(xn, [ni, ci / lanes, hi, wi, ci % lanes]),
                dtype=xb.dtype)
    maps = {}
    if c % lanes == 0:
        axes = tuple(var(f"i{k}", "int32") for k in range(5))
        maps[xn] = InverseMap(axes, (axes[0], axes[1] * lanes + axes[4], axes[2], axes[3]))
    return make_operator(FROM_BLOCKED, [xb], [xn], [y], {"channels": c}, maps)[0]


def blocked_pack(t: Tensor, lanes: int) -> Tensor:
    """A depthwise weight ``[C, 1, KH, KW]`` → ``[Cb, KH, KW, L]``, or a bias ``[C]`` →
    ``[Cb, L]``: channel ``c`` at block ``c // L``, lane ``c % L``, zeros past C."""
    t = require_tensor(BLOCKED_PACK, t)
    lanes = int(lanes)
    if not (t.rank == 1 or (t.rank == 4 and t.shape[1] == 1)) or lanes < 1:
        raise ShapeError(f"{BLOCKED_PACK}: expects [C, 1, KH, KW] or [C], got {describe(t)}")
    c = t.shape[0]
    tn = tensor_input("t", t.dtype, t.shape)
    zero = const(0, t.dtype)
    if t.rank == 1:
        out = compute("p", [_ceil(c, lanes), lanes],
                      lambda b, li: if_then_else(b * lanes + li < c, load(tn, [b * lanes + li]), zero), dtype=t.dtype)
    else:
        out = compute("p", [_ceil(c, lanes), t.shape[2], t.shape[3], lanes],
                      lambda b, i, j, li: if_then_else(b * lanes + li < c, load(tn, [b * lanes + li, 0, i, j]), zero),
                      dtype=t.dtype)
    return make_operator(BLOCKED_PACK, [t], [tn], [out], {"lanes": lanes})[0]


def conv2d_depthwise_blocked(xb: Tensor, wpk: Tensor, bpk: Tensor | None, stride: tuple, padding: tuple,
                             dilation: tuple) -> Tensor:
    """Depthwise conv2d (conv.py's semantics, groups = C, one output channel per group)
    of a blocked ``[N, Cb, H, W, L]`` with weights ``[Cb, KH, KW, L]`` and bias ``[Cb, L]``
    (`blocked_pack`); `padding` is (top, left, bottom, right). Returns blocked."""
    xb = require_tensor(DEPTHWISE_BLOCKED, xb)
    wpk = require_tensor(DEPTHWISE_BLOCKED, wpk, "weight")
    if xb.rank != 5 or wpk.rank != 4 or wpk.shape[0] != xb.shape[1] or wpk.shape[3] != xb.shape[4]:
        raise ShapeError(f"{DEPTHWISE_BLOCKED}: expects [N, Cb, H, W, L] and [Cb, KH, KW, L], "
                         f"got {describe(xb)} and {describe(wpk)}")
    n, cb, h, w, lanes = xb.shape
    _, kh, kw, _ = wpk.shape
    if bpk is not None:
        bpk = require_tensor(DEPTHWISE_BLOCKED, bpk, "bias")
        if tuple(bpk.shape) != (cb, lanes):
            raise ShapeError(f"{DEPTHWISE_BLOCKED}: bias must be [{cb}, {lanes}], got {describe(bpk)}")
    stride, padding, dilation = tuple(stride), tuple(padding), tuple(dilation)
    win = conv_window(DEPTHWISE_BLOCKED, xb, (kh, kw), stride, padding, dilation)
    xn, wn = tensor_input("xb", xb.dtype, xb.shape), tensor_input("wpk", wpk.dtype, wpk.shape)
    bn = tensor_input("bpk", bpk.dtype, bpk.shape) if bpk is not None else None
    def element(ni, bi, ohi, owi, li):
        h0, w0 = window_origin(win, 0, ohi), window_origin(win, 1, owi)

        def product(i, j):
            hh = h0 + i * dilation[0] if dilation[0] != 1 else h0 + i
            ww = w0 + j * dilation[1] if dilation[1] != 1 else w0 + j
            xv = read_padded_at(xn, [ni, bi], hh, ww, [li], (h, w), const(0, xb.dtype))
            return xv * load(wn, [bi, i, j, li])

        value = reduce([kh, kw], product, "sum")
        return value + load(bn, [bi, li]) if bn is not None else value

    y = compute("y", [n, cb, win.out[0], win.out[1], lanes], element, dtype=xb.dtype)
    inputs = [xb, wpk] + ([bpk] if bpk is not None else [])
    nodes = [xn, wn] + ([bn] if bn is not None else [])
    attributes = {"stride": stride, "padding": padding, "dilation": dilation}
    return make_operator(DEPTHWISE_BLOCKED, inputs, nodes, [y], attributes)[0]

