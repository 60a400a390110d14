"""Shape and layout ONNX ops: Shape, Size, Constant(OfShape), Range, Reshape, Flatten,
(Un)Squeeze, Transpose, Concat, Split, Slice, Gather*, Expand, Tile, Pad, Trilu,
Identity, Dropout, Resize. Shape subgraphs fold with numpy at import (shapes are
static); the rest become operators."""
from __future__ import annotations

import numpy as np

from .dtypes import hidet_dtype, to_array
from .node_context import NodeContext
from .op_table import converter


def _shape(value) -> tuple[int, ...]:
    return tuple(int(s) for s in value.shape)


def _rank(value) -> int:
    return len(value.shape)


def _axis(ctx: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@converter("Shape")
def _shape_op(ctx):
    shape = np.array(_shape(ctx.inputs[0]), dtype=np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return shape[start:end]


@converter("Size")
def _size(ctx):
    return np.array(int(np.prod(_shape(ctx.inputs[0]), dtype=np.int64)), dtype=np.int64)


@converter("Constant")
def _constant(ctx):
    from onnx import numpy_helper

    if "value" in ctx.attrs:
        proto = ctx.node.attribute[[a.name for a in ctx.node.attribute].index("value")].t
        hidet_dtype(proto.data_type, f"{ctx.where} value")
        return to_array(proto)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in ctx.attrs:
            return np.array(ctx.attrs[key], dtype=dtype)
    raise ctx.error(f"attribute {sorted(ctx.attrs)} is not supported (sparse and string constants are not)")


@converter("ConstantOfShape")
def _constant_of_shape(ctx):
    from onnx import numpy_helper

    shape = ctx.ints(0, "shape")
    value = np.zeros((1,), np.float32)
    if "value" in ctx.attrs:
        proto = ctx.node.attribute[[a.name for a in ctx.node.attribute].index("value")].t
        hidet_dtype(proto.data_type, f"{ctx.where} value")
        value = to_array(proto).reshape(-1)
    return np.full(shape, value[0], dtype=value.dtype)


@converter("Range")
def _range(ctx):
    start, limit, delta = (ctx.known(k, what).reshape(()) for k, what in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise ctx.error("delta is 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(count) * delta).astype(start.dtype)


@converter("Identity", fold=lambda ctx: ctx.known(0, "input"))
def _identity(ctx):
    return ctx.inputs[0]


@converter("Dropout")
def _dropout(ctx):
    # Inference: the identity; the mask output (if asked) is all true.
    if ctx.has(2) and ctx.is_known(2) and bool(np.asarray(ctx.inputs[2]).reshape(())):
        raise ctx.error("training_mode=true is not supported (inference only)")
    if ctx.has(2) and not ctx.is_known(2):
        raise ctx.error("training_mode must be known at import (inference only)")
    x = ctx.inputs[0]
    return [x, np.ones(_shape(x), dtype=bool)]


def _reshape_target(ctx, shape_in: tuple, target: list[int], allowzero: bool) -> list[int]:
    out = []
    for k, s in enumerate(target):
        if s == 0 and not allowzero:
            if k >= len(shape_in):
                raise ctx.error(f"shape {target}: 0 at position {k} copies a dimension the input "
                                f"{list(shape_in)} lacks")
            out.append(shape_in[k])
        else:
            out.append(s)
    if out.count(-1) == 1:
        known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
        total = int(np.prod(shape_in, dtype=np.int64))
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape {list(shape_in)} to {target}")
        out[out.index(-1)] = total // known
    return out


@converter("Reshape", needs=("reshape",),
           fold=lambda ctx: ctx.known(0, "data").reshape(_reshape_target(
               ctx, _shape(ctx.inputs[0]), ctx.ints(1, "shape"), bool(ctx.attr("allowzero", 0)))))
def _reshape(ctx):
    x = ctx.tensor(0)
    shape = _reshape_target(ctx, x.shape, ctx.ints(1, "shape"), bool(ctx.attr("allowzero", 0)))
    return ctx.op("reshape")(x, shape)


def _flatten_shape(ctx, shape) -> list[int]:
    axis = int(ctx.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ctx.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return [int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))]


@converter("Flatten", needs=("reshape",),
           fold=lambda ctx: ctx.known(0, "input").reshape(_flatten_shape(ctx, _shape(ctx.inputs[0]))))
def _flatten(ctx):
    x = ctx.tensor(0)
    return ctx.op("reshape")(x, _flatten_shape(ctx, x.shape))


def _axes(ctx, rank: int) -> list[int] | None:
    if ctx.opset >= 13 and ctx.node.op_type in ("Squeeze", "Unsqueeze"):
        return ctx.ints(1, "axes") if ctx.has(1) else None
    axes = ctx.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def _squeeze_fold(ctx):
    x = ctx.known(0, "data")
    axes = _axes(ctx, x.ndim)
    return np.squeeze(x, axis=None if axes is None else tuple(axes))


@converter("Squeeze", needs=("squeeze",), fold=_squeeze_fold)
def _squeeze(ctx):
    x = ctx.tensor(0)
    return ctx.op("squeeze")(x, _axes(ctx, x.rank))


def _unsqueeze_fold(ctx):
    x = ctx.known(0, "data")
    axes = _axes(ctx, x.ndim)
    return np.expand_dims(x, tuple(axes))


@converter("Unsqueeze", needs=("unsqueeze",), fold=_unsqueeze_fold)
def _unsqueeze(ctx):
    x = ctx.tensor(0)
    return ctx.op("unsqueeze")(x, _axes(ctx, x.rank))


@converter("Transpose", needs=("transpose",),
           fold=lambda ctx: np.ascontiguousarray(np.transpose(ctx.known(0, "data"), ctx.attr("perm"))))
def _transpose(ctx):
    perm = ctx.attr("perm")
    return ctx.op("transpose")(ctx.tensor(0), None if perm is None else [int(p) for p in perm])


@converter("Concat", needs=("concat",),
           fold=lambda ctx: np.concatenate([ctx.known(k, f"input {k}") for k in range(len(ctx.inputs))],
                                           axis=ctx.attr("axis")))
def _concat(ctx):
    return ctx.op("concat")([ctx.tensor(k) for k in range(len(ctx.inputs))], axis=int(ctx.attr("axis")))


@converter("Split", needs=("split",))
def _split(ctx):
    x = ctx.tensor(0)
    axis = _axis(ctx, int(ctx.attr("axis", 0)), x.rank)
    outputs = len(ctx.node.output)
    if ctx.has(1):
        sizes = ctx.ints(1, "split")
    elif ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    else:
        n = int(ctx.attr("num_outputs", outputs))
        if ctx.attr("num_outputs") is None and x.shape[axis] % n:
            raise ctx.error(f"cannot split extent {x.shape[axis]} into {n} equal parts")
        return ctx.op("split")(x, axis=axis, num_outputs=n)
    return ctx.op("split")(x, sizes=sizes, axis=axis)


def _slice_args(ctx, rank: int):
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
    steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    big = 2 ** 62  # INT64 sentinels ("to the end") clamp anyway; keep them Python-sized
    starts = [max(min(s, big), -big) for s in starts]
    ends = [max(min(e, big), -big) for e in ends]
    return starts, ends, [_axis(ctx, a, rank, "axes entry") for a in axes], steps


def _slice_fold(ctx):
    x = ctx.known(0, "data")
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(*_slice_args(ctx, x.ndim)):
        index[a] = slice(s, e, st)
    return x[tuple(index)]


@converter("Slice", needs=("slice",), fold=_slice_fold)
def _slice(ctx):
    x = ctx.tensor(0)
    starts, ends, axes, steps = _slice_args(ctx, x.rank)
    return ctx.op("slice")(x, starts, ends, axes, steps)


def _gather_fold(ctx):
    x, idx = ctx.known(0, "data"), ctx.known(1, "indices")
    axis = _axis(ctx, int(ctx.attr("axis", 0)), x.ndim)
    n = x.shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise ctx.error(f"indices out of range for extent {n}")
    return np.take(x, np.where(idx < 0, idx + n, idx), axis=axis)


@converter("Gather", needs=("gather",), fold=_gather_fold)
def _gather(ctx):
    return ctx.op("gather")(ctx.tensor(0), ctx.tensor(1), axis=int(ctx.attr("axis", 0)))


@converter("GatherElements", needs=("gather_elements",))
def _gather_elements(ctx):
    return ctx.op("gather_elements")(ctx.tensor(0), ctx.tensor(1), axis=int(ctx.attr("axis", 0)))


@converter("GatherND", needs=("gather_nd",))
def _gather_nd(ctx):
    return ctx.op("gather_nd")(ctx.tensor(0), ctx.tensor(1), batch_dims=int(ctx.attr("batch_dims", 0)))


def _expand_shape(ctx, shape_in) -> list[int]:
    target = ctx.ints(1, "shape")
    try:
        return list(np.broadcast_shapes(tuple(shape_in), tuple(target)))
    except ValueError:
        raise ctx.error(f"cannot broadcast {list(shape_in)} with {target}") from None


@converter("Expand", needs=("expand",),
           fold=lambda ctx: np.broadcast_to(ctx.known(0, "input"), _expand_shape(ctx, _shape(ctx.inputs[0]))).copy())
def _expand(ctx):
    x = ctx.tensor(0)
    return ctx.op("expand")(x, _expand_shape(ctx, x.shape))


@converter("Tile", needs=("tile",), fold=lambda ctx: np.tile(ctx.known(0, "input"), ctx.ints(1, "repeats")))
def _tile(ctx):
    return ctx.op("tile")(ctx.tensor(0), ctx.ints(1, "repeats"))


@converter("Pad", needs=("pad",))
def _pad(ctx):
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "constant")
    if mode == "wrap":
        raise ctx.error("mode 'wrap' is not supported (constant, reflect, edge)")
    pads = ctx.ints(1, "pads") if ctx.opset >= 11 else [int(p) for p in ctx.attr("pads")]
    axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(x.rank))
    axes = [_axis(ctx, a, x.rank, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must hold 2 entries per padded axis ({len(axes)})")
    full = [0] * (2 * x.rank)
    for k, a in enumerate(axes):
        full[a], full[a + x.rank] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in full):
        raise ctx.error(f"negative pads {pads} (cropping) are not supported")
    value = 0
    if ctx.has(2):
        value = np.asarray(ctx.known(2, "constant_value")).reshape(()).item()
    return ctx.op("pad")(x, full, mode=mode, value=value)


@converter("Trilu", needs=("trilu",))
def _trilu(ctx):
    k = int(ctx.known(1, "k").reshape(())) if ctx.has(1) else 0
    return ctx.op("trilu")(ctx.tensor(0), k=k, upper=bool(ctx.attr("upper", 1)))


@converter("Resize", needs=("resize",))
def _resize(ctx):
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise ctx.error(f"mode {mode!r} is not supported (nearest, linear)")
    if ctx.attr("antialias", 0):
        raise ctx.error("antialias=1 is not supported")
    cmode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if cmode == "tf_crop_and_resize":
        raise ctx.error("coordinate_transformation_mode 'tf_crop_and_resize' is not supported")
    if ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.error("keep_aspect_ratio_policy other than 'stretch' is not supported")
    axes = [int(a) for a in ctx.attr("axes", list(range(x.rank)))]
    axes = [_axis(ctx, a, x.rank, "axes entry") for a in axes]
    scales = [1.0] * x.rank
    shape = list(x.shape)
    def given(k: int) -> bool:  # an optional input may be present but empty
        return ctx.has(k) and (not ctx.is_known(k) or ctx.inputs[k].size > 0)

    has_scales = given(2)
    if given(3):
        sizes = ctx.ints(3, "sizes")
        for a, s in zip(axes, sizes):
            shape[a] = s
            scales[a] = s / x.shape[a]
    elif has_scales:
        given = [float(s) for s in np.asarray(ctx.known(2, "scales")).reshape(-1)]
        for a, s in zip(axes, given):
            scales[a] = s
            shape[a] = int(np.floor(x.shape[a] * s))
    else:
        raise ctx.error("needs scales or sizes")
    return ctx.op("resize")(x, shape, scales=scales, mode=mode, coordinate_transformation_mode=cmode,
                            nearest_mode=ctx.attr("nearest_mode", "round_prefer_floor"))
