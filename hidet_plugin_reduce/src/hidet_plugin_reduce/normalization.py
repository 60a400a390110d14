"""Softmax and the normalizations: ``softmax``, ``log_softmax`` over any axis;
``layer_norm`` (ONNX LayerNormalization: every axis from `axis` on), ``rms_norm``,
``batch_norm`` (inference: per-channel statistics given), ``instance_norm`` and
``group_norm`` (statistics per sample and channel / channel group).

Arithmetic is float32 for float16/bfloat16/float32 inputs (float64 stays float64); the
output keeps the input's dtype. Softmax subtracts the row maximum before ``exp``.
Variances are two-pass (the mean first, then the mean of squared deviations), so an
input with a large mean (1e4 with a standard deviation of 1) keeps its variance.
"""
from __future__ import annotations

from typing import Any, Sequence

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator, Tensor
from hidet_framework.ir.expr import Expr, const

from .common import (
    ReduceArgumentError, check_epsilon, check_parameter, compute_dtype, describe, math_call,
    normalize_axis, prod, require_float, require_tensor, row_form, widen,
)


def _operator(op: str, inputs: Sequence[Tensor], task_inputs: Sequence, y, attributes: dict) -> Tensor:
    task = Task(op, list(task_inputs), [y], attributes)
    return Operator(op, list(inputs), task, attributes).outputs[0]


def _without(idx: Sequence[Expr], axis: int) -> tuple:
    return tuple(i for d, i in enumerate(idx) if d != axis)


def _with(idx: Sequence[Expr], axis: int, value: Expr) -> tuple:
    out = list(idx)
    out.insert(axis, value)
    return tuple(out)


# ------------------------------------------------------------------ softmax

def _softmax(op: str, x: Tensor, axis: int) -> Tensor:
    x = require_tensor(op, x)
    require_float(op, x)
    axis = normalize_axis(op, axis, x)
    n = x.shape[axis]
    if n == 0:
        raise ReduceArgumentError(f"{op}: axis {axis} of x {describe(x)} is empty")
    ct = compute_dtype(x.dtype)
    xin = tensor_input("x", x.dtype, x.shape)
    stat_shape = tuple(s for d, s in enumerate(x.shape) if d != axis)

    def at(o, r):
        return widen(xin[_with(o, axis, r)], ct)

    top = compute("row_max", stat_shape, lambda *o: reduce([n], lambda r: at(o, r), "max", ct))
    total = compute("row_sum", stat_shape,
                    lambda *o: reduce([n], lambda r: math_call("exp", at(o, r) - top[o]), "sum", ct))

    def value(*idx):
        o = _without(idx, axis)
        shifted = widen(xin[idx], ct) - top[o]
        if op == "softmax":
            return math_call("exp", shifted) / total[o]
        return shifted - math_call("log", total[o])

    y = compute("y", x.shape, value, dtype=x.dtype)
    return _operator(op, [x], [xin], y, {"kind": op, **row_form(x.shape, (axis,))})


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along `axis`."""
    return _softmax("softmax", x, axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along `axis`."""
    return _softmax("log_softmax", x, axis)


# ------------------------------------------------------------------ layer / rms norm

def _broadcast_parameter(op: str, what: str, p: Any, normalized: Sequence[int], x: Tensor) -> Tensor:
    """A scale or bias broadcastable (numpy, right-aligned) onto the normalized shape."""
    p = require_tensor(op, p, what)
    ok = p.rank <= len(normalized) and all(
        s in (1, n) for s, n in zip(reversed(p.shape), reversed(normalized)))
    if not ok:
        raise ReduceArgumentError(f"{op}: {what} of shape {describe(p)} does not match the normalized shape "
                                  f"{list(normalized)} of x {describe(x)} (it must equal it or broadcast to it)")
    if not p.dtype.is_float():
        raise ReduceArgumentError(f"{op}: {what} must be a float tensor, got {describe(p)}")
    return p


def _param_index(p: Tensor, normalized_idx: Sequence[Expr]) -> tuple:
    tail = list(normalized_idx)[len(normalized_idx) - p.rank:] if p.rank else []
    return tuple(const(0, "int32") if s == 1 else i for s, i in zip(p.shape, tail))


