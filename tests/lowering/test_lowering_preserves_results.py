"""Each lowering pass keeps the evaluated result of random small programs: loops
(some marked for unrolling), tensor slices, local tensors, guarded loads and index
arithmetic over 2-D tensors. An instrument evaluates the module after every pass."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from hidet_framework.ir import (
    BufferStoreStmt, DeclareStmt, ForStmt, Function, Scope, const, if_then_else, module, seq,
    tensor_type, var,
)
from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.lowering.instruments import VerifyAfter
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.lowering.pipeline import lower, lowering_pipeline


class EvaluateAfterEach:
    """Test instrument: runs the function after every pass and records the output."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.results: list[tuple[str, np.ndarray]] = []

    def run(self, mod):
        out = np.full(self.inputs[1].shape, -1.0, dtype="float32")
        evaluate_function(mod.functions["f"], self.inputs[0].copy(), out)
        return out

    def enter_pipeline(self, mod, ctx):
        self.results.append(("<input>", self.run(mod)))

    def after_pass(self, pass_, mod, ctx):
        self.results.append((pass_.name, self.run(mod)))


INDEX_FORMS = [
    lambda i, j, n: (i, j),
    lambda i, j, n: ((i * n + j) // n, (i * n + j) % n),
    lambda i, j, n: ((i + 1) - 1, j * 1 + 0),
]
unrolls = st.sampled_from([None, True, 2, 3])


@st.composite
def programs(draw):
    rows, cols = draw(st.integers(2, 5)), draw(st.integers(2, 5))
    r0, c0 = draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))
    er, ec = draw(st.integers(1, rows - r0)), draw(st.integers(1, cols - c0))
    a = var("a", tensor_type("float32", [rows, cols]))
    out = var("out", tensor_type("float32", [rows, cols]))
    t = var("t", tensor_type("float32", [er, ec]))
    i, j, i2, j2 = var("i"), var("j"), var("i"), var("j")
    src, dst = a[r0:r0 + er, c0:], out[r0:, c0:c0 + ec]
    form = draw(st.sampled_from(INDEX_FORMS))
    ti, tj = form(i, j, ec)
    load = src[ti, tj]
    if draw(st.booleans()):  # a predicated load of the next row
        load = load + if_then_else(i + 1 < er, src[i + 1, j], const(0.0))
    body = seq(
        DeclareStmt(t, scope=Scope.REGISTER),
        ForStmt(i, er, ForStmt(j, ec, BufferStoreStmt(t, (i, j), load * 2.0), unroll=draw(unrolls)),
                unroll=draw(unrolls)),
        ForStmt(i2, er, ForStmt(j2, ec, BufferStoreStmt(dst, (i2, j2), t[i2, j2] + 1.0), unroll=draw(unrolls))),
    )
    fn = Function("f", (a, out), body)
    return module("m", [fn]), (rows, cols)


@given(programs(), st.booleans(), st.integers(0, 2**31 - 1))
def test_every_pass_preserves_the_result(program, bounds_check, seed):
    mod, shape = program
    rng = np.random.default_rng(seed)
    inputs = (rng.standard_normal(shape).astype("float32"), np.zeros(shape, "float32"))
    evaluator = EvaluateAfterEach(inputs)
    with PassContext(config={"bounds_check": bounds_check}, instruments=[VerifyAfter(), evaluator]):
        lower(mod, "cpu")
    names = [name for name, _ in evaluator.results]
    assert names[1:] == [p.name for p in lowering_pipeline("cpu")]
    reference = evaluator.results[0][1]
    for name, result in evaluator.results[1:]:
        np.testing.assert_array_equal(result, reference, err_msg=f"after {name}")


def test_lowered_accesses_are_flat_and_asserts_are_proven_away():
    from hidet_framework.ir import TensorElement, AssertStmt, collect

    a = var("a", tensor_type("float32", [4, 6]))
    i, j = var("i"), var("j")
    body = ForStmt(i, 4, ForStmt(j, 3, BufferStoreStmt(a, (i, j + 3), a[i, j] + 1.0)))
    with PassContext(config={"bounds_check": True}):
        lowered = lower(module("m", [Function("f", (a,), body)]), "cpu")
    fn = lowered.functions["f"]
    assert all(len(e.indices) == 1 for e in collect(fn, TensorElement))
    assert collect(fn, AssertStmt) == []


def test_bounds_check_catches_an_out_of_range_index_at_run_time():
    import pytest
    from hidet_framework.analysis.evaluator import EvaluationError

    a, out = var("a", tensor_type("float32", [4])), var("out", tensor_type("float32", [8]))
    i = var("i")
    body = ForStmt(i, 4, BufferStoreStmt(a, (i * 2,), 1.0))  # i*2 reaches 6 on a tensor of 4
    with PassContext(config={"bounds_check": True}):
        lowered = lower(module("m", [Function("f", (a, out), body)]), "cpu")
    with pytest.raises(EvaluationError, match="a: index 0"):
        evaluate_function(lowered.functions["f"], np.zeros(8, "float32"), np.zeros(8, "float32"))
