"""2-D pooling on NCHW tensors: max_pool2d, avg_pool2d, global_avg_pool2d.

Window geometry follows PyTorch (and ONNX for the same attributes): output extent
``floor_or_ceil((H + pad_begin + pad_end - dilation*(k-1) - 1) / stride) + 1``; in
ceil mode a last window that would start inside the end padding is dropped.
"""
from __future__ import annotations

from typing import Any, Sequence

import attrs

from hidet_framework.compute import compute, reduce, tensor_input
from hidet_framework.graph import ShapeError, Tensor
from hidet_framework.ir.dtypes import DataType
from hidet_framework.ir.expr import BinaryOp, Expr, cast, const, if_then_else, logical_and, maximum, minimum

from .common import OperatorAttributeError, describe, int_tuple, load, make_operator, require_tensor


@attrs.frozen
class Window2d:
    """Where the windows of a 2-D pooling/convolution lie.

    :param kernel: (kh, kw). :param stride: (sh, sw). :param dilation: (dh, dw).
    :param pads: (top, left, bottom, right). :param out: (oh, ow).
    """

    kernel: tuple
    stride: tuple
    dilation: tuple
    pads: tuple
    out: tuple

    def attributes(self) -> dict:
        return {"kernel": self.kernel, "stride": self.stride, "dilation": self.dilation, "pads": self.pads}


