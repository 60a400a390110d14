"""The attention pattern, recognised into one ``attention`` operator (attention.py).

Matched from the output product backwards, as the ONNX frontend imports BERT and GPT-2
(PyTorch's exported ``scaled_dot_product_attention``) and as a hand-written graph has it:

    matmul(P, v)                      the output product (canonical 2-D/3-D matmul)
    P = [reshape]* [where(isnan(p), 0, p)] [reshape]* p
    p = softmax(z) over the last axis
    z = [reshape]*, then in either order, each at most once and with reshapes between:
        a scale:  z * c, c * z or z / c  (c a constant holding one value)
        a mask:   z + m or m + z (m float), or where(m, z, f) / where(m, f, z) (m bool,
                  f a constant holding one value)
        down to   matmul(q, kt)       the scores (canonical matmul)

Every reshape on the way must keep the last two axes (the ``[M, N]`` of the scores):
they only regroup batch axes (``[B*H, M, N]`` <-> ``[B, H, M, N]``), which the mask's
shape is given in. The mask may not widen the scores (no broadcast of the scores to
a bigger shape), and a scale after the mask scales the mask too (for an additive mask
the rule multiplies it, for a select mask the fill). The scalar scale that PyTorch's
export puts on q and on k (``d**-0.25`` each) is left where it is: it is injective and
fusion grafts it onto the attention kernel's loads with the reshapes and transposes
that lead to q, kt and v.

The replacement is ``attention(q', kt', v', mask)`` on the scores' batch axes (the
operands reshaped there, a reshape fusion grafts too), reshaped back to the output
product's shape. Intermediates read elsewhere (the probabilities returned by the
graph, say) stay computed for those readers: the result is right either way.
"""
from __future__ import annotations

import math

import numpy as np

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor, constant

from . import attention as attention_op
from . import binary, shape_layout


def _producer(t: Tensor, name: str) -> Operator | None:
    op = t.producer
    return op if op is not None and op.name == name else None


def _through_reshapes(t: Tensor) -> Tensor:
    """`t` with every reshape that keeps its last two axes peeled off."""
    while True:
        op = _producer(t, "reshape")
        if op is None or op.inputs[0].rank < 2 or tuple(op.inputs[0].shape[-2:]) != tuple(t.shape[-2:]):
            return t
        t = op.inputs[0]


def _one_value(t: Tensor) -> float | None:
    """The value of a float constant that holds exactly one element."""
    if not t.is_constant() or t.size != 1 or t.storage.dtype.kind != "f":
        return None
    return float(np.asarray(t.storage, dtype=np.float64).reshape(()))


def _without_nan_guard(t: Tensor) -> tuple[Tensor, bool]:
    """``where(isnan(p), 0, p)`` -> (p, True); anything else -> (t, False)."""
    op = _producer(t, "where")
    if op is None or len(op.inputs) != 3:
        return t, False
    cond, zero, p = op.inputs
    guard = _producer(cond, "isnan")
    if guard is None or guard.inputs[0] is not p or _one_value(zero) != 0.0 or tuple(p.shape) != tuple(t.shape):
        return t, False
    return p, True


def _scale_of(op: Operator) -> tuple[Tensor, float] | None:
    """(the scaled tensor, the factor) of ``z * c``, ``c * z`` or ``z / c``."""
    if op.name not in ("mul", "div") or len(op.inputs) != 2:
        return None
    for k in ((0, 1) if op.name == "mul" else (0,)):
        c = _one_value(op.inputs[1 - k])
        z = op.inputs[k]
        if c is not None and tuple(z.shape) == tuple(op.outputs[0].shape):
            if op.name == "div":
                return (z, 1.0 / c) if c != 0.0 else None
            return z, c
    return None


def _masks_of(op: Operator) -> list[tuple[Tensor, Tensor, str, float, bool]]:
    """Every reading of `op` as a mask on scores: (scores, mask, kind, fill, inverted)."""
    out = tuple(op.outputs[0].shape)
    found = []
    if op.name == "add" and len(op.inputs) == 2:
        for k in (0, 1):
            z, m = op.inputs[k], op.inputs[1 - k]
            if tuple(z.shape) == out and m.dtype.is_float() and m.rank <= len(out):
                found.append((z, m, "add", 0.0, False))
    if op.name == "where" and len(op.inputs) == 3 and op.inputs[0].dtype.name == "bool" and op.inputs[0].rank <= len(out):
        m, a, b = op.inputs
        for z, f, inverted in ((a, b, False), (b, a, True)):
            fill = _one_value(f)
            if fill is not None and tuple(z.shape) == out and z.dtype is op.outputs[0].dtype:
                found.append((z, m, "select", fill, inverted))
    return found


