"""Network ONNX ops: MatMul, Gemm, Einsum, Conv, pooling, normalizations, softmax and
reductions. Reductions, softmax and norms are the reduce plugin's operators (looked
up by name; a model that needs them without that plugin is refused, listing them)."""
from __future__ import annotations

import numpy as np

from .dtypes import value_dtype
from .node_context import NodeContext
from .op_table import converter


@converter("MatMul", needs=("matmul",))
def _matmul(ctx):
    return ctx.op("matmul")(ctx.tensor(0), ctx.tensor(1))


def _transposed(ctx, k: int, flag: str):
    """Input `k`, transposed when attribute `flag` is set (known weights in numpy)."""
    if not ctx.attr(flag, 0):
        return ctx.tensor(k)
    if ctx.is_known(k):
        return ctx.as_tensor(np.ascontiguousarray(ctx.inputs[k].T), k)
    return ctx.op("transpose")(ctx.tensor(k), [1, 0])


@converter("Gemm", needs=("matmul", "transpose", "mul", "add"))
def _gemm(ctx):
    a, b = _transposed(ctx, 0, "transA"), _transposed(ctx, 1, "transB")
    if a.rank != 2 or b.rank != 2:
        raise ctx.error(f"A and B must be matrices, got ranks {a.rank} and {b.rank}")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    y = ctx.op("matmul")(a, b)
    if alpha != 1.0:
        y = ctx.op("mul")(y, ctx.as_tensor(np.asarray(alpha, dtype=value_dtype(y.dtype))))
    if ctx.has(2) and beta != 0.0:
        if ctx.is_known(2):
            c = ctx.as_tensor((ctx.inputs[2] * beta).astype(ctx.inputs[2].dtype) if beta != 1.0 else ctx.inputs[2], 2)
        else:
            c = ctx.tensor(2)
            if beta != 1.0:
                c = ctx.op("mul")(c, ctx.as_tensor(np.asarray(beta, dtype=value_dtype(c.dtype))))
        y = ctx.op("add")(y, c)
    return y


# ------------------------------------------------------------------ windows

def _window_pads(ctx, spatial: tuple, kernel: list[int], strides: list[int], dilations: list[int],
                 ceil_mode: bool = False) -> list[int]:
    """ONNX pads (all begins, then all ends), auto_pad resolved."""
    n = len(spatial)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {pads} must have {2 * n} entries")
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad {auto!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begin = small if auto == "SAME_UPPER" else total - small
        begins.append(begin)
        ends.append(total - begin)
    return begins + ends


def _as_2d(ctx, x, what: str):
    """(x as NCHW, was it 1-D): 1-D windows run as 2-D ones of height 1."""
    if x.rank == 3:
        return ctx.op("unsqueeze")(x, [2]), True
    if x.rank != 4:
        raise ctx.error(f"{what} of rank {x.rank} is not supported (1-D and 2-D windows only)")
    return x, False


def _window_attrs(ctx, x_rank: int, kernel: list[int]):
    n = x_rank - 2
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n)]
    return strides, dilations


def _to_2d_attrs(values: list[int], pads: list[int] | None, was_1d: bool):
    if not was_1d:
        return values, pads
    return [1] + values, (None if pads is None else [0, pads[0], 0, pads[1]])


@converter("Conv", needs=("conv2d", "unsqueeze", "squeeze"))
def _conv(ctx):
    x, w = ctx.tensor(0), ctx.tensor(1)
    kernel = [int(k) for k in ctx.attr("kernel_shape", w.shape[2:])]
    strides, dilations = _window_attrs(ctx, x.rank, kernel)
    pads = _window_pads(ctx, x.shape[2:], kernel, strides, dilations)
    x2, was_1d = _as_2d(ctx, x, "Conv input")
    w2 = ctx.op("unsqueeze")(w, [2]) if was_1d else w
    if was_1d and ctx.is_known(1):
        w2 = ctx.as_tensor(ctx.inputs[1][:, :, None, :], 1)
    strides, _ = _to_2d_attrs(strides, None, was_1d)
    dilations, pads = _to_2d_attrs(dilations, pads, was_1d)
    bias = ctx.tensor(2) if ctx.has(2) else None
    padding = (pads[0], pads[1], pads[2], pads[3])
    y = ctx.op("conv2d")(x2, w2, bias, stride=tuple(strides), padding=padding, dilation=tuple(dilations),
                         groups=int(ctx.attr("group", 1)))
    return ctx.op("squeeze")(y, [2]) if was_1d else y


