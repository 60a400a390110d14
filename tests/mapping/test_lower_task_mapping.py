"""The lowering of ``m.on(w)`` enumerates exactly ``m.worker2task(w)``, in order, and
the ``lower_task_mapping`` pass rewrites ForMappingStmt into the expected IR.

Each recording function stores the tasks it visits into ``out[count, :]`` and returns
``count``; the IR evaluator runs it with the worker as a parameter.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from hidet_framework.ir.equality import assert_structural_equal
from hidet_framework.analysis.evaluator import evaluate_function
from hidet_framework.ir.expr import const, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.functors import collect
from hidet_framework.mapping.task_mapping import repeat, spatial
from hidet_framework.ir.stmt import (
    AssignStmt, BufferStoreStmt, DeclareStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, seq,
)
from hidet_framework.ir.types import tensor_type
from hidet_framework.lowering.lower_task_mapping import LowerTaskMapping


@st.composite
def mappings(draw):
    rank = draw(st.integers(1, 3))
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
        ranks = draw(st.permutations(list(range(rank))))
        parts.append(draw(st.sampled_from([spatial, repeat]))(*shape, ranks=ranks))
    m = parts[0]
    for p in parts[1:]:
        m = m * p
    return m


class Recorder:
    """A function ``f(t, out) -> count`` whose body visits the tasks of worker
    ``worker_of(t)`` and records them; `lowered` chooses direct lowering or the raw
    ForMappingStmt (which the evaluator runs by ``worker2task``)."""

    def __init__(self, m, lowered: bool, worker_in_range: bool = False, worker_of=lambda t: t):
        self.m = m
        self.t = var("t")
        self.out = var("out", tensor_type("int32", [max(m.tasks_per_worker, 1), m.rank]))
        self.count = var("count")
        loop = m.on(worker_of(self.t))
        if lowered:
            body = loop.lower(self.record, worker_in_range)
        else:
            body = loop.build(self.record)
        self.fn = Function("record", (self.t, self.out), seq(
            DeclareStmt(self.count, const(0)), body, ReturnStmt(self.count)), ret_type="int32")

    def record(self, *task):
        stores = [BufferStoreStmt(self.out, (self.count, const(d)), x) for d, x in enumerate(task)]
        return seq(*stores, AssignStmt(self.count, self.count + 1))

    def run(self, fn, t: int) -> list:
        out = np.full((max(self.m.tasks_per_worker, 1), self.m.rank), -1, dtype=np.int32)
        n = evaluate_function(fn, t, out)
        return [tuple(int(x) for x in row) for row in out[:n]]


def sample_workers(m, data) -> list[int]:
    """Every worker of small mappings, a sample otherwise, plus some beyond the range."""
    n = m.num_workers
    inside = list(range(n)) if n <= 12 else sorted(set(data.draw(
        st.lists(st.integers(0, n - 1), min_size=4, max_size=8)) + [0, n - 1]))
    return inside + [n, n + 5]


@given(mappings(), st.data())
def test_lowered_mapping_enumerates_worker2task_in_order(m, data):
    rec = Recorder(m, lowered=True)
    for w in sample_workers(m, data):
        expected = m.worker2task(w) if w < m.num_workers else []
        assert rec.run(rec.fn, w) == expected, f"{m} worker {w}\n{rec.fn}"


@given(mappings(), st.data())
def test_lowering_with_a_compound_worker_expression(m, data):
    rec = Recorder(m, lowered=True, worker_of=lambda t: t - 3)
    for w in sample_workers(m, data):
        expected = m.worker2task(w) if w < m.num_workers else []
        assert rec.run(rec.fn, w + 3) == expected


@given(mappings(), st.data())
def test_workers_in_range_need_no_guard(m, data):
    rec = Recorder(m, lowered=True, worker_in_range=True)
    assert not collect(rec.fn, IfStmt)
    for w in sample_workers(m, data)[:-2]:
        assert rec.run(rec.fn, w) == m.worker2task(w)


@given(mappings(), st.data())
def test_pass_preserves_the_evaluated_result(m, data):
    rec = Recorder(m, lowered=False)
    lowered = LowerTaskMapping().run_on_function(rec.fn, None)
    assert not collect(lowered, ForMappingStmt)
    for w in sample_workers(m, data):
        assert rec.run(lowered, w) == rec.run(rec.fn, w)


def test_constant_workers_are_resolved_statically():
    m = repeat(2, 1) * spatial(2, 3)
    i, j = var("i"), var("j")
    body = seq()
    nothing = m.lower(const(7), (i, j), body)  # out of range: nothing runs
    assert isinstance(nothing, SeqStmt) and nothing.stmts == ()
    inside = m.lower(const(4), (i, j), body)
    assert not collect(inside, IfStmt) and collect(inside, ForStmt)


# ------------------------------------------------------- before / expected IR


def make_fn(body, *params):
    return Function("kernel", params, body)


def test_pass_on_repeat_spatial_gives_loops_and_index_arithmetic():
    w, out = var("w"), var("out", tensor_type("float32", [8, 8]))
    m = repeat(2, 1) * spatial(4, 8)
    before = make_fn(m.on(w).build(lambda i, j: BufferStoreStmt(out, (i, j), 1.0)), w, out)

    i, j, r = var("i"), var("j"), var("i_0")
    expected = make_fn(IfStmt(w < 32, ForStmt(r, 2, unroll=True, body=LetStmt(i, r * 4 + w // 8, LetStmt(
        j, w % 8, BufferStoreStmt(out, (i, j), 1.0))))), w, out)
    assert_structural_equal(LowerTaskMapping().run_on_function(before, None), expected)


def test_pass_follows_ranks_and_drops_unit_dims():
    w, out = var("w"), var("out", tensor_type("float32", [4, 6]))
    m = spatial(2, 3, ranks=[1, 0]) * repeat(2, 2, ranks=[1, 0])
    before = make_fn(m.on(w).build(lambda i, j: BufferStoreStmt(out, (i, j), 2.0)), w, out)

    i, j, ri, rj = var("i"), var("j"), var("i_1"), var("j_1")
    # spatial ranks [1, 0]: j is the most significant digit of w; repeat ranks [1, 0]:
    # the loop over j is outside the loop over i.
    expected = make_fn(IfStmt(w < 6, ForStmt(rj, 2, unroll=True, body=ForStmt(ri, 2, unroll=True, body=LetStmt(
        i, (w % 2) * 2 + ri, LetStmt(j, (w // 2) * 2 + rj, BufferStoreStmt(out, (i, j), 2.0)))))), w, out)
    assert_structural_equal(LowerTaskMapping().run_on_function(before, None), expected)


def test_pass_lowers_nested_mapping_loops():
    w, out = var("w"), var("out", tensor_type("int32", [4, 3]))
    outer, inner = spatial(4), repeat(3)
    before = make_fn(outer.on(w).build(
        lambda i: inner.on(0).build(lambda k: BufferStoreStmt(out, (i, k), i + k))), w, out)
    after = LowerTaskMapping(workers_in_range=True).run_on_function(before, None)

    i, k, r = var("i"), var("k"), var("k_0")
    expected = make_fn(LetStmt(i, w, ForStmt(r, 3, unroll=True, body=LetStmt(
        k, r, BufferStoreStmt(out, (i, k), i + k)))), w, out)
    assert_structural_equal(after, expected)

    for fn in (before, after):  # and both compute the same
        values = np.full((4, 3), -1, dtype=np.int32)
        for t in range(4):
            evaluate_function(fn, t, values)
        assert (values == np.add.outer(np.arange(4), np.arange(3))).all()


def test_pass_leaves_functions_without_mapping_loops_alone():
    w, out = var("w"), var("out", tensor_type("int32", [1]))
    fn = make_fn(BufferStoreStmt(out, (const(0),), w), w, out)
    p = LowerTaskMapping()
    assert p.name == "lower_task_mapping"
    assert p.run_on_function(fn, None) is fn
    mod = module("m", [fn])
    assert p.run(mod, None) is mod


def test_unroll_hint_of_repeat_loops_is_configurable():
    w = var("w")
    fn = make_fn(repeat(2, 3).on(w).build(lambda i, j: seq()), w)
    assert {f.unroll for f in collect(LowerTaskMapping().run_on_function(fn, None), ForStmt)} == {True}
    assert {f.unroll for f in collect(LowerTaskMapping(unroll=None).run_on_function(fn, None), ForStmt)} == {None}
