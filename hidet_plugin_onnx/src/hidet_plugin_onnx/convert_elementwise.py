"""Elementwise ONNX ops: unary math and activations, broadcasting arithmetic,
comparisons, logic, Where, Clip, Cast, the variadic Max/Min/Sum/Mean.

Arithmetic, comparison and logic nodes whose inputs are all known fold with numpy
(shape arithmetic); everything else becomes an operator.
"""
from __future__ import annotations

import numpy as np

from .dtypes import hidet_dtype, value_dtype
from .node_context import NodeContext
from .op_table import converter

UNARY = {
    "Abs": "abs", "Neg": "neg", "Relu": "relu", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Erf": "erf",
    "Tanh": "tanh", "Sigmoid": "sigmoid", "Ceil": "ceil", "Floor": "floor", "Round": "round", "Sin": "sin",
    "Cos": "cos", "Sign": "sign", "Reciprocal": "reciprocal", "Softplus": "softplus", "HardSwish": "hard_swish",
    "IsNaN": "isnan", "Not": "logical_not",
}
_NUMPY_UNARY = {"Abs": np.abs, "Neg": np.negative, "Ceil": np.ceil, "Floor": np.floor, "Sqrt": np.sqrt,
                "Not": np.logical_not, "Sign": np.sign}


def _unary(op_type: str, name: str) -> None:
    def convert(ctx: NodeContext):
        return ctx.op(name)(ctx.tensor(0))

    fold = None
    if op_type in _NUMPY_UNARY:
        def fold(ctx: NodeContext):
            x = ctx.known(0, "X")
            return _NUMPY_UNARY[op_type](x).astype(x.dtype)
    converter(op_type, needs=(name,), fold=fold)(convert)


for _op, _name in UNARY.items():
    _unary(_op, _name)


@converter("Elu", needs=("elu",))
def _elu(ctx):
    return ctx.op("elu")(ctx.tensor(0), alpha=float(ctx.attr("alpha", 1.0)))


@converter("LeakyRelu", needs=("leaky_relu",))
def _leaky_relu(ctx):
    return ctx.op("leaky_relu")(ctx.tensor(0), alpha=float(ctx.attr("alpha", 0.01)))


@converter("HardSigmoid", needs=("hard_sigmoid",))
def _hard_sigmoid(ctx):
    return ctx.op("hard_sigmoid")(ctx.tensor(0), alpha=float(ctx.attr("alpha", 0.2)), beta=float(ctx.attr("beta", 0.5)))


@converter("IsInf", needs=("isinf",))
def _isinf(ctx):
    return ctx.op("isinf")(ctx.tensor(0), detect_positive=bool(ctx.attr("detect_positive", 1)),
                           detect_negative=bool(ctx.attr("detect_negative", 1)))


@converter("Gelu", needs=("gelu",))
def _gelu(ctx):
    return ctx.op("gelu")(ctx.tensor(0), approximate=ctx.attr("approximate", "none"))


@converter("PRelu", needs=("prelu",))
def _prelu(ctx):
    return ctx.op("prelu")(ctx.tensor(0), ctx.tensor(1))


# ------------------------------------------------------------------ binary

def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":  # ONNX integer Div truncates, like C
        q = np.abs(a) // np.abs(b)
        return (q * np.sign(a) * np.sign(b)).astype(np.result_type(a, b))
    return (a / b).astype(np.result_type(a, b))


BINARY = {
    "Add": ("add", np.add), "Sub": ("sub", np.subtract), "Mul": ("mul", np.multiply), "Div": ("div", _int_div),
    "Equal": ("equal", np.equal), "Less": ("less", np.less), "LessOrEqual": ("less_equal", np.less_equal),
    "Greater": ("greater", np.greater), "GreaterOrEqual": ("greater_equal", np.greater_equal),
    "And": ("logical_and", np.logical_and), "Or": ("logical_or", np.logical_or),
    "Xor": ("logical_xor", np.logical_xor),
}


