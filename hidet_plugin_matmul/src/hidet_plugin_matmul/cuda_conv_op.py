"""Implicit-GEMM convolution: the operator the CUDA tensor-core template serves.

``conv2d_igemm(x, wmat, ...)`` is a 2-D convolution read as a GEMM with no im2col
tensor in memory: row m = (n, oh, ow) is an output pixel, column j an output channel of
group g, and the reduction index k = (kh, kw, c) walks the window, channels fastest
(in NHWC memory the 8 channels of a 16-byte chunk are contiguous). ``wmat`` is the
weight laid out as that GEMM's B operand, ``[G, Kp, Np]`` with ``K = KH*KW*C/G`` and
``Kp``, ``Np`` (= O/G) rounded up to multiples of 8, zero in the padding (16-byte rows
for cp.async). `pack_conv_weight` builds it: an injective operator of the weight
alone, so constant folding runs it once, at compile time, for a constant weight.

``x_layout`` / ``y_layout`` ("nchw" or "nhwc") say how x is read and y is written.
The rewrite rule (`cuda_conv_rule`) picks them for conv2d's NCHW tensors.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.compute.definitions import default_acc_dtype
from hidet_framework.graph import Operator, ShapeError, Tensor
from hidet_framework.ir.expr import BinaryOp, cast, const, if_then_else, logical_and

OPERATOR = "conv2d_igemm"
PACK_OPERATOR = "conv2d_igemm_pack_weight"
LAYOUTS = ("nchw", "nhwc")


def round8(x: int) -> int:
    return (x + 7) // 8 * 8


@attrs.frozen
class ConvGeometry:
    """Every static fact of one implicit-GEMM convolution (from the attributes)."""

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple       # (KH, KW)
    stride: tuple
    pads: tuple         # (top, left, bottom, right)
    dilation: tuple
    groups: int
    x_layout: str = "nchw"
    y_layout: str = "nchw"

    @property
    def out_hw(self) -> tuple:
        out = []
        for d in range(2):
            size = (self.height, self.width)[d]
            span = size + self.pads[d] + self.pads[d + 2] - self.dilation[d] * (self.kernel[d] - 1) - 1
            out.append(span // self.stride[d] + 1)
        return tuple(out)

    @property
    def cg(self) -> int:
        return self.channels // self.groups

    @property
    def cog(self) -> int:
        return self.out_channels // self.groups

    @property
    def m(self) -> int:
        oh, ow = self.out_hw
        return self.batch * oh * ow

    @property
    def k(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.cg

    @property
    def w_shape(self) -> tuple:
        return (self.groups, round8(self.k), round8(self.cog))

    @property
    def x_shape(self) -> tuple:
        n, c, h, w = self.batch, self.channels, self.height, self.width
        return (n, c, h, w) if self.x_layout == "nchw" else (n, h, w, c)

    @property
    def y_shape(self) -> tuple:
        (oh, ow), n, o = self.out_hw, self.batch, self.out_channels
        return (n, o, oh, ow) if self.y_layout == "nchw" else (n, oh, ow, o)

    def x_index(self, n: Any, ih: Any, iw: Any, ch: Any) -> tuple:
        return (n, ch, ih, iw) if self.x_layout == "nchw" else (n, ih, iw, ch)

    def y_index(self, n: Any, o: Any, oh: Any, ow: Any) -> tuple:
        return (n, o, oh, ow) if self.y_layout == "nchw" else (n, oh, ow, o)

    def attributes(self) -> dict:
        return {"batch": self.batch, "channels": self.channels, "height": self.height, "width": self.width,
                "out_channels": self.out_channels, "kernel": self.kernel, "stride": self.stride,
                "padding": self.pads, "dilation": self.dilation, "groups": self.groups,
                "x_layout": self.x_layout, "y_layout": self.y_layout}

    @classmethod
    def from_attributes(cls, a: Mapping[str, Any]) -> "ConvGeometry":
        return cls(int(a["batch"]), int(a["channels"]), int(a["height"]), int(a["width"]), int(a["out_channels"]),
                   tuple(a["kernel"]), tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]),
                   int(a["groups"]), str(a["x_layout"]), str(a["y_layout"]))

    def validate(self) -> None:
        if self.x_layout not in LAYOUTS or self.y_layout not in LAYOUTS:
            raise ValueError(f"conv2d_igemm: layouts must be one of {LAYOUTS}, got {self.x_layout}/{self.y_layout}")
        if self.groups < 1 or self.channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"conv2d_igemm: groups={self.groups} must divide {self.channels} input and "
                             f"{self.out_channels} output channels")
        ints = self.kernel + self.stride + self.dilation
        if len(ints) != 6 or min(ints) < 1 or len(self.pads) != 4 or min(self.pads) < 0:
            raise ValueError(f"conv2d_igemm: bad kernel {self.kernel}, stride {self.stride}, dilation "
                             f"{self.dilation} or pads {self.pads}")
        if min(self.out_hw) < 1:
            raise ShapeError(f"conv2d_igemm: the window {self.kernel} (dilation {self.dilation}) is larger than "
                             f"the padded {self.height}x{self.width} input")

    def tap(self, k: Any) -> tuple:
        """(kh, kw, c) of reduction index k (channels fastest)."""
        kh, kw = self.kernel
        if kh == kw == 1:
            return 0, 0, k
        return k // (kw * self.cg), k // self.cg % kw, k % self.cg


def pack_conv_weight(weight: Tensor, groups: int) -> Tensor:
    """OIHW weight → ``[G, Kp, Np]``: ``wmat[g, (kh*KW + kw)*Cg + c, j] = w[g*Cog + j, c, kh, kw]``,
    zero past K and past Cog."""
    o, cg, kh, kw = weight.shape
    cog = o // groups
    k = kh * kw * cg
    shape = (groups, round8(k), round8(cog))
    wn = tensor_input("w", weight.dtype, weight.shape)

    def element(g, kk, j):
        inside = logical_and(BinaryOp("lt", kk, const(k)), BinaryOp("lt", j, const(cog)))
        return if_then_else(inside, wn[g * cog + j, kk % cg, kk // (kw * cg), kk // cg % kw],
                            const(0.0, weight.dtype))

    packed = compute("wmat", shape, element, dtype=weight.dtype)
    attributes = {"groups": groups}
    return Operator(PACK_OPERATOR, [weight], Task(PACK_OPERATOR, [wn], [packed], attributes), attributes).outputs[0]


def conv2d_igemm(x: Tensor, wmat: Tensor, geometry: ConvGeometry) -> Tensor:
    """y = conv(x, w) with w given packed (`pack_conv_weight`); shapes from `geometry`."""
    geometry.validate()
    if tuple(x.shape) != geometry.x_shape or tuple(wmat.shape) != geometry.w_shape:
        raise ShapeError(f"conv2d_igemm: expected x {list(geometry.x_shape)} and packed weight "
                         f"{list(geometry.w_shape)}, got {list(x.shape)} and {list(wmat.shape)}")
    if x.dtype is not wmat.dtype:
        raise TypeError(f"conv2d_igemm: x is {x.dtype.short}, the weight {wmat.dtype.short}")
    g = geometry
    xn, wn = tensor_input("x", x.dtype, x.shape), tensor_input("wmat", wmat.dtype, wmat.shape)
    acc = default_acc_dtype(x.dtype, "sum")
    kh_, kw_ = g.kernel

    def widen(e):
        return e if x.dtype is acc else cast(e, acc)

    def element(n, o, oh, ow):
        grp, j = (o // g.cog, o % g.cog) if g.groups > 1 else (const(0), o)

        def product(r, q, c):
            ih = oh * g.stride[0] - g.pads[0] + r * g.dilation[0]
            iw = ow * g.stride[1] - g.pads[1] + q * g.dilation[1]
            inside = logical_and(BinaryOp("le", const(0), ih), BinaryOp("lt", ih, const(g.height)),
                                 BinaryOp("le", const(0), iw), BinaryOp("lt", iw, const(g.width)))
            ch = grp * g.cg + c if g.groups > 1 else c
            xv = if_then_else(inside, xn[g.x_index(n, ih, iw, ch)], const(0.0, x.dtype))
            return widen(xv) * widen(wn[grp, (r * kw_ + q) * g.cg + c, j])

        return reduce([kh_, kw_, g.cg], product, "sum", acc_dtype=acc)

    if g.y_layout == "nchw":
        y = compute("y", g.y_shape, element, dtype=x.dtype)
    else:
        y = compute("y", g.y_shape, lambda n, oh, ow, o: element(n, o, oh, ow), dtype=x.dtype)
    attributes = g.attributes()
    return Operator(OPERATOR, [x, wmat], Task(OPERATOR, [xn, wn], [y], attributes), attributes).outputs[0]
