"""Random graph programs for the fusion properties (test_properties.py).

A program is a start shape and a list of steps; `build` interprets it twice, once into
a hidet graph (operator functions from the plugin registry) and once in float64 numpy,
so the reference never shares code with what it checks. Steps act on the "current"
value and on the last two axes only, so every step applies at every rank.

Anchors (not injective): matmul (rank 2), batch_matmul (rank 3), conv2d (as the first
step of a rank-4 start), reduce_sum / softmax / layer_norm over the last axis, attention
(the current value as the queries: ``softmax(x @ k^T * c (+ mask)) @ v``, which the
fuse_attention rule makes one operator, with its templates' grafts). Around
them: elementwise chains, broadcast operands, transposes, reshapes, casts, slices,
pads, concats, constants, returned intermediates ("tap"), values read twice
("residual") and consumers that are not bijective (broadcast_to, slice, pad, concat
after an anchor).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

DIMS = (1, 2, 3, 5)  # few distinct sizes: kernels repeat across examples (build cache)
CONV_DIMS = (1, 2, 3)  # the evaluator interprets a convolution element by element: kept small

ANCHORS = ("matmul", "batch_matmul", "reduce_sum", "softmax", "layer_norm", "attention")
PLAIN = ("relu", "tanh", "neg", "sigmoid", "abs", "add_input", "mul_row", "sub_const", "transpose",
         "reshape", "cast", "slice", "pad", "concat", "broadcast", "tap", "residual")

_UNARY_NP = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, "neg": np.negative,
             "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "abs": np.abs}


@st.composite
def programs(draw, max_steps: int = 10) -> dict:
    """A start shape and 2..max_steps steps with one or two anchors."""
    rank = draw(st.sampled_from((2, 3, 4)))
    shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    conv = rank == 4 and draw(st.booleans())
    if conv:
        shape = (1, draw(st.sampled_from(CONV_DIMS)), *shape[2:])
    n_steps = draw(st.integers(2, max_steps))
    n_anchors = draw(st.integers(1, 2))
    steps: list[tuple] = []
    if conv:
        steps.append(("conv2d", draw(st.sampled_from(CONV_DIMS)), draw(st.integers(0, 1)), draw(st.booleans())))
        n_anchors -= 1
    anchor_at = set(draw(st.lists(st.integers(0, n_steps - 1), min_size=n_anchors, max_size=n_anchors,
                                  unique=True)))
    for k in range(len(steps), n_steps):
        kind = draw(st.sampled_from(ANCHORS if k in anchor_at else PLAIN))
        steps.append((kind, draw(st.sampled_from(DIMS)), draw(st.integers(0, 2))))
    return {"shape": shape, "steps": steps}


class _Builder:
    """Interprets steps on `lib` ("hf" or "np"); inputs and constants come from `values`."""

    def __init__(self, lib: str, ops: Any, values: list) -> None:
        self.lib, self.ops, self.values = lib, ops, values
        self.inputs: list = []          # hf: symbols; np: arrays consumed in order
        self.specs: list = []           # (shape, role) of each extra input, in order
        self.outputs: list = []

    # -- new operands ------------------------------------------------------------------
    def _operand(self, shape: tuple, constant: bool = False):
        """A fresh graph input, or a constant (folded into the graph) when `constant`."""
        array = self.values.pop(0)
        assert array.shape == tuple(shape), (array.shape, shape)
        if self.lib == "np":
            return array.astype(np.float64)
        import hidet_framework as hf
        if constant:
            return hf.constant(array.astype(np.float32))
        sym = hf.symbol(tuple(shape), "float32")
        self.inputs.append(sym)
        return sym

    # -- steps -------------------------------------------------------------------------
    def step(self, x, step: tuple):
        kind, dim, arg = step[0], step[1], step[2]
        shape = tuple(x.shape)
        o, np_ = self.ops, self.lib == "np"
        if kind in _UNARY_NP:
            return _UNARY_NP[kind](x) if np_ else getattr(o, kind)(x)
        if kind == "add_input":  # same shape, or broadcast over the leading axes
            b = self._operand(shape if arg == 0 else shape[-1:])
            return x + b if np_ else o.add(x, b)
        if kind == "mul_row":  # a constant broadcast along the last axis
            c = self._operand(shape[-2:-1] + (1,) if len(shape) >= 2 else (1,), constant=True)
            return x * c if np_ else o.mul(x, c)
        if kind == "sub_const":
            c = self._operand(shape[-1:], constant=True)
            return x - c if np_ else o.sub(x, c)
        if kind == "transpose":
            perm = list(range(len(shape)))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            return np.transpose(x, perm) if np_ else o.transpose(x, perm)
        if kind == "reshape":  # swap the last two sizes (not a transpose: elements keep order)
            new = shape[:-2] + (shape[-1], shape[-2])
            return x.reshape(new) if np_ else o.reshape(x, list(new))
        if kind == "cast":  # through float64 and back (the second cast is its own operator)
            return x.copy() if np_ else o.cast(o.cast(x, "float64"), "float32")
        if kind == "slice":  # drop the first `1 + arg % 2` columns, when there are more
            drop = min(1 + arg % 2, shape[-1] - 1)
            if drop <= 0:
                return x
            return x[..., drop:] if np_ else o.slice(x, [drop], [shape[-1]], axes=[len(shape) - 1])
        if kind == "pad":  # zeros before and after the last axis
            pads = [0] * (2 * len(shape))
            pads[len(shape) - 1], pads[-1] = 1, arg
            if np_:
                return np.pad(x, [(0, 0)] * (len(shape) - 1) + [(1, arg)])
            return o.pad(x, pads)
        if kind == "concat":
            other = self._operand(shape[:-1] + (dim,))
            return np.concatenate([x, other], -1) if np_ else o.concat([x, other], axis=len(shape) - 1)
        if kind == "broadcast":  # a new leading axis of two: not a bijection (rank kept <= 4)
            if len(shape) >= 4:
                return x
            new = (2,) + shape
            return np.broadcast_to(x, new) if np_ else o.broadcast_to(x, list(new))
        if kind == "tap":  # the value is returned and still consumed
            if not any(x is y for y in self.outputs):
                self.outputs.append(x)
            return x
        if kind == "residual":  # read twice: by relu and by the add
            return np.maximum(x, 0) + x if np_ else o.add(o.relu(x), x)
        return self._anchor(x, step)

    def _anchor(self, x, step: tuple):
        kind, dim, arg = step[0], step[1], step[2]
        shape = tuple(x.shape)
        o, np_ = self.ops, self.lib == "np"
        if kind == "matmul" and len(shape) == 2:
            w = self._operand((shape[-1], dim), constant=arg == 1)
            return x @ w if np_ else o.matmul(x, w)
        if kind == "batch_matmul" and len(shape) == 3:
            w = self._operand((shape[0], shape[-1], dim))
            return x @ w if np_ else o.batch_matmul(x, w)
        if kind in ("matmul", "batch_matmul", "reduce_sum"):  # other ranks: a reduction instead
            return x.sum(-1, keepdims=True) if np_ else o.reduce_sum(x, axes=[-1], keepdims=True)
        if kind == "attention":
            return self._attention(x, dim, arg)
        if kind == "softmax":
            if np_:
                e = np.exp(x - x.max(-1, keepdims=True))
                return e / e.sum(-1, keepdims=True)
            return o.softmax(x, axis=-1)
        if kind == "layer_norm":
            scale, bias = self._operand(shape[-1:]), self._operand(shape[-1:], constant=True)
            if np_:
                mean = x.mean(-1, keepdims=True)
                var = ((x - mean) ** 2).mean(-1, keepdims=True)
                return (x - mean) / np.sqrt(var + 1e-5) * scale + bias
            return o.layer_norm(x, scale, bias, axis=-1)
        if kind == "conv2d":
            out_channels, padding, with_bias = dim, arg, step[3]
            w = self._operand((out_channels, shape[1], 3, 3), constant=True)
            b = self._operand((out_channels,)) if with_bias else None
            if np_:
                return _conv2d_np(x, w, b, padding)
            return o.conv2d(x, w, b, padding=padding)
        raise AssertionError(f"unknown step {kind}")


def _attention_step(self, x, keys: int, arg: int):
    """softmax(x @ k^T * c (+ mask)) @ v over the last axis: k and v graph inputs with
    `keys` rows, c a constant holding one value; arg 1 adds a mask (an input broadcast
    over the queries), arg 2 selects with a constant bool mask (fill -1e4)."""
    shape = tuple(x.shape)
    lead, d = shape[:-2], shape[-1]
    k = self._operand(lead + (keys, d))
    v = self._operand(lead + (keys, 1 + arg))
    c = self._operand((), constant=True)
    mask = self._operand(lead + (1, keys)) if arg == 1 else None
    select = self._operand((shape[-2], keys), constant=True) if arg == 2 else None
    if self.lib == "np":
        z = (x @ np.swapaxes(k, -1, -2)) * c
        if mask is not None:
            z = z + mask
        if select is not None:
            z = np.where(select > 0, z, -1e4)
        e = np.exp(z - z.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    import hidet_framework as hf

    o = self.ops
    perm = list(range(len(shape)))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    z = o.mul(o.matmul(x, o.transpose(k, perm)), c)
    if mask is not None:
        z = o.add(z, mask)
    if select is not None:
        z = o.where(o.greater(select, hf.constant(np.float32(0))), z, hf.constant(np.float32(-1e4)))
    return o.matmul(o.softmax(z, axis=-1), v)


_Builder._attention = _attention_step


def _conv2d_np(x, w, b, padding: int):
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    n, c, h, wd = xp.shape
    o, _, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def conv_fits(program: dict) -> bool:
    """A 3x3 convolution needs 3 pixels per side after padding."""
    steps = program["steps"]
    if steps and steps[0][0] == "conv2d":
        h, w = program["shape"][2:]
        return min(h, w) + 2 * steps[0][2] >= 3
    return True


def operand_shapes(program: dict, ops: Any) -> list[tuple]:
    """The shapes of every input and constant the program will ask for, in order (a dry
    run on numpy zeros, recording each request)."""
    shapes: list[tuple] = []
    builder = _Builder("np", ops, [])

    def record(shape, constant=False):
        shapes.append(tuple(shape))
        return np.zeros(shape)

    builder._operand = record
    run(builder, program, np.zeros(program["shape"]))
    return shapes


def run(builder: _Builder, program: dict, x) -> list:
    for step in program["steps"]:
        x = builder.step(x, step)
    return builder.outputs + ([] if any(x is y for y in builder.outputs) else [x])
