"""The float64 reference of ``ops.attention`` shared by the attention test files:
softmax(scale * q @ kt (+ mask, or where(mask, ., -inf))) @ v, NaN probabilities made 0
under ``zero_nan`` (a fully masked row)."""
from __future__ import annotations

import numpy as np


def reference(arrays, mask, kind, scale, zero_nan):
    q, kt, v = (a.astype(np.float64) for a in arrays[:3])
    s = scale * (q @ kt)
    if kind == "add":
        s = s + mask
    elif kind == "select":
        s = np.where(mask, s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return (np.where(np.isnan(p), 0.0, p) if zero_nan else p) @ v
