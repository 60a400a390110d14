"""Laws of layouts (docs/design.md, Task mappings and layouts), as hypothesis properties.

Layouts are drawn from a small grammar (dense with any dimension order, swizzle,
composition, concatenation) with extents <= 4 so bijections can be checked on every
index.
"""
from __future__ import annotations

import itertools

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hidet_framework.ir.equality import assert_structural_equal
from hidet_framework.analysis.evaluator import evaluate_expr, evaluate_function
from hidet_framework.ir.expr import var
from hidet_framework.ir.func import Function
from hidet_framework.mapping.layout import (
    ComposedLayout, ConcatLayout, Layout, column_major, dense, layout_of, local, mapping_register_layout,
    row_major, swizzle,
)
from hidet_framework.mapping.task_mapping import repeat, spatial
from hidet_framework.ir.stmt import BufferStoreStmt, ForStmt, seq
from hidet_framework.ir.types import TensorType, tensor_type

small_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@st.composite
def dense_layouts(draw, rank: int):
    shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    return dense(*shape, ranks=draw(st.permutations(list(range(rank)))))


@st.composite
def swizzle_layouts(draw):
    vector = draw(st.sampled_from([1, 2]))
    period = draw(st.sampled_from([1, 2, 4]))
    cols = vector * period * draw(st.integers(1, 2))
    base = draw(st.sampled_from([row_major, column_major]))(draw(st.integers(1, 5)), cols)
    return swizzle(base, vector=vector, period=period, row_step=draw(st.integers(1, 2)))


@st.composite
def bijective_layouts(draw, rank: int, depth: int = 2):
    """Layouts whose offsets are a bijection onto [0, size)."""
    choices = ["dense"] + (["swizzle"] if rank == 2 else [])
    if depth > 0:
        choices += ["compose"] + (["concat"] if rank >= 2 else [])
    kind = draw(st.sampled_from(choices))
    if kind == "dense":
        return draw(dense_layouts(rank))
    if kind == "swizzle":
        return draw(swizzle_layouts())
    if kind == "compose":
        return draw(bijective_layouts(rank, 0)) * draw(bijective_layouts(rank, depth - 1))
    split = draw(st.integers(1, rank - 1))
    return draw(bijective_layouts(split, depth - 1)) + draw(bijective_layouts(rank - split, 0))