@converter("MaxPool", needs=("max_pool2d", "unsqueeze", "squeeze"))
def _max_pool(ctx):
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.error("the Indices output is not supported")
    if ctx.attr("storage_order", 0):
        raise ctx.error("storage_order=1 is not supported")
    x = ctx.tensor(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations = _window_attrs(ctx, x.rank, kernel)
    pads = _window_pads(ctx, x.shape[2:], kernel, strides, dilations)
    x2, was_1d = _as_2d(ctx, x, "MaxPool input")
    kernel, _ = _to_2d_attrs(kernel, None, was_1d)
    strides, _ = _to_2d_attrs(strides, None, was_1d)
    dilations, pads = _to_2d_attrs(dilations, pads, was_1d)
    y = ctx.op("max_pool2d")(x2, tuple(kernel), stride=tuple(strides), padding=tuple(pads),
                             dilation=tuple(dilations), ceil_mode=bool(ctx.attr("ceil_mode", 0)))
    return ctx.op("squeeze")(y, [2]) if was_1d else y


@converter("AveragePool", needs=("avg_pool2d", "unsqueeze", "squeeze"))
def _avg_pool(ctx):
    x = ctx.tensor(0)
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations = _window_attrs(ctx, x.rank, kernel)
    if any(d != 1 for d in dilations):
        raise ctx.error(f"dilations {dilations} are not supported for AveragePool")
    pads = _window_pads(ctx, x.shape[2:], kernel, strides, dilations)
    x2, was_1d = _as_2d(ctx, x, "AveragePool input")
    kernel, _ = _to_2d_attrs(kernel, None, was_1d)
    strides, pads = _to_2d_attrs(strides, pads, was_1d)
    y = ctx.op("avg_pool2d")(x2, tuple(kernel), stride=tuple(strides), padding=tuple(pads),
                             ceil_mode=bool(ctx.attr("ceil_mode", 0)),
                             count_include_pad=bool(ctx.attr("count_include_pad", 0)))
    return ctx.op("squeeze")(y, [2]) if was_1d else y


@converter("GlobalAveragePool", needs=("global_avg_pool2d", "unsqueeze", "squeeze"))
def _global_avg_pool(ctx):
    x2, was_1d = _as_2d(ctx, ctx.tensor(0), "GlobalAveragePool input")
    y = ctx.op("global_avg_pool2d")(x2)
    return ctx.op("squeeze")(y, [2]) if was_1d else y


@converter("GlobalMaxPool", needs=("max_pool2d", "unsqueeze", "squeeze"))
def _global_max_pool(ctx):
    x2, was_1d = _as_2d(ctx, ctx.tensor(0), "GlobalMaxPool input")
    y = ctx.op("max_pool2d")(x2, tuple(x2.shape[2:]), stride=1)
    return ctx.op("squeeze")(y, [2]) if was_1d else y


# ------------------------------------------------------------------ normalizations

@converter("BatchNormalization", needs=("mul", "add"))
def _batch_norm(ctx):
    if ctx.attr("training_mode", 0):
        raise ctx.error("training_mode=1 is not supported (inference only)")
    if any(name for name in ctx.node.output[1:]):
        raise ctx.error("the running mean/variance outputs exist only in training mode")
    x = ctx.tensor(0)
    eps = float(ctx.attr("epsilon", 1e-5))
    if all(ctx.is_known(k) for k in (1, 2, 3, 4)):
        # Inference BN with known statistics is a per-channel affine map: fold its
        # coefficients once (float64), then one multiply and one add.
        scale, bias, mean, var = (ctx.inputs[k].astype(np.float64) for k in (1, 2, 3, 4))
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        shape = (-1,) + (1,) * (x.rank - 2)
        dtype = value_dtype(x.dtype)
        y = ctx.op("mul")(x, ctx.as_tensor(a.reshape(shape).astype(dtype), 1))
        return ctx.op("add")(y, ctx.as_tensor(b.reshape(shape).astype(dtype), 2))
    return ctx.op("batch_norm")(x, ctx.tensor(1), ctx.tensor(2), ctx.tensor(3), ctx.tensor(4), epsilon=eps)


@converter("LayerNormalization", needs=("layer_norm",))
def _layer_norm(ctx):
    x = ctx.tensor(0)
    bias = ctx.tensor(2) if ctx.has(2) else None
    axis, eps = int(ctx.attr("axis", -1)), float(ctx.attr("epsilon", 1e-5))
    if not any(name for name in ctx.node.output[1:]):
        return ctx.op("layer_norm")(x, ctx.tensor(1), bias, axis=axis, epsilon=eps)
    if ctx.attr("stash_type", 1) != 1:
        raise ctx.error("stash_type other than 1 (float32) is not supported for the Mean and InvStdDev outputs")
    # the optional Mean and InvStdDev outputs (float32, the stash type)
    return list(ctx.op("layer_norm")(x, ctx.tensor(1), bias, axis=axis, epsilon=eps, return_stats=True))


@converter("InstanceNormalization", needs=("instance_norm",))
def _instance_norm(ctx):
    return ctx.op("instance_norm")(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                                   epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("GroupNormalization", needs=("group_norm",))
def _group_norm(ctx):
    x = ctx.tensor(0)
    groups = int(ctx.attr("num_groups"))
    if ctx.attr("stash_type", 1) != 1:
        raise ctx.error("stash_type other than 1 (float32) is not supported")
    scale, bias = ctx.tensor(1), ctx.tensor(2)
    if ctx.opset < 21 and x.rank >= 2 and scale.shape == (groups,):
        # opsets 18-20 give one scale and bias per group: repeat them per channel
        if not (ctx.is_known(1) and ctx.is_known(2)):
            raise ctx.error("per-group scale and bias (opset < 21) must be constants")
        per = x.shape[1] // groups
        scale = ctx.as_tensor(np.repeat(ctx.inputs[1], per), 1)
        bias = ctx.as_tensor(np.repeat(ctx.inputs[2], per), 2)
    return ctx.op("group_norm")(x, scale, bias, groups, epsilon=float(ctx.attr("epsilon", 1e-5)))


@converter("CumSum", needs=("cumsum",))
def _cumsum(ctx):
    axis = int(ctx.known(1, "axis").reshape(()))
    return ctx.op("cumsum")(ctx.tensor(0), axis, exclusive=bool(ctx.attr("exclusive", 0)),
                            reverse=bool(ctx.attr("reverse", 0)))


@converter("Softmax", needs=("softmax",))
def _softmax(ctx):
    return ctx.op("softmax")(ctx.tensor(0), axis=int(ctx.attr("axis", -1)))


@converter("LogSoftmax", needs=("log_softmax",))
def _log_softmax(ctx):
    return ctx.op("log_softmax")(ctx.tensor(0), axis=int(ctx.attr("axis", -1)))


REDUCTIONS = {
    "ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod", "ReduceL2": "reduce_l2", "ReduceSumSquare": "reduce_sum_square",
}
# opset where `axes` moved from an attribute to an input
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(ctx: NodeContext, op_type: str) -> list[int]:
    if ctx.opset >= _AXES_INPUT_SINCE.get(op_type, 18):
        return ctx.ints(1, "axes") if ctx.has(1) else []
    return [int(a) for a in ctx.attr("axes", [])]


def _is_spatial_mean(axes: list[int], rank: int) -> bool:
    return rank == 4 and sorted(a + rank if a < 0 else a for a in axes) == [2, 3]


def _spatial_mean_alternative(node, known: dict):
    """ReduceMean over H and W of an NCHW tensor is global average pooling, which
    hidet-plugin-ops has; the rank is checked again at conversion."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) > 1 and node.input[1]:
        axes = known.get(node.input[1])
        axes = None if axes is None else [int(a) for a in axes.reshape(-1)]
    else:
        axes = attrs.get("axes")
    if axes is None or sorted(a % 4 for a in axes) != [2, 3] or len(axes) != 2:
        return None
    return ("global_avg_pool2d", "reshape")


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else (False if dtype.kind == "b" else np.iinfo(dtype).min)


def _highest(dtype: np.dtype):
    return np.inf if dtype.kind == "f" else (True if dtype.kind == "b" else np.iinfo(dtype).max)


# the value of a reduction over an empty set, by operator
_EMPTY_SET = {"reduce_sum": lambda d: 0, "reduce_sum_square": lambda d: 0, "reduce_l2": lambda d: 0,
              "reduce_prod": lambda d: 1, "reduce_max": _lowest, "reduce_min": _highest}


def _reduction(op_type: str, name: str) -> None:
    def convert(ctx: NodeContext):
        from hidet_framework.extension import plugin_host

        x = ctx.tensor(0)
        axes = _reduce_axes(ctx, op_type)
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.rank))
        keepdims = bool(ctx.attr("keepdims", 1))
        if name not in plugin_host().operators and op_type == "ReduceMean" and _is_spatial_mean(axes, x.rank):
            y = ctx.op("global_avg_pool2d")(x)
            return y if keepdims else ctx.op("reshape")(y, list(x.shape[:2]))
        axes = [a + x.rank if a < 0 else a for a in axes]
        if any(x.shape[a] == 0 for a in axes) and name in _EMPTY_SET:
            # a reduction over nothing is its identity element, known at import
            shape = [1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes]
            return np.full(shape, _EMPTY_SET[name](value_dtype(x.dtype)), dtype=value_dtype(x.dtype))
        if x.dtype.is_bool() and name in ("reduce_max", "reduce_min"):
            # max and min of booleans are any and all: reduce their 0/1 bytes
            y = ctx.op(name)(ctx.op("cast")(x, "uint8"), axes=axes, keepdims=keepdims)
            return ctx.op("cast")(y, "bool")
        return ctx.op(name)(x, axes=axes, keepdims=keepdims)

    alternative = _spatial_mean_alternative if op_type == "ReduceMean" else None
    converter(op_type, needs=(name,), alternative=alternative)(convert)


for _op, _name in REDUCTIONS.items():
    _reduction(_op, _name)


def _arg(op_type: str, name: str) -> None:
    def convert(ctx: NodeContext):
        return ctx.op(name)(ctx.tensor(0), axis=int(ctx.attr("axis", 0)), keepdims=bool(ctx.attr("keepdims", 1)),
                            select_last_index=bool(ctx.attr("select_last_index", 0)))

    converter(op_type, needs=(name,))(convert)


_arg("ArgMax", "argmax")
_arg("ArgMin", "argmin")
