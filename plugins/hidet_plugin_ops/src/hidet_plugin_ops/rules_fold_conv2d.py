"""Inference folding of a per-channel affine map into the convolution before it:
``batch_norm(conv2d(x, W, b))``, and the multiply / add the ONNX frontend makes of a
BatchNormalization with known statistics (``conv2d(x, W, b) * A + B``), become one
``conv2d(x, W * A[o], b * A + B)`` — one kernel and no pass over the activation.

The rules run in the rewrite engine's first phase (``phase = -1``), before the
horizontal conv2d rule (phase 0) could make the convolution a slice of a wider one and
before ``conv2d_to_matmul`` (phase 1) turns it into im2col + matmul, where the pattern
is no longer visible. They fold only what is known at compile time: the
convolution's weight and bias and the map's coefficients must be constants, and the
map must be per output channel (a shape that broadcasts as ``[1, C, 1, 1]``) without
widening the convolution's output. The folding arithmetic is done in float64 and
rounded once to the weight's dtype.

A convolution whose output is also read elsewhere is still folded for this consumer
(a new convolution); the original stays for its other readers, so the result is
right either way, and dead-code elimination drops it when nothing else reads it.
"""
from __future__ import annotations

import numpy as np

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor, constant

from . import conv

FOLD_PHASE = -1  # before the horizontal rules (phase 0) and conv2d_to_matmul (phase 1, the default)


def _foldable_conv(t: Tensor) -> Operator | None:
    """The conv2d producing `t` when its weight (and bias, if any) are constants."""
    op = t.producer
    if op is None or op.name != "conv2d" or not all(i.is_constant() for i in op.inputs[1:]):
        return None
    return op


def _per_channel(t: Tensor, channels: int) -> np.ndarray | None:
    """`t`'s constant value as ``[channels]`` float64 when it broadcasts as [1, C, 1, 1]."""
    if not t.is_constant() or t.storage.dtype.kind != "f":
        return None
    value = np.asarray(t.storage, dtype=np.float64)
    if value.ndim > 4:
        return None
    shape = (1,) * (4 - value.ndim) + value.shape
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).copy()


def _channel_vector(t: Tensor, channels: int) -> np.ndarray | None:
    """A batch_norm parameter (``[C]``, indexed by the channel) as float64, if constant."""
    if not t.is_constant() or t.storage.dtype.kind != "f" or t.storage.size != channels:
        return None
    return np.asarray(t.storage, dtype=np.float64).reshape(channels)


def _refolded(conv_op: Operator, scale: np.ndarray, shift: np.ndarray) -> Tensor:
    """``conv_op`` with its output multiplied by `scale` and shifted by `shift` per channel."""
    x, weight = conv_op.inputs[0], conv_op.inputs[1]
    w = np.asarray(weight.storage, dtype=np.float64)
    b = np.asarray(conv_op.inputs[2].storage, dtype=np.float64) if len(conv_op.inputs) > 2 else 0.0
    dtype = weight.storage.dtype
    new_w = constant((w * scale[:, None, None, None]).astype(dtype), weight.dtype)
    new_b = constant((b * scale + shift).astype(dtype), weight.dtype)
    a = conv_op.attributes
    return conv.conv2d(x, new_w, new_b, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                       groups=a["groups"])


def _same_output(op: Operator, conv_out: Tensor) -> bool:
    out = op.outputs[0]
    return tuple(out.shape) == tuple(conv_out.shape) and out.dtype is conv_out.dtype


def fold_batch_norm(op: Operator) -> list[Tensor] | None:
    """batch_norm(conv2d(...)) with constant statistics → conv2d."""
    conv_op = _foldable_conv(op.inputs[0])
    if conv_op is None or not _same_output(op, op.inputs[0]):
        return None
    channels = op.inputs[0].shape[1]
    params = [_channel_vector(t, channels) for t in op.inputs[1:5]]
    if any(p is None for p in params):
        return None
    gamma, beta, mean, var = params
    scale = gamma / np.sqrt(var + float(op.attributes.get("epsilon", 1e-5)))
    return [_refolded(conv_op, scale, beta - mean * scale)]


def _conv_and_coefficients(op: Operator) -> tuple[Operator, np.ndarray] | None:
    if len(op.inputs) != 2:  # (a scalar operand may be kept as an attribute: one input)
        return None
    for k in (0, 1):
        conv_op = _foldable_conv(op.inputs[k])
        if conv_op is not None and _same_output(op, op.inputs[k]):
            coefficients = _per_channel(op.inputs[1 - k], op.inputs[k].shape[1])
            if coefficients is not None:
                return conv_op, coefficients
    return None


def fold_scale(op: Operator) -> list[Tensor] | None:
    """conv2d(...) * A (per channel, constant) → conv2d."""
    found = _conv_and_coefficients(op) if op.name == "mul" else None
    if found is None:
        return None
    conv_op, scale = found
    return [_refolded(conv_op, scale, np.zeros_like(scale))]


def fold_shift(op: Operator) -> list[Tensor] | None:
    """conv2d(...) + B (per channel, constant) → conv2d with the bias moved."""
    found = _conv_and_coefficients(op) if op.name == "add" else None
    if found is None:
        return None
    conv_op, shift = found
    return [_refolded(conv_op, np.ones_like(shift), shift)]


RULES: tuple[RewriteRule, ...] = (
    RewriteRule("fold_batch_norm_into_conv2d", ("batch_norm",), fold_batch_norm, phase=FOLD_PHASE,
                description="inference batch_norm after a constant-weight conv2d, folded into its weight and bias"),
    RewriteRule("fold_scale_into_conv2d", ("mul",), fold_scale, phase=FOLD_PHASE,
                description="a constant per-channel multiply after a constant-weight conv2d, folded into it"),
    RewriteRule("fold_shift_into_conv2d", ("add",), fold_shift, phase=FOLD_PHASE,
                description="a constant per-channel add after a constant-weight conv2d, folded into its bias"),
)