def _parse_scores(z: Tensor, found: dict) -> dict | None:
    """Walk from the softmax's input down to the scores' matmul: `found` gathers the
    scale (``scale``; ``mask_scale``, the scale again when it is applied after the
    mask, which it then multiplies) and the mask (``mask``, ``kind``, ``fill``, ``inverted``, ``view``: the shape
    it applies on). Every reading of an operator is tried (``z + z2`` may be a mask on
    either side)."""
    z = _through_reshapes(z)
    op = z.producer
    if op is None:
        return None
    if op.name == "matmul":
        return {**found, "scores": op}
    if found["scale"] == 1.0:
        scaled = _scale_of(op)
        if scaled is not None:
            # walking down, a scale met before the mask is applied after it: (z + m) * c
            above_mask = found["mask"] is None
            got = _parse_scores(scaled[0], {**found, "scale": scaled[1], "mask_scale": scaled[1] if above_mask else 1.0})
            if got is not None:
                return got
    if found["mask"] is None:
        for scores, mask, kind, fill, inverted in _masks_of(op):
            got = _parse_scores(scores, {**found, "mask": mask, "kind": kind, "fill": fill, "inverted": inverted,
                                         "view": tuple(op.outputs[0].shape)})
            if got is not None:
                return got
    return None


def _on_batch(t: Tensor, batch: tuple, matrix: tuple) -> Tensor | None:
    """A canonical matmul operand (2-D, or 3-D with batch 1 or prod(batch)) viewed
    with the scores' batch axes."""
    if tuple(t.shape[-2:]) != matrix:
        return None
    lead = int(np.prod(t.shape[:-2], dtype=np.int64)) if t.rank > 2 else 1
    if lead == math.prod(batch):
        shape = (*batch, *matrix)
    elif lead == 1:
        shape = (*([1] * len(batch)), *matrix)
    else:
        return None
    return t if tuple(t.shape) == shape else shape_layout.reshape(t, list(shape))


def fuse_attention(op: Operator) -> list[Tensor] | None:
    """``matmul(softmax(scale * q @ kt + mask), v)`` -> ``attention`` (module docstring)."""
    if op.name != "matmul" or len(op.inputs) != 2:
        return None
    probabilities, v = op.inputs
    p, zero_nan = _without_nan_guard(_through_reshapes(probabilities))
    softmax = _producer(_through_reshapes(p), "softmax")
    if softmax is None or tuple(softmax.attributes.get("axes", ())) != (softmax.inputs[0].rank - 1,):
        return None
    z = softmax.inputs[0]
    if not z.dtype.is_float() or z.dtype is not v.dtype or z.rank < 2:
        return None
    found = _parse_scores(z, {"scale": 1.0, "mask_scale": 1.0, "mask": None, "kind": "none",
                              "fill": float("-inf"), "inverted": False, "view": tuple(z.shape)})
    if found is None:
        return None
    q, kt = found["scores"].inputs
    view = found["view"]
    batch, (m, n) = view[:-2], view[-2:]
    if q.dtype is not z.dtype or kt.dtype is not z.dtype or probabilities.shape[-2:] != (m, n):
        return None
    d, dv = q.shape[-1], v.shape[-1]
    operands = [_on_batch(q, batch, (m, d)), _on_batch(kt, batch, (d, n)), _on_batch(v, batch, (n, dv))]
    pb = probabilities.shape[:-2]
    if any(x is None for x in operands) or int(np.prod(pb, dtype=np.int64)) != math.prod(batch):
        return None
    mask, fill = found["mask"], found["fill"]
    if found["kind"] == "add" and mask.is_constant() and not np.any(np.asarray(mask.storage)):
        mask, found["kind"] = None, "none"  # an all-zero additive mask (BERT without attention_mask)
    if mask is not None and found["inverted"]:
        mask = binary.logical_not(mask)
    if found["mask_scale"] != 1.0:  # (scores + m) * c = c * scores + c * m
        if found["kind"] == "add":
            if mask.dtype.name == "bfloat16":
                return None
            mask = binary.mul(mask, constant(np.asarray(found["mask_scale"], mask.dtype.numpy_name)))
        else:
            fill *= found["mask_scale"]
    y = attention_op.attention(*operands, mask, scale=found["scale"], mask_kind=found["kind"], fill=fill,
                               zero_nan=zero_nan)
    out = op.outputs[0]
    if y.size != out.size or y.dtype is not out.dtype:
        return None
    return [y if tuple(y.shape) == tuple(out.shape) else shape_layout.reshape(y, list(out.shape))]


RULES: tuple[RewriteRule, ...] = (
    RewriteRule("fuse_attention", ("matmul",), fuse_attention,
                description="matmul(softmax(scale * q @ kt + mask), v) as one attention operator"),
)