def _row_norm(op: str, x: Tensor, scale: Any, bias: Any, axis: int, epsilon: float, stats: bool = False):
    x = require_tensor(op, x)
    require_float(op, x)
    axis = normalize_axis(op, axis, x)
    epsilon = check_epsilon(op, epsilon, x)
    normalized = x.shape[axis:]
    count = prod(normalized)
    if count == 0:
        raise ReduceArgumentError(f"{op}: the normalized shape {list(normalized)} of x {describe(x)} is empty")
    params = [_broadcast_parameter(op, "scale", scale, normalized, x)]
    if bias is not None:
        params.append(_broadcast_parameter(op, "bias", bias, normalized, x))
    ct = compute_dtype(x.dtype)
    xin = tensor_input("x", x.dtype, x.shape)
    pin = [tensor_input(name, p.dtype, p.shape) for name, p in zip(("scale", "bias"), params)]
    outer_shape = x.shape[:axis]

    def at(o, r):
        return widen(xin[tuple(o) + tuple(r)], ct)

    if op == "layer_norm":
        # mean = pivot + mean(x - pivot), the pivot the row's first element: the sum then
        # adds deviations (order std * count), not values (order mean * count), and keeps its bits
        first = tuple(const(0, "int32") for _ in normalized)
        mean = compute("mean", outer_shape, lambda *o: at(o, first) + reduce(
            normalized, lambda *r: at(o, r) - at(o, first), "mean", ct))
        var = compute("var", outer_shape, lambda *o: reduce(
            normalized, lambda *r: (at(o, r) - mean[o]) * (at(o, r) - mean[o]), "mean", ct))
    else:
        var = compute("mean_square", outer_shape,
                      lambda *o: reduce(normalized, lambda *r: at(o, r) * at(o, r), "mean", ct))

    def value(*idx):
        o, r = idx[:axis], idx[axis:]
        centered = widen(xin[idx], ct) - mean[o] if op == "layer_norm" else widen(xin[idx], ct)
        out = centered * math_call("rsqrt", var[o] + const(epsilon, ct)) * widen(pin[0][_param_index(params[0], r)], ct)
        if len(pin) > 1:
            out = out + widen(pin[1][_param_index(params[1], r)], ct)
        return out

    y = compute("y", x.shape, value, dtype=x.dtype)
    attributes = {"kind": op, "epsilon": epsilon, "has_bias": len(pin) > 1,
                  "scale_shape": tuple(params[0].shape), "bias_shape": tuple(params[-1].shape) if len(pin) > 1 else (),
                  **row_form(x.shape, tuple(range(axis, x.rank)))}
    if not stats:
        return _operator(op, [x, *params], [xin, *pin], y, attributes)
    # ONNX's optional outputs: Mean and InvStdDev, shaped like x with the normalized axes 1
    kept = outer_shape + (1,) * len(normalized)
    mean_out = compute("mean_out", kept, lambda *i: mean[tuple(i[:axis])])
    inv_std = compute("inv_std_dev", kept, lambda *i: math_call("rsqrt", var[tuple(i[:axis])] + const(epsilon, ct)))
    attributes["return_stats"] = True
    task = Task(op, [xin, *pin], [y, mean_out, inv_std], attributes)
    return Operator(op, [x, *params], task, attributes).outputs


def layer_norm(x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5,
               return_stats: bool = False):
    """ONNX LayerNormalization: normalize over ``x.shape[axis:]`` (mean and variance of
    each sample), then ``* scale + bias`` (both broadcast onto ``x.shape[axis:]``).
    With `return_stats`, returns ``(y, mean, inv_std_dev)`` (float32 for half and
    float32 inputs; shaped like x with the normalized axes 1), as ONNX's optional outputs."""
    return _row_norm("layer_norm", x, scale, bias, axis, epsilon, bool(return_stats))