@st.composite
def any_layouts(draw, rank: int):
    """Bijective layouts, possibly composed with a local part (as register tiles are)."""
    layout = draw(bijective_layouts(rank, 1))
    if draw(st.booleans()):
        loc = local(*draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
        layout = loc * layout if draw(st.booleans()) else layout * loc
    return layout


@st.composite
def factor_layouts(draw, rank: int):
    """Small single layouts (dense, local, swizzle) to compose: products stay small."""
    shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    kind = draw(st.sampled_from(["dense", "local", "swizzle"] if rank == 2 else ["dense", "local"]))
    if kind == "dense":
        return dense(*shape, ranks=draw(st.permutations(list(range(rank)))))
    if kind == "local":
        return local(*shape)
    return swizzle(row_major(shape[0], 4), vector=draw(st.sampled_from([1, 2])), period=2)


def all_indices(layout: Layout) -> list:
    return list(itertools.product(*(range(s) for s in layout.shape)))


def offsets(layout: Layout) -> list:
    return [layout.offset(*idx) for idx in all_indices(layout)]


# ------------------------------------------------------------------ examples


def test_row_and_column_major_match_numpy():
    shape = (3, 4, 5)
    for idx in itertools.product(*(range(s) for s in shape)):
        assert row_major(*shape).offset(*idx) == np.ravel_multi_index(idx, shape)
        assert column_major(*shape).offset(*idx) == np.ravel_multi_index(idx, shape, order="F")


def test_str_equality_hash_immutability():
    a = row_major(4, 1) * local(16, 8)
    assert str(a) == "row_major(4, 1) * local(16, 8)"
    assert a == row_major(4, 1) * local(16, 8) and hash(a) == hash(row_major(4, 1) * local(16, 8))
    assert row_major(2, 3) != column_major(2, 3)
    assert dense(2, 3, ranks=[1, 0]) == column_major(2, 3)
    assert str([2] + row_major(4, 8)) == "(row_major(2) + row_major(4, 8))"
    assert (row_major(2) * row_major(3)) * row_major(4) == row_major(2) * (row_major(3) * row_major(4))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.parts = ()


def test_errors():
    with pytest.raises(ValueError, match="one rank"):
        row_major(2, 2) * row_major(2)
    with pytest.raises(ValueError, match="period"):
        swizzle(row_major(8, 8), period=3)
    with pytest.raises(ValueError, match="vector"):
        swizzle(row_major(8, 6), vector=4)
    with pytest.raises(IndexError):
        row_major(2, 2).offset(2, 0)
    m = var("m")
    with pytest.raises(TypeError, match="symbolic"):
        row_major(4, m).offset(1, 1)


def test_tensor_type_default_layout_is_row_major():
    m, k = var("m"), var("k")
    t = tensor_type("float32", [m, k])
    assert layout_of(t) == row_major(m, k)
    assert evaluate_expr(layout_of(t).size, {m: 5, k: 7}) == 35


def test_symbolic_layouts_compare_structurally_across_variables():
    def make():
        m, k = var("m"), var("k")
        a = var("a", TensorType("float32", (m, k), [2] + row_major(m, k)))
        return Function("f", (m, k, a), seq())

    assert_structural_equal(make(), make())


def test_swizzle_spreads_a_column_over_all_blocks():
    """32 x 64 halves in 16-byte vectors: a column of 8 consecutive rows lands in 8
    different 16-byte blocks (different banks)."""
    layout = swizzle(row_major(32, 64), vector=8)
    assert layout.period == 8
    for j in range(64):
        blocks = {layout.offset(i, j) % 64 // 8 for i in range(8)}
        assert len(blocks) == 8


# ---------------------------------------------------------------------- laws


@given(st.integers(1, 3).flatmap(lambda r: bijective_layouts(r)))
def test_bijective_layouts_are_bijections_onto_their_size(layout):
    assert sorted(offsets(layout)) == list(range(layout.size))


@given(st.integers(1, 2).flatmap(lambda r: st.tuples(*[factor_layouts(r)] * 3)))
def test_composition_is_associative_and_multiplies(abc):
    a, b, c = abc
    left, right = ComposedLayout(((a * b), c)), ComposedLayout((a, (b * c)))  # nested, not flattened
    assert left.shape == right.shape == tuple(x * y * z for x, y, z in zip(a.shape, b.shape, c.shape))
    assert left.size == right.size == a.size * b.size * c.size
    assert offsets(left) == offsets(right) == offsets(a * b * c)


@given(st.integers(1, 2).flatmap(lambda r: st.tuples(any_layouts(r), factor_layouts(r))))
def test_composition_formula(ab):
    a, b = ab
    m = a * b
    for idx in all_indices(m):
        outer = [i // s for i, s in zip(idx, b.shape)]
        inner = [i % s for i, s in zip(idx, b.shape)]
        assert m.offset(*idx) == a.offset(*outer) * b.size + b.offset(*inner)


@given(st.integers(1, 2).flatmap(lambda r: any_layouts(r)), st.integers(1, 3))
def test_concatenation_adds_a_leading_or_trailing_dimension(layout, n):
    lead, trail = [n] + layout, layout + [n]
    assert lead.shape == (n,) + layout.shape and trail.shape == layout.shape + (n,)
    assert lead.size == trail.size == n * layout.size
    for idx in all_indices(layout):
        for b in range(n):
            assert lead.offset(b, *idx) == b * layout.size + layout.offset(*idx)
            assert trail.offset(*idx, b) == layout.offset(*idx) * n + b


@given(st.tuples(*[bijective_layouts(1, 0)] * 3))
def test_concatenation_is_associative(abc):
    a, b, c = abc
    left, right = ConcatLayout((a + b, c)), ConcatLayout((a, b + c))
    assert offsets(left) == offsets(right) == offsets(a + b + c)


@given(small_shapes)
def test_local_layout_holds_one_element(shape):
    layout = local(*shape)
    assert layout.size == 1 and set(offsets(layout)) == {0}


@given(swizzle_layouts())
def test_swizzle_keeps_vectors_contiguous_and_rows_in_place(layout):
    rows, cols = layout.shape
    base = layout.base
    for i in range(rows):
        row = [layout.offset(i, j) for j in range(cols)]
        assert sorted(row) == sorted(base.offset(i, j) for j in range(cols))  # a row permutation
        if base == row_major(rows, cols):
            for j in range(cols):
                assert row[j] - row[j - j % layout.vector] == j % layout.vector


@st.composite
def small_mappings(draw):
    rank = draw(st.integers(1, 2))
    m = None
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
        atom = draw(st.sampled_from([spatial, repeat]))(*shape, ranks=draw(st.permutations(list(range(rank)))))
        m = atom if m is None else m * atom
    return m


@given(small_mappings())
def test_mirror_layout_indexes_each_workers_tasks_in_order(m):
    layout = mapping_register_layout(m)
    assert layout == m.register_layout()
    assert layout.shape == m.task_shape and layout.size == m.tasks_per_worker
    for w in range(m.num_workers):
        assert [layout.offset(*t) for t in m.worker2task(w)] == list(range(layout.size))


def test_mirror_layout_of_the_design_example():
    m = repeat(4, 1) * spatial(16, 8)
    assert mapping_register_layout(m) == row_major(4, 1) * local(16, 8)


@given(st.integers(1, 3).flatmap(lambda r: any_layouts(r)), st.data())
def test_lowered_offset_evaluates_to_the_concrete_offset(layout, data):
    index_vars = [var(f"i{d}") for d in range(layout.rank)]
    expr = layout(*index_vars)
    for idx in data.draw(st.lists(st.sampled_from(all_indices(layout)), min_size=1, max_size=5)):
        assert evaluate_expr(expr, dict(zip(index_vars, idx))) == layout.offset(*idx)


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3))
def test_symbolic_shapes_evaluate_like_concrete_ones(m_val, k_val, n):
    m, k, i, j, b = var("m"), var("k"), var("i"), var("j"), var("b")
    sym, con = [n] + column_major(m, k), [n] + column_major(m_val, k_val)
    env = {m: m_val, k: k_val}
    assert evaluate_expr(sym.size, env) == con.size
    expr = sym(b, i, j)
    for idx in itertools.product(range(n), range(m_val), range(k_val)):
        assert evaluate_expr(expr, {**env, b: idx[0], i: idx[1], j: idx[2]}) == con.offset(*idx)


@given(swizzle_layouts())
def test_evaluator_stores_through_the_tensor_layout(layout):
    rows, cols = layout.shape
    a = var("a", tensor_type("int32", [rows, cols], layout))
    i, j = var("i"), var("j")
    fn = Function("fill", (a,), ForStmt(i, rows, ForStmt(j, cols, BufferStoreStmt(a, (i, j), i * cols + j))))
    flat = np.full(layout.size, -1, dtype=np.int32)
    evaluate_function(fn, flat)
    for idx in all_indices(layout):
        assert flat[layout.offset(*idx)] == idx[0] * cols + idx[1]
