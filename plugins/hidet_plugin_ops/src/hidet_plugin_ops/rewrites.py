"""Graph rewrite rules this plugin contributes (``register_passes``).

Each rule is a ``hidet_framework.extension.RewriteRule`` (the core engine's
protocol: ``op_names``, ``rewrite(op) -> list[Tensor] | None``, a phase, ...),
registered as ``register(rule.name, rule)``: given an `Operator` of the graph,
``rewrite`` returns None (no change) or new tensors, one per ``op.outputs`` with the
same shapes and dtypes, built from ``op.inputs`` with operator functions; the engine
redirects the consumers of each old output to the new one.

The conv2d rule names ``matmul`` through the operator registry
(``plugin_host().operators``) and never imports the plugin that defines it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, ShapeError, Tensor

from . import binary, conv, shape_layout, unary
from .cpu_depthwise_conv import is_depthwise


def _registered_matmul() -> Callable | None:
    from hidet_framework.extension import plugin_host

    operators = plugin_host().operators
    return operators["matmul"] if "matmul" in operators else None


def conv2d_to_matmul(op: Operator) -> list[Tensor] | None:
    """conv2d → im2col, then ``matmul``, then the bias.

    groups=1: the weight as ``[1, O, K]`` times the channels-first windows
    ``[N, K, OH*OW]`` (a 1x1, stride-1, unpadded convolution needs no im2col at all:
    the input reshaped is its own window matrix) gives ``[N, O, OH*OW]``, NCHW after a
    reshape (no transpose, no div/mod stores), and the GEMM splits output pixels, not
    the few output channels, between threads. Grouped: im2col ``[G, N*OH*OW, K]``
    times the weight as ``[G, K, O/G]``, then back to NCHW (reshape + transpose).

    None when `op` is not a conv2d, when it is depthwise (one input channel per group:
    cpu_depthwise_conv.py schedules it), when no ``matmul`` operator is registered, or
    when the registered matmul does not accept these operands (the direct conv2d
    stays: a rewrite may only fall back, never fail the graph).
    """
    if op.name != "conv2d":
        return None
    matmul = _registered_matmul()
    if matmul is None:
        return None
    x, weight = op.inputs[0], op.inputs[1]
    if is_depthwise(tuple(x.shape), tuple(weight.shape), op.attributes["groups"]):
        return None  # KH*KW taps per output: a batch of one-column GEMMs; it has its own schedule
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    a = op.attributes
    groups = a["groups"]
    n = x.shape[0]
    o, cig, kh, kw = weight.shape
    expected = op.outputs[0]
    oh, ow = expected.shape[2], expected.shape[3]
    k = cig * kh * kw
    y = None
    if groups == 1:
        y = _channels_first(matmul, x, weight, a, (n, o, cig, kh, kw, oh, ow))
    if y is None:  # grouped, or a matmul that does not broadcast a [1, O, K] weight
        try:
            cols = conv.im2col(x, (kh, kw), stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                               groups=groups)
            if groups == 1:
                w_mat = shape_layout.transpose(shape_layout.reshape(weight, [o, k]), [1, 0])   # [K, O]
                y = _single(matmul(cols, w_mat))                                               # [N*OH*OW, O]
                y = shape_layout.transpose(shape_layout.reshape(y, [n, oh, ow, o]), [0, 3, 1, 2])
            else:
                cog = o // groups
                w_mat = shape_layout.transpose(shape_layout.reshape(weight, [groups, cog, k]), [0, 2, 1])
                y = _single(matmul(cols, w_mat))                                               # [G, N*OH*OW, O/G]
                y = shape_layout.reshape(y, [groups, n, oh, ow, cog])
                y = shape_layout.reshape(shape_layout.transpose(y, [1, 0, 4, 2, 3]), [n, o, oh, ow])
        except (ShapeError, TypeError, ValueError):
            return None  # this matmul does not take these operands: keep the direct conv2d
    if y.dtype is not expected.dtype:
        y = unary.cast(y, expected.dtype)
    if bias is not None:
        y = binary.add(y, shape_layout.reshape(bias, [o, 1, 1]))
    if tuple(y.shape) != tuple(expected.shape):
        return None
    return [y]


def _channels_first(matmul: Callable, x: Tensor, weight: Tensor, a: dict, dims: tuple) -> Tensor | None:
    """``[1, O, K] @ [N, K, OH*OW]`` reshaped to NCHW, or None where the registered
    matmul does not take it (or gives another shape)."""
    n, o, cig, kh, kw, oh, ow = dims
    pointwise = (kh, kw) == (1, 1) and tuple(a["stride"]) == (1, 1) and tuple(a["padding"]) == (0, 0, 0, 0)
    try:
        if pointwise:
            windows = shape_layout.reshape(x, [n, cig, oh * ow])                             # [N, C, H*W]
        else:
            windows = conv.im2col(x, (kh, kw), stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                                  channels_first=True)                                       # [N, K, OH*OW]
        product = _single(matmul(shape_layout.reshape(weight, [1, o, cig * kh * kw]), windows))
        if tuple(product.shape) != (n, o, oh * ow):
            return None
        return shape_layout.reshape(product, [n, o, oh, ow])
    except (ShapeError, TypeError, ValueError):
        return None


def _single(outputs: Tensor | Sequence[Tensor]) -> Tensor:
    if isinstance(outputs, Tensor):
        return outputs
    outputs = tuple(outputs)
    if len(outputs) != 1:
        raise TypeError(f"matmul returned {len(outputs)} outputs, expected one")
    return outputs[0]


RULES: tuple[RewriteRule, ...] = (
    RewriteRule("conv2d_to_matmul", ("conv2d",), conv2d_to_matmul,
                description="conv2d as im2col (injective, fusible into the GEMM's loads) + matmul"),
)