def _binary(op_type: str, name: str, reference) -> None:
    def convert(ctx: NodeContext):
        a, b = ctx.tensor(0), ctx.tensor(1)
        if op_type == "Div" and not a.dtype.is_float():
            return ctx.op("div")(a, b, rounding_mode="trunc")
        return ctx.op(name)(a, b)

    def fold(ctx: NodeContext):
        return reference(ctx.known(0, "A"), ctx.known(1, "B"))

    converter(op_type, needs=(name,), fold=fold)(convert)


for _op, (_name, _ref) in BINARY.items():
    _binary(_op, _name, _ref)


@converter("Pow", needs=("pow", "cast"))
def _pow(ctx):
    base, exponent = ctx.tensor(0), ctx.tensor(1)
    if exponent.dtype is not base.dtype:
        exponent = ctx.op("cast")(exponent, base.dtype)
    out = ctx.op("pow")(base, exponent)
    return out if out.dtype is base.dtype else ctx.op("cast")(out, base.dtype)  # ONNX: the base's type


@converter("Mod", needs=("mod",), fold=lambda ctx: (np.fmod if ctx.attr("fmod", 0) else np.mod)(
    ctx.known(0, "A"), ctx.known(1, "B")))
def _mod(ctx):
    return ctx.op("mod")(ctx.tensor(0), ctx.tensor(1), fmod=bool(ctx.attr("fmod", 0)))


def _variadic(op_type: str, name: str, reference) -> None:
    def convert(ctx: NodeContext):
        values = [ctx.tensor(k) for k in range(len(ctx.inputs))]
        out = values[0]
        for v in values[1:]:
            out = ctx.op(name)(out, v)
        if op_type == "Mean":
            out = ctx.op("div")(out, ctx.as_tensor(np.asarray(len(values), dtype=value_dtype(out.dtype))))
        return out

    def fold(ctx: NodeContext):
        values = [ctx.known(k, f"input {k}") for k in range(len(ctx.inputs))]
        out = values[0]
        for v in values[1:]:
            out = reference(out, v)
        return out / len(values) if op_type == "Mean" else out

    converter(op_type, needs=(name, "div", "add"), fold=fold)(convert)


_variadic("Max", "maximum", np.maximum)
_variadic("Min", "minimum", np.minimum)
_variadic("Sum", "add", np.add)
_variadic("Mean", "add", np.add)


@converter("Where", needs=("where",), fold=lambda ctx: np.where(ctx.known(0, "condition"), ctx.known(1, "X"),
                                                                 ctx.known(2, "Y")))
def _where(ctx):
    return ctx.op("where")(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))


@converter("Clip", needs=("clip",))
def _clip(ctx):
    x = ctx.tensor(0)
    bounds = []
    for k, what in ((1, "min"), (2, "max")):
        if not ctx.has(k):
            bounds.append(None)
        elif ctx.is_known(k):
            bounds.append(np.asarray(ctx.inputs[k]).reshape(()).item())
        else:
            bounds.append(ctx.tensor(k))
    if ctx.opset < 11:
        bounds = [ctx.attr("min"), ctx.attr("max")]
    return ctx.op("clip")(x, min=bounds[0], max=bounds[1])


def _cast_target(ctx) -> str:
    if ctx.node.op_type == "CastLike":
        like = ctx.inputs[1]
        return like.dtype.name if hasattr(like.dtype, "is_float") else ctx.tensor(1).dtype.name
    target = hidet_dtype(ctx.attr("to"), f"{ctx.where} 'to'")
    return ctx.float_dtype if target == "float32" and ctx.float_dtype else target


@converter("Cast", "CastLike", needs=("cast",))
def _cast(ctx):
    target = _cast_target(ctx)
    if ctx.is_known(0) and ctx.inputs[0].size <= 1 << 16:
        from hidet_framework.ir.dtypes import data_type

        return np.asarray(ctx.inputs[0]).astype(value_dtype(data_type(target)))
    x = ctx.tensor(0)
    return x if x.dtype.name == target else ctx.op("cast")(x, target)
