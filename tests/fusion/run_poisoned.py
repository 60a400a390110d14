"""Running a compiled graph for the horizontal-fusion tests: on the cpu into outputs
poisoned with NaN first (``out=``), so an element a kernel never writes shows up."""
from __future__ import annotations

import numpy as np


def run_poisoned(fn, graph_outputs, arrays, target):
    """`fn`'s outputs on `arrays` as a list (the cpu's written into NaN-filled arrays)."""
    if target != "cpu":
        got = fn(*arrays)
        return [got] if len(graph_outputs) == 1 else list(got)
    outs = [np.full(t.shape, np.nan, t.dtype.numpy_name) for t in graph_outputs]  # poisoned
    fn(*arrays, out=outs[0] if len(outs) == 1 else outs)
    return outs