def rms_norm(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x * x) + epsilon) * scale`` over ``x.shape[axis:]``."""
    return _row_norm("rms_norm", x, scale, None, axis, epsilon)


# ------------------------------------------------------------------ channel norms

def _channel_params(op: str, x: Tensor, names: Sequence[str], values: Sequence[Any]) -> list[Tensor]:
    if x.rank < 2:
        raise ReduceArgumentError(f"{op}: x must be [N, C, ...] (rank 2 or more), got {describe(x)}")
    return [check_parameter(op, name, v, (x.shape[1],), x, x) for name, v in zip(names, values)]


def batch_norm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5) -> Tensor:
    """Inference batch normalization over channel axis 1 with the given statistics:
    ``(x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]``. Elementwise (no
    reduction), so it fuses like any elementwise operator."""
    op = "batch_norm"
    x = require_tensor(op, x)
    require_float(op, x)
    epsilon = check_epsilon(op, epsilon, x)
    params = _channel_params(op, x, ("scale", "bias", "mean", "var"), (scale, bias, mean, var))
    ct = compute_dtype(x.dtype)
    xin = tensor_input("x", x.dtype, x.shape)
    s, b, m, v = (tensor_input(n, p.dtype, p.shape) for n, p in zip(("scale", "bias", "mean", "var"), params))

    def value(*idx):
        c = idx[1]
        norm = (widen(xin[idx], ct) - widen(m[c], ct)) * math_call("rsqrt", widen(v[c], ct) + const(epsilon, ct))
        return norm * widen(s[c], ct) + widen(b[c], ct)

    y = compute("y", x.shape, value, dtype=x.dtype)
    return _operator(op, [x, *params], [xin, s, b, m, v], y, {"kind": op, "epsilon": epsilon})


def _grouped_norm(op: str, x: Tensor, scale: Any, bias: Any, groups: int, epsilon: float) -> Tensor:
    x = require_tensor(op, x)
    require_float(op, x)
    epsilon = check_epsilon(op, epsilon, x)
    if x.rank < 3:
        raise ReduceArgumentError(f"{op}: x must be [N, C, D1, ...] (rank 3 or more), got {describe(x)}")
    params = _channel_params(op, x, ("scale", "bias"), (scale, bias))
    channels = x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0 or channels % groups:
        raise ReduceArgumentError(f"{op}: num_groups={groups!r} must be a positive divisor of the "
                                  f"{channels} channels of x {describe(x)}")
    per_group = channels // groups
    spatial = x.shape[2:]
    if prod(spatial) == 0:
        raise ReduceArgumentError(f"{op}: x {describe(x)} has no spatial elements to normalize")
    ct = compute_dtype(x.dtype)
    xin = tensor_input("x", x.dtype, x.shape)
    s, b = (tensor_input(n, p.dtype, p.shape) for n, p in zip(("scale", "bias"), params))
    red = (per_group,) + tuple(spatial)

    def at(n, g, r):
        return widen(xin[(n, g * per_group + r[0], *r[1:])], ct)

    first = tuple(const(0, "int32") for _ in red)  # the pivot, as in layer_norm
    mean = compute("mean", (x.shape[0], groups), lambda n, g: at(n, g, first) + reduce(
        red, lambda *r: at(n, g, r) - at(n, g, first), "mean", ct))
    var = compute("var", (x.shape[0], groups), lambda n, g: reduce(
        red, lambda *r: (at(n, g, r) - mean[n, g]) * (at(n, g, r) - mean[n, g]), "mean", ct))

    def value(*idx):
        n, c = idx[0], idx[1]
        g = c / per_group if per_group > 1 else c
        norm = (widen(xin[idx], ct) - mean[n, g]) * math_call("rsqrt", var[n, g] + const(epsilon, ct))
        return norm * widen(s[c], ct) + widen(b[c], ct)

    y = compute("y", x.shape, value, dtype=x.dtype)
    form = row_form(x.shape, tuple(range(1, x.rank)))  # one [C*spatial] block per sample ...
    form.update(outer=x.shape[0] * groups, extent=per_group * prod(spatial), inner=1)  # ... in `groups` rows
    attributes = {"kind": op, "epsilon": epsilon, "groups": groups, **form}
    return _operator(op, [x, *params], [xin, s, b], y, attributes)


def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5) -> Tensor:
    """Normalize each (sample, channel) over the spatial axes, then ``* scale[c] + bias[c]``."""
    x = require_tensor("instance_norm", x)
    channels = x.shape[1] if x.rank >= 2 else 1
    return _grouped_norm("instance_norm", x, scale, bias, channels, epsilon)


def group_norm(x: Tensor, scale: Tensor, bias: Tensor, num_groups: int, epsilon: float = 1e-5) -> Tensor:
    """ONNX GroupNormalization (opset 21): the C channels in `num_groups` groups, each
    (sample, group) normalized over its channels and the spatial axes, then
    ``* scale[c] + bias[c]`` (scale and bias per channel, shape [C])."""
    return _grouped_norm("group_norm", x, scale, bias, num_groups, epsilon)


OPERATORS = {
    "softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm, "rms_norm": rms_norm,
    "batch_norm": batch_norm, "instance_norm": instance_norm, "group_norm": group_norm,
}
