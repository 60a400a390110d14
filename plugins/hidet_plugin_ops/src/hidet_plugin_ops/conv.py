"""conv2d (NCHW input, OIHW weights) and im2col, its GEMM-shaped producer.

conv2d's Task is the direct definition (a reduction over input channels and the
kernel window), which the auto-scheduler can always run. On the cpu target a float32,
ungrouped conv2d with constant weights becomes ``conv2d_packed`` (weights packed at
compile time, the direct template of `cpu_conv_template.py`: `cpu_conv.py`); depthwise
ones have their own schedule (`cpu_depthwise_conv.py`). Elsewhere, where a ``matmul``
operator is registered, the graph rewrite rule in `rewrites.py` replaces it by im2col
(an injective producer, so fusion can fold it into the GEMM's loads: an implicit GEMM)
followed by ``matmul``.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import Expr, const

from .common import (OperatorAttributeError, as_dtype, describe, int_tuple, load, make_operator, require_tensor,
                     unravel)
from .pooling import Window2d, read_padded, window_2d, window_origin


def accumulator_dtype(dtype: DataType) -> DataType:
    """Half floats accumulate in float32; other types in themselves."""
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _check_groups(op: str, channels: int, out_channels: int, groups: Any) -> int:
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise OperatorAttributeError(f"{op}: groups must be a positive int, got {groups!r}")
    if channels % groups or out_channels % groups:
        raise OperatorAttributeError(f"{op}: groups={groups} must divide the input channels ({channels}) "
                                     f"and the output channels ({out_channels})")
    return groups


def _tap(win: Window2d, h0: Expr, w0: Expr, kh: Expr, kw: Expr) -> tuple[Expr, Expr]:
    h = h0 + (kh * win.dilation[0] if win.dilation[0] != 1 else kh)
    w = w0 + (kw * win.dilation[1] if win.dilation[1] != 1 else kw)
    return h, w


AUTO_PADS = ("valid", "same_upper", "same_lower")


def auto_pads(op: str, mode: str, size: tuple, kernel: tuple, stride: Any, dilation: Any) -> tuple:
    """ONNX ``auto_pad`` as explicit (top, left, bottom, right) pads.

    ``valid``: no padding. ``same_upper`` / ``same_lower``: output extent
    ``ceil(in / stride)``, total pad ``max(0, (out-1)*stride + (k-1)*dilation + 1 - in)``
    split evenly, the odd one at the end (upper) or at the beginning (lower).
    """
    key = mode.lower()
    if key not in AUTO_PADS:
        raise OperatorAttributeError(f"{op}: padding {mode!r} is not one of {', '.join(AUTO_PADS)} "
                                     f"(or an int, (ph, pw), (top, left, bottom, right))")
    if key == "valid":
        return (0, 0, 0, 0)
    stride, dilation = int_tuple(op, stride, 2, "stride"), int_tuple(op, dilation, 2, "dilation")
    if min(stride) < 1 or min(dilation) < 1:
        raise OperatorAttributeError(f"{op}: stride {stride} and dilation {dilation} must be positive")
    begin, end = [], []
    for d in range(2):
        out = -(-size[d] // stride[d])
        total = max(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - size[d])
        small, large = total // 2, total - total // 2
        begin.append(small if key == "same_upper" else large)
        end.append(large if key == "same_upper" else small)
    return (begin[0], begin[1], end[0], end[1])


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation), with the semantics of ONNX ``Conv`` for 2-D
    inputs (and PyTorch's ``conv2d``).

    ``y[n, o, i, j] = bias[o] + sum over c < C/groups, r < KH, q < KW of
    x[n, (o // (O/groups)) * (C/groups) + c, i*sh - top + r*dh, j*sw - left + q*dw] * weight[o, c, r, q]``
    with ``x`` read as zero outside the image; output extents
    ``OH = (H + top + bottom - dh*(KH-1) - 1) // sh + 1`` (likewise OW).

    :param x: [N, C, H, W].
    :param weight: [O, C/groups, KH, KW] (ONNX's ``kernel_shape`` is KH, KW), same dtype as x.
    :param bias: [O] or None, same dtype as x.
    :param stride: int or (sh, sw), positive (ONNX ``strides``).
    :param padding: int, (ph, pw), or (top, left, bottom, right) non-negative (ONNX
        ``pads`` is (top, left, bottom, right) for 2-D, so it passes as is); or an ONNX
        ``auto_pad`` string: "valid", "same_upper", "same_lower" (any case).
    :param dilation: int or (dh, dw), positive (ONNX ``dilations``).
    :param groups: positive, divides C and O (ONNX ``group``); groups == C == O is a
        depthwise convolution, C/groups = 1 and O = k*C a depthwise multiplier.
    :returns: [N, O, OH, OW] in x's dtype; float16/bfloat16 accumulate in float32.
    :raises ShapeError: ranks, channel counts, bias shape, a window larger than the
        padded input. :raises TypeError: mixed dtypes.
        :raises OperatorAttributeError: bad stride, padding, dilation or groups.

    1-D ONNX convolutions map here with H = KH = 1; the attributes the graph keeps are
    the resolved explicit ones (``padding`` always 4 ints).
    """
    x = require_tensor("conv2d", x)
    weight = require_tensor("conv2d", weight, "weight")
    if x.rank != 4 or weight.rank != 4:
        raise ShapeError(f"conv2d: expects an NCHW input and an OIHW weight, got {describe(x)} and {describe(weight)}")
    if isinstance(padding, str):
        padding = auto_pads("conv2d", padding, x.shape[2:], weight.shape[2:], stride, dilation)
    if x.dtype is not weight.dtype:
        raise TypeError(f"conv2d: input {describe(x)} and weight {describe(weight)} differ in dtype")
    n, c, height, width = x.shape
    o, cig, kh, kw = weight.shape
    g = _check_groups("conv2d", c, o, groups)
    if cig * g != c:
        raise ShapeError(f"conv2d: weight {describe(weight)} expects {cig * g} input channels "
                         f"(groups={g}), the input {describe(x)} has {c}")
    if bias is not None:
        bias = require_tensor("conv2d", bias, "bias")
        if bias.shape != (o,) or bias.dtype is not x.dtype:
            raise ShapeError(f"conv2d: bias must be {x.dtype.short}[{o}], got {describe(bias)}")
    win = window_2d("conv2d", x, (kh, kw), stride, padding, dilation, ceil_mode=False)
    acc = accumulator_dtype(x.dtype)
    xn, wn = tensor_input("x", x.dtype, x.shape), tensor_input("w", weight.dtype, weight.shape)
    bn = tensor_input("b", bias.dtype, bias.shape) if bias is not None else None
    cog = o // g

    def element(ni, oi, ohi, owi):
        h0, w0 = window_origin(win, 0, ohi), window_origin(win, 1, owi)
        channel_base = (oi // cog) * cig if g > 1 else None

        def product(ci, khi, kwi):
            h, w = _tap(win, h0, w0, khi, kwi)
            channel = channel_base + ci if channel_base is not None else ci
            xv = read_padded(xn, [ni, channel], h, w, (height, width), const(0, x.dtype))
            return as_dtype(xv, acc) * as_dtype(load(wn, [oi, ci, khi, kwi]), acc)

        value = reduce([cig, kh, kw], product, "sum", acc_dtype=acc)
        return value + as_dtype(load(bn, [oi]), acc) if bn is not None else value

    out = compute("y", [n, o, *win.out], element, dtype=x.dtype)
    inputs = [x, weight] + ([bias] if bias is not None else [])
    nodes = [xn, wn] + ([bn] if bn is not None else [])
    attributes = {"stride": win.stride, "padding": win.pads, "dilation": win.dilation, "groups": g}
    return make_operator("conv2d", inputs, nodes, [out], attributes)[0]


def im2col(x: Tensor, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, channels_first: bool = False) -> Tensor:
    """The windows of a convolution as the rows of a GEMM operand.

    Returns ``[N*OH*OW, C*KH*KW]`` (groups=1) or ``[groups, N*OH*OW, C/groups*KH*KW]``:
    row ``(n, oh, ow)``, column ``(c, kh, kw)`` (row-major), zero outside the image.
    Times the weight as ``[C*KH*KW, O]`` it gives the convolution in NHWC order.

    ``channels_first=True`` (groups=1 only) returns the transpose per image,
    ``[N, C*KH*KW, OH*OW]``: the weight as ``[O, C*KH*KW]`` times it gives
    ``[N, O, OH*OW]``, the convolution already in NCHW order, and a GEMM that splits
    its columns (output pixels) between threads gathers each pixel once.
    """
    x = require_tensor("im2col", x)
    if x.rank != 4:
        raise ShapeError(f"im2col: expects an NCHW tensor of rank 4, got {describe(x)}")
    n, c, height, width = x.shape
    g = _check_groups("im2col", c, c, groups)
    win = window_2d("im2col", x, kernel_size, stride, padding, dilation, ceil_mode=False)
    cig, (kh, kw), (oh, ow) = c // g, win.kernel, win.out
    rows, cols = n * oh * ow, cig * kh * kw
    xn = tensor_input("x", x.dtype, x.shape)

    def column(gi, row, col):
        ni, ohi, owi = unravel(row, (n, oh, ow))
        ci, khi, kwi = unravel(col, (cig, kh, kw))
        h, w = _tap(win, window_origin(win, 0, ohi), window_origin(win, 1, owi), khi, kwi)
        channel = gi * cig + ci if g > 1 else ci
        return read_padded(xn, [ni, channel], h, w, (height, width), const(0, x.dtype))

    if channels_first:
        if g != 1:
            raise OperatorAttributeError(f"im2col: channels_first needs groups=1, got groups={g}")
        out = compute("cols", [n, cols, oh * ow],
                      lambda ni, col, pix: column(None, ni * (oh * ow) + pix, col))
    elif g == 1:
        out = compute("cols", [rows, cols], lambda row, col: column(None, row, col))
    else:
        out = compute("cols", [g, rows, cols], column)
    attributes = {"kernel": win.kernel, "stride": win.stride, "padding": win.pads, "dilation": win.dilation,
                  "groups": g, "channels_first": bool(channels_first)}
    return make_operator("im2col", [x], [xn], [out], attributes)[0]


OPERATORS = {"conv2d": conv2d, "im2col": im2col}
