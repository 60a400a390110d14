"""The compiled graph on the evaluator target (no compiler needed): memory planning
over real graphs, input checking, outputs that survive later calls."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hidet_framework as hf
from hidet_framework.runtime.compiled_graph import GraphInputError

EVALUATOR = "evaluator"


def test_chain_peak_is_below_the_sum_of_intermediates(dummy, rng):
    x = hf.symbol((16, 16), "float32", name="x")
    y = x
    for k in range(8):
        y = dummy.scale(y, 1.0 + k / 8)
    out = dummy.rowsum(y)
    # fusion=False: this plans the 9 operators' own buffers (fused, the chain is one kernel)
    fn = hf.compile(hf.trace(out, inputs=[x]), target=EVALUATOR, fusion=False)
    report = fn.memory_report()
    assert fn.plan.overlapping_pairs() == []
    assert report.intermediate_bytes == 8 * 16 * 16 * 4 + 16 * 4
    assert report.peak_bytes < report.intermediate_bytes
    assert report.peak_bytes == 2 * 1024  # two live 1 KiB tensors at any step; the input's slot is reused
    print(f"chain of 9 ops: {report}")
    xv = rng.standard_normal((16, 16)).astype(np.float32)
    expected = (xv.astype(np.float64) * np.prod([1.0 + k / 8 for k in range(8)])).sum(1)
    # float32 sums of 16 terms of size ~5: an absolute tolerance too (a row summing near 0 is common)
    np.testing.assert_allclose(fn(xv), expected, rtol=1e-5, atol=1e-4)


def test_task_workspaces_are_planned(dummy, rng):
    x = hf.symbol((3, 5), "float32")
    # fusion=False: one kernel per operator (fused, `scale` is grafted into both of center's launches)
    fn = hf.compile(hf.trace(dummy.center(dummy.scale(x)), inputs=[x]), target=EVALUATOR, fusion=False)
    report = fn.memory_report()
    assert report.workspace_bytes == 3 * 4  # the row maxima of `center`
    assert fn.num_launches == 3
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    y = xv * 2
    np.testing.assert_allclose(fn(xv), y - y.max(1, keepdims=True), rtol=1e-6)


def test_outputs_do_not_alias_the_arena(dummy, rng):
    x = hf.symbol((4,), "float32")
    fn = hf.compile(hf.trace(dummy.scale(x, 3.0), inputs=[x]), target=EVALUATOR)
    a, b = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    first = fn(a)
    second = fn(b)
    np.testing.assert_allclose(first, a * 3, rtol=1e-6)
    np.testing.assert_allclose(second, b * 3, rtol=1e-6)


def test_outputs_that_are_inputs_or_constants(dummy, rng):
    x, z = hf.symbol((2,), "float32"), hf.symbol((2,), "float32")
    w = hf.constant(np.array([1.5, -2.0], np.float32))
    fn = hf.compile(hf.trace([x, w, dummy.add(z, w), z], inputs=[x, z]), target=EVALUATOR)
    xv, zv = rng.standard_normal(2).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    ox, ow, osum, oz = fn(xv, zv)
    np.testing.assert_array_equal(ox, xv)
    np.testing.assert_array_equal(ow, [1.5, -2.0])
    np.testing.assert_allclose(osum, zv + ow, rtol=1e-6)
    np.testing.assert_array_equal(oz, zv)
    ox[0] = 100.0
    assert xv[0] != 100.0  # outputs are copies


def test_input_checking_says_which_input_and_what_was_expected(dummy):
    x, z = hf.symbol((2, 3), "float32", name="x"), hf.symbol((3,), "float64", name="z")
    fn = hf.compile(hf.trace([dummy.scale(x), dummy.scale(z)], inputs=[x, z]), target=EVALUATOR)
    good_x, good_z = np.ones((2, 3), np.float32), np.ones(3)
    with pytest.raises(GraphInputError, match=r"takes 2 inputs \(x: float32\[2, 3\], z: float64\[3\]\), got 1"):
        fn(good_x)
    with pytest.raises(GraphInputError, match=r"input 0 \('x'\): expected float32\[2, 3\], got float64\[2, 3\]"):
        fn(np.ones((2, 3)), good_z)
    with pytest.raises(GraphInputError, match=r"input 1 \('z'\): expected float64\[3\], got float64\[1, 3\]"):
        fn(good_x, np.ones((1, 3)))
    # lists take the graph's dtype
    np.testing.assert_allclose(fn(good_x, [1.0, 2.0, 3.0])[1], [2.0, 4.0, 6.0])


# ------------------------------------------------------------- random DAGs

@st.composite
def random_dags(draw):
    """Graphs of `mix` operators (1-D tensors of many lengths) over 1-2 inputs, with a
    float64 numpy reference computed alongside."""
    from hidet_framework.graph.tensor import Tensor  # noqa: F401 - for readers: pool holds Tensors

    n_inputs = draw(st.integers(1, 2))
    lengths = [draw(st.integers(1, 12)) for _ in range(n_inputs)]
    inputs = [hf.symbol((n,), "float32", name=f"in{k}") for k, n in enumerate(lengths)]
    values = [np.random.default_rng(k + 7).standard_normal(n).astype(np.float32) for k, n in enumerate(lengths)]
    pool = list(zip(inputs, [v.astype(np.float64) for v in values]))
    n_ops = draw(st.integers(1, 10))
    for _ in range(n_ops):
        (a, va), (b, vb) = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
        n = draw(st.integers(1, 24))
        i = np.arange(n)
        pool.append((_mix(a, b, n), va[i % va.size] + vb[i % vb.size] * 0.5))
    produced = pool[n_inputs:]
    extra = draw(st.lists(st.sampled_from(produced), max_size=2))
    outputs = [produced[-1], *extra]
    return inputs, values, [t for t, _ in outputs], [v for _, v in outputs]


def _mix(a, b, n):
    from hidet_framework.compute import Task, compute, tensor_input
    from hidet_framework.graph import Operator

    x, z = tensor_input("a", "float32", a.shape), tensor_input("b", "float32", b.shape)
    y = compute("y", [n], lambda i: x[i % a.shape[0]] + z[i % b.shape[0]] * 0.5)
    return Operator("mix", [a, b], Task("mix", [x, z], [y], attributes={"n": n}), {"n": n}).outputs[0]


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dags_plan_without_overlap_and_compute_right(dag):
    inputs, values, outputs, expected = dag
    fn = hf.compile(hf.trace(outputs, inputs=inputs), target=EVALUATOR)
    assert fn.plan.overlapping_pairs() == []
    report = fn.memory_report()
    assert report.peak_bytes <= sum(-(-b.nbytes // 256) * 256 for b in fn.plan.buffers)
    results = fn(*values)
    results = results if isinstance(results, tuple) else (results,)
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