def padding_4(op: str, padding: Any) -> tuple[int, int, int, int]:
    """int, (ph, pw) or (top, left, bottom, right) — ONNX's pads order for 2-D."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        pads = (padding,) * 4
    else:
        values = tuple(padding)
        if len(values) == 2:
            pads = values + values
        elif len(values) == 4:
            pads = values
        else:
            raise OperatorAttributeError(f"{op}: padding must be an int, (ph, pw) or (top, left, bottom, right), "
                                         f"got {padding!r}")
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in pads) or min(pads) < 0:
        raise OperatorAttributeError(f"{op}: padding {padding!r} must be non-negative ints")
    return pads


def window_2d(op: str, x: Tensor, kernel: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool) -> Window2d:
    if x.rank != 4:
        raise ShapeError(f"{op}: expects an NCHW tensor of rank 4, got {describe(x)}")
    kernel = int_tuple(op, kernel, 2, "kernel_size")
    stride = kernel if stride is None else int_tuple(op, stride, 2, "stride")
    dilation = int_tuple(op, dilation, 2, "dilation")
    for what, values in (("kernel_size", kernel), ("stride", stride), ("dilation", dilation)):
        if min(values) < 1:
            raise OperatorAttributeError(f"{op}: {what} {values} must be positive")
    pads = padding_4(op, padding)
    out = []
    for d in range(2):
        n = output_extent(x.shape[2 + d], kernel[d], stride[d], dilation[d], pads[d], pads[d + 2], ceil_mode)
        if n is None:
            raise ShapeError(f"{op}: the window (kernel {kernel}, dilation {dilation}) is larger than the "
                             f"padded input {describe(x)} with pads {pads}")
        out.append(n)
    return Window2d(kernel, stride, dilation, pads, tuple(out))


def conv_window(op: str, x: Tensor, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> Window2d:
    """The windows of a convolution over `x`'s H and W (its axes 2 and 3): `stride` and
    `dilation` (h, w) and `padding` (top, left, bottom, right) resolved, the output
    extents in floor mode; a ShapeError where the window is larger than the padded input."""
    out = tuple((x.shape[2 + d] + padding[d] + padding[d + 2] - dilation[d] * (kernel[d] - 1) - 1) // stride[d] + 1
                for d in range(2))
    if min(out) < 1:
        raise ShapeError(f"{op}: the window is larger than the padded input {describe(x)}")
    return Window2d(kernel, stride, dilation, padding, out)


def output_extent(size: int, kernel: int, stride: int, dilation: int, pad_lo: int, pad_hi: int,
                  ceil_mode: bool) -> int | None:
    """Output positions along one axis of `size` inputs (None when the dilated window is
    larger than the padded input); in ceil mode a last window that would start in the
    trailing padding is dropped."""
    span = size + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    if span < 0:
        return None
    n = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (n - 1) * stride >= size + pad_lo:
        n -= 1
    return n


def window_origin(w: Window2d, d: int, o: Expr) -> Expr:
    """First input row/column (may be negative) of the window at output position `o`."""
    e = o * w.stride[d] if w.stride[d] != 1 else o
    return e - w.pads[d] if w.pads[d] else e


def read_padded(x, index: Sequence[Expr], h: Expr, w: Expr, hw: tuple, fill: Expr) -> Expr:
    """``x[n, c, h, w]`` or `fill` outside the image (the select is lazy, like C's ?:)."""
    inside = logical_and(BinaryOp("le", const(0), h), BinaryOp("lt", h, const(hw[0])),
                         BinaryOp("le", const(0), w), BinaryOp("lt", w, const(hw[1])))
    return if_then_else(inside, load(x, list(index) + [h, w]), fill)


def _lowest(dtype: DataType) -> Expr:
    return const(dtype.min_value(), dtype)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Tensor:
    """Maximum over each (dilated) window; padding never wins; a NaN in a window is its
    maximum (numpy's maximum, torch's max_pool2d, the ONNX reference's MaxPool)."""
    x = require_tensor("max_pool2d", x)
    win = window_2d("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    node = tensor_input("x", x.dtype, x.shape)
    hw = x.shape[2:]

    def element(n, c, oh, ow):
        h0, w0 = window_origin(win, 0, oh), window_origin(win, 1, ow)

        def tap(kh, kw):
            h = h0 + (kh * win.dilation[0] if win.dilation[0] != 1 else kh)
            w = w0 + (kw * win.dilation[1] if win.dilation[1] != 1 else kw)
            return read_padded(node, [n, c], h, w, hw, _lowest(x.dtype))

        return reduce(win.kernel, tap, "max")

    out = compute("y", [x.shape[0], x.shape[1], *win.out], element, dtype=x.dtype)
    return make_operator("max_pool2d", [x], [node], [out], {**win.attributes(), "ceil_mode": bool(ceil_mode)})[0]


def avg_count(win: Window2d, hw: Sequence[int], count_include_pad: bool, h0: Expr, w0: Expr) -> Expr:
    """The divisor of the window at origin (`h0`, `w0`) over an image of `hw`: its
    positions inside the padded input (`count_include_pad`) or inside the image only."""
    def extent(d: int, start: Expr) -> Expr:
        end = minimum(start + win.kernel[d], const(hw[d] + (win.pads[d + 2] if count_include_pad else 0)))
        first = start if count_include_pad else maximum(start, const(0))
        return end - first

    return extent(0, h0) * extent(1, w0)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over each window. The divisor counts the window's positions inside the
    padded input (`count_include_pad`, PyTorch's default) or inside the image only."""
    x = require_tensor("avg_pool2d", x)
    if not x.dtype.is_float():
        raise TypeError(f"avg_pool2d: expects a float tensor, got {describe(x)}")
    win = window_2d("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    node = tensor_input("x", x.dtype, x.shape)
    hw = x.shape[2:]

    def element(n, c, oh, ow):
        h0, w0 = window_origin(win, 0, oh), window_origin(win, 1, ow)
        total = reduce(win.kernel, lambda kh, kw: read_padded(node, [n, c], h0 + kh, w0 + kw, hw,
                                                             const(0, x.dtype)), "sum")
        return total / cast(avg_count(win, hw, count_include_pad, h0, w0), total.acc_dtype)

    out = compute("y", [x.shape[0], x.shape[1], *win.out], element, dtype=x.dtype)
    attributes = {**win.attributes(), "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad)}
    return make_operator("avg_pool2d", [x], [node], [out], attributes)[0]


def global_avg_pool2d(x: Tensor) -> Tensor:
    """Mean over H and W of an NCHW tensor, keeping them as extent 1: [N, C, 1, 1]."""
    x = require_tensor("global_avg_pool2d", x)
    if x.rank != 4:
        raise ShapeError(f"global_avg_pool2d: expects an NCHW tensor of rank 4, got {describe(x)}")
    if not x.dtype.is_float():
        raise TypeError(f"global_avg_pool2d: expects a float tensor, got {describe(x)}")
    node = tensor_input("x", x.dtype, x.shape)
    out = compute("y", [x.shape[0], x.shape[1], 1, 1],
                  lambda n, c, _h, _w: reduce(x.shape[2:], lambda h, w: load(node, [n, c, h, w]), "mean"),
                  dtype=x.dtype)
    return make_operator("global_avg_pool2d", [x], [node], [out])[0]


OPERATORS = {"max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d, "global_avg_pool2d": global_avg_pool2d}
