"""conv2d on the CPU with weights packed once, at compile time.

A convolution's weights are constants in a model, so the CPU rewrite rule
`pack_conv2d_weights` (``targets = ("cpu",)``, tried before the im2col + matmul
rule) replaces

    conv2d(x, W, bias)          float32, groups=1, W computed from constants only
by
    conv2d_packed(x, conv2d_pack_weight(W, ob), bias)

``conv2d_pack_weight`` is injective over constants, so constant folding evaluates it
once while compiling: the graph keeps W as ``[ceil(O/ob), C, KH, KW, ob]`` blocks (zero
past O), ``ob`` output channels contiguous: ``ob / lanes`` SIMD vectors, the vector
width read from the machine (`block_width`). ``conv2d_packed`` keeps conv2d's
activation layout, NCHW in and NCHW out, so no layout conversion is needed anywhere
in the graph; its template is the direct convolution of `cpu_conv_template.py`.
Inside MobileNet-style blocks the rules of `rules_blocked.py`, and along chains of
convolutions joined by elementwise operators those of `rules_blocked_chain.py`, make
it write (``out_lanes``) or read (a rank-5 x) the channel-blocked activation layout of
`cpu_blocked.py` instead.

Depthwise convolutions keep their own schedule (`cpu_depthwise_conv.py`); grouped
ones and those with weights that are not constants keep the im2col + matmul rewrite.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.extension import RewriteRule
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import const, if_then_else

from .common import describe, load, make_operator, require_tensor
from .pooling import conv_window, read_padded, window_origin
from .cpu_blocked import read_padded_at

__all__ = ["PACK_OPERATOR", "PACKED_OPERATOR", "block_width", "pack_conv_weight", "conv2d_packed",
           "pack_conv2d_weights", "PACK_RULE"]

PACK_OPERATOR = "conv2d_pack_weight"
PACKED_OPERATOR = "conv2d_packed"


def target_lanes(target: Any) -> int:
    """float32 lanes of the target's widest SIMD register (8 with AVX2, 16 with AVX-512)."""
    return max(1, int(target.get("vector_bits", 256)) // 32)


def vector_registers(target: Any) -> int:
    """SIMD registers of the target's ISA: 32 with AVX-512, 16 below."""
    return 32 if int(target.get("vector_bits", 256)) >= 512 else 16


def block_width(target: Any, out_channels: int) -> int:
    """Output channels per packed weight block: two SIMD vectors (a register tile of
    two vectors per output pixel leaves the most registers for pixels: 14 pixels with
    AVX-512's 32 registers, 6 with AVX2's 16), fewer where the convolution has fewer
    channels (rounded up to whole vectors)."""
    lanes = target_lanes(target)
    vectors = min(2, -(-out_channels // lanes))
    return max(1, vectors) * lanes


def pack_conv_weight(w: Tensor, ob: int) -> Tensor:
    """``[O, C, KH, KW]`` → ``[ceil(O/ob), C, KH, KW, ob]``: block b holds output channels
    b*ob .. b*ob+ob-1 (zeros past O), each tap's ob channels contiguous."""
    w = require_tensor(PACK_OPERATOR, w, "weight")
    if w.rank != 4 or ob < 1:
        raise ShapeError(f"{PACK_OPERATOR}: expects an OIHW weight and ob >= 1, got {describe(w)}, ob={ob}")
    o, c, kh, kw = w.shape
    blocks = -(-o // ob)
    wn = tensor_input("w", w.dtype, w.shape)

    def element(b, ci, khi, kwi, lane):
        oc = b * ob + lane
        return if_then_else(oc < o, wn[oc, ci, khi, kwi], const(0.0, w.dtype))

    packed = compute("wp", [blocks, c, kh, kw, ob], element, dtype=w.dtype)
    return make_operator(PACK_OPERATOR, [w], [wn], [packed], {"ob": ob, "out_channels": o})[0]


def conv2d_packed(x: Tensor, packed: Tensor, bias: Tensor | None, out_channels: int, stride: tuple,
                  padding: tuple, dilation: tuple, out_lanes: int = 0) -> Tensor:
    """conv2d (groups=1, conv.py's semantics) of NCHW `x` with weights given as their
    packed blocks (`pack_conv_weight`); `stride`, `dilation` are (h, w) and `padding`
    (top, left, bottom, right), already resolved. Returns NCHW, or the channel-blocked
    layout of `cpu_blocked.py` with ``out_lanes`` > 0 (``[N, ceil(O/L), OH, OW, L]``,
    zeros past O). `x` may be blocked too (rank 5: ``[N, ceil(C/L), H, W, L]``, C read
    from the packed weight)."""
    x = require_tensor(PACKED_OPERATOR, x)
    packed = require_tensor(PACKED_OPERATOR, packed, "packed weight")
    if x.rank not in (4, 5) or packed.rank != 5:
        raise ShapeError(f"{PACKED_OPERATOR}: expects NCHW x and [O/ob, C, KH, KW, ob] weights, "
                         f"got {describe(x)} and {describe(packed)}")
    in_lanes = x.shape[4] if x.rank == 5 else 0
    n, c, h, w = (x.shape[0], packed.shape[1], x.shape[2], x.shape[3]) if in_lanes else x.shape
    if in_lanes and not (x.shape[1] - 1) * in_lanes < c <= x.shape[1] * in_lanes:
        raise ShapeError(f"{PACKED_OPERATOR}: blocked {describe(x)} does not hold the {c} channels of "
                         f"{describe(packed)}")
    blocks, c2, kh, kw, ob = packed.shape
    o = int(out_channels)
    if c2 != c or blocks != -(-o // ob) or x.dtype is not packed.dtype:
        raise ShapeError(f"{PACKED_OPERATOR}: packed weight {describe(packed)} does not hold {o} output "
                         f"channels over the {c} channels of {describe(x)}")
    if bias is not None:
        bias = require_tensor(PACKED_OPERATOR, bias, "bias")
        if bias.shape != (o,) or bias.dtype is not x.dtype:
            raise ShapeError(f"{PACKED_OPERATOR}: bias must be {x.dtype.short}[{o}], got {describe(bias)}")
    stride, padding, dilation = tuple(stride), tuple(padding), tuple(dilation)
    win = conv_window(PACKED_OPERATOR, x, (kh, kw), stride, padding, dilation)
    xn, wn = tensor_input("x", x.dtype, x.shape), tensor_input("wp", packed.dtype, packed.shape)
    bn = tensor_input("b", bias.dtype, bias.shape) if bias is not None else None
    acc = dtypes.float32 if x.dtype in (dtypes.float16, dtypes.bfloat16) else x.dtype

    def element(ni, oi, ohi, owi):
        h0, w0 = window_origin(win, 0, ohi), window_origin(win, 1, owi)

        def product(ci, khi, kwi):
            hh = h0 + khi * dilation[0] if dilation[0] != 1 else h0 + khi
            ww = w0 + kwi * dilation[1] if dilation[1] != 1 else w0 + kwi
            if in_lanes:
                xv = read_padded_at(xn, [ni, ci / in_lanes], hh, ww, [ci % in_lanes], (h, w), const(0, x.dtype))
            else:
                xv = read_padded(xn, [ni, ci], hh, ww, (h, w), const(0, x.dtype))
            return xv * load(wn, [oi // ob, ci, khi, kwi, oi % ob])

        value = reduce([c, kh, kw], product, "sum", acc_dtype=acc)
        return value + load(bn, [oi]) if bn is not None else value

    if out_lanes:
        lanes = int(out_lanes)
        if ob % lanes:
            raise ShapeError(f"{PACKED_OPERATOR}: blocks of {ob} output channels are not whole {lanes}-lane vectors")

        def blocked(ni, bi, ohi, owi, li):
            oi = bi * lanes + li
            return element(ni, oi, ohi, owi) if o % lanes == 0 else \
                if_then_else(oi < o, element(ni, oi, ohi, owi), const(0, x.dtype))

        y = compute("y", [n, -(-o // lanes), *win.out, lanes], blocked, dtype=x.dtype)
    else:
        y = compute("y", [n, o, *win.out], element, dtype=x.dtype)
    inputs = [x, packed] + ([bias] if bias is not None else [])
    nodes = [xn, wn] + ([bn] if bn is not None else [])
    attributes = {"stride": stride, "padding": padding, "dilation": dilation, "out_channels": o, "ob": ob}
    if out_lanes:       # only where set: the NCHW operator's attributes (its fingerprint) stay as they were
        attributes["out_lanes"] = int(out_lanes)
    return make_operator(PACKED_OPERATOR, inputs, nodes, [y], attributes)[0]


def _cpu_target() -> Any:
    from hidet_framework.extension import plugin_host

    return plugin_host().backend_for("cpu").detect_target()


def pack_conv2d_weights(op: Any) -> list[Tensor] | None:
    """The rewrite (see the module docstring); None where it does not apply: not a
    float32 conv2d, grouped (depthwise included), weights not from constants."""
    if op.name != "conv2d" or int(op.attributes["groups"]) != 1:
        return None
    x, weight = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    if x.dtype is not dtypes.float32 or weight.dtype is not dtypes.float32 or not weight.computed_from_constants():
        return None
    a = op.attributes
    o = int(weight.shape[0])
    packed = pack_conv_weight(weight, block_width(_cpu_target(), o))
    y = conv2d_packed(x, packed, bias, o, a["stride"], a["padding"], a["dilation"])
    if tuple(y.shape) != tuple(op.outputs[0].shape):
        return None
    return [y]


PACK_RULE = RewriteRule(
    "conv2d_pack_weights", ("conv2d",), pack_conv2d_weights, targets=("cpu",),
    description="float32 conv2d with constant weights: weights packed once at compile time (CPU direct template)")
