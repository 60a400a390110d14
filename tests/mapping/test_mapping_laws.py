"""Laws of task mappings (docs/design.md, Task mappings and layouts), as hypothesis properties.

Sizes stay small (extents <= 3, three factors at most) so every property can look at
every worker and every task.
"""
from __future__ import annotations

import collections
import itertools

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hidet_framework.ir.expr import var
from hidet_framework.mapping.task_mapping import (
    ComposedTaskMapping, MappingLoop, RepeatTaskMapping, SpatialTaskMapping, auto_map, repeat, spatial,
)

ranks_of_dims = st.integers(1, 3)


@st.composite
def atoms(draw, rank: int, max_extent: int = 3):
    shape = draw(st.lists(st.integers(1, max_extent), min_size=rank, max_size=rank))
    ranks = draw(st.permutations(list(range(rank))))
    kind = draw(st.sampled_from([spatial, repeat]))
    return kind(*shape, ranks=ranks)


@st.composite
def mappings(draw, rank: int | None = None, max_atoms: int = 3):
    rank = rank if rank is not None else draw(ranks_of_dims)
    parts = draw(st.lists(atoms(rank), min_size=1, max_size=max_atoms))
    m = parts[0]
    for p in parts[1:]:
        m = m * p
    return m


@st.composite
def mapping_triples(draw):
    rank = draw(ranks_of_dims)
    return tuple(draw(mappings(rank, max_atoms=1)) for _ in range(3))


def worker_function(m) -> list:
    return [m.worker2task(w) for w in range(m.num_workers)]


def all_tasks(shape) -> list:
    return list(itertools.product(*(range(s) for s in shape)))


# ------------------------------------------------------------------ examples


def test_design_example():
    m = repeat(4, 1) * spatial(16, 8)
    assert m.num_workers == 128
    assert m.task_shape == (64, 8)
    assert m.worker2task(5) == [(0, 5), (16, 5), (32, 5), (48, 5)]
    assert str(m) == "repeat(4, 1).spatial(16, 8)"
    assert m == repeat(4, 1).spatial(16, 8)


def test_str_shows_ranks_only_when_not_row_major():
    assert str(spatial(2, 3)) == "spatial(2, 3)"
    assert str(repeat(2, 3, ranks=[1, 0])) == "repeat(2, 3, ranks=[1, 0])"


def test_value_equality_hash_and_immutability():
    a = spatial(4, 2) * repeat(2, 2)
    b = spatial(4, 2).repeat(2, 2)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert spatial(2) != repeat(2)
    assert spatial(2, 3) != spatial(2, 3, ranks=[1, 0])
    assert spatial(2, 3) == spatial(2, 3, ranks=[0, 1])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.parts = ()


def test_errors():
    with pytest.raises(ValueError, match="rank"):
        spatial(2, 2) * repeat(2)
    with pytest.raises(ValueError, match="permutation"):
        spatial(2, 2, ranks=[0, 0])
    with pytest.raises(ValueError, match="positive"):
        repeat(0, 2)
    with pytest.raises(IndexError, match="out of range"):
        spatial(4).worker2task(4)
    with pytest.raises(ValueError, match="cannot be spread"):
        auto_map(4, 4, workers=6)


def test_mapping_loop_is_iterable_only_for_a_constant_worker():
    assert list(spatial(4, 2).on(3)) == [(1, 1)]
    loop = spatial(4, 2).on(var("w"))
    assert isinstance(loop, MappingLoop) and loop.mapping == spatial(4, 2)
    with pytest.raises(TypeError, match="symbolic"):
        list(loop)


def test_auto_map_design_example():
    assert auto_map(64, 8, workers=128) == repeat(4, 1) * spatial(16, 8)
    assert auto_map(8, 8, workers=64) == spatial(8, 8)
    assert auto_map(4, 4, workers=1) == repeat(4, 4)


# ---------------------------------------------------------------------- laws


@given(mapping_triples())
def test_composition_is_associative(abc):
    a, b, c = abc
    left, right = (a * b) * c, a * (b * c)
    assert worker_function(left) == worker_function(right)
    assert left == right  # flattened, so also equal as values


@given(mappings(max_atoms=1), mappings(max_atoms=1))
def test_workers_and_task_shapes_multiply(a, b):
    if a.rank != b.rank:
        with pytest.raises(ValueError):
            a * b
        return
    m = a * b
    assert m.num_workers == a.num_workers * b.num_workers
    assert m.task_shape == tuple(x * y for x, y in zip(a.task_shape, b.task_shape))
    assert m.tasks_per_worker == a.tasks_per_worker * b.tasks_per_worker


@given(mappings(max_atoms=1), mappings(max_atoms=1), st.data())
def test_composition_formula(a, b, data):
    """Worker w = (outer w // nb, inner w % nb); task = outer * inner_shape + inner."""
    if a.rank != b.rank:
        return
    m = a * b
    w = data.draw(st.integers(0, m.num_workers - 1))
    wo, wi = divmod(w, b.num_workers)
    expected = [tuple(o * s + i for o, s, i in zip(ot, b.task_shape, it))
                for ot in a.worker2task(wo) for it in b.worker2task(wi)]
    assert m.worker2task(w) == expected


@given(mappings(), st.sampled_from([spatial, repeat]))
def test_unit_mappings(m, unit_kind):
    unit = unit_kind(*([1] * m.rank))
    assert worker_function(unit * m) == worker_function(m)
    assert worker_function(m * unit) == worker_function(m)


@given(mappings())
def test_every_task_is_covered_exactly_once(m):
    counts = collections.Counter(t for tasks in worker_function(m) for t in tasks)
    assert sorted(counts) == all_tasks(m.task_shape)
    assert set(counts.values()) == {1}
    assert all(len(tasks) == m.tasks_per_worker for tasks in worker_function(m))


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_spatial_ranks_decompose_the_worker_in_rank_order(shape, data):
    ranks = data.draw(st.permutations(list(range(len(shape)))))
    m = spatial(*shape, ranks=ranks)
    order = sorted(range(len(shape)), key=lambda d: ranks[d])  # rank 0 most significant
    for w in range(m.num_workers):
        digits = np.unravel_index(w, [shape[d] for d in order])
        expected = [0] * len(shape)
        for d, x in zip(order, digits):
            expected[d] = int(x)
        assert m.worker2task(w) == [tuple(expected)]


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_repeat_ranks_give_the_loop_order(shape, data):
    ranks = data.draw(st.permutations(list(range(len(shape)))))
    order = sorted(range(len(shape)), key=lambda d: ranks[d])  # rank 0 outermost
    expected = []
    for digits in itertools.product(*(range(shape[d]) for d in order)):
        task = [0] * len(shape)
        for d, x in zip(order, digits):
            task[d] = x
        expected.append(tuple(task))
    assert repeat(*shape, ranks=ranks).worker2task(0) == expected


@given(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3), st.data())
def test_auto_map_covers_or_refuses(shape, data):
    total = int(np.prod(shape))
    workers = data.draw(st.integers(1, total))
    if total % workers:
        with pytest.raises(ValueError):
            auto_map(*shape, workers=workers)
        return
    m = auto_map(*shape, workers=workers)
    assert m.num_workers == workers and m.task_shape == tuple(shape)
    assert all(isinstance(a, (SpatialTaskMapping, RepeatTaskMapping)) for a in m.atoms())
    counts = collections.Counter(t for tasks in worker_function(m) for t in tasks)
    assert sorted(counts) == all_tasks(shape) and set(counts.values()) == {1}


@given(mappings(), mappings())
def test_equality_is_by_value(a, b):
    same_function = a.rank == b.rank and a.atoms() == b.atoms()
    assert (a == b) == same_function
    if a == b:
        assert hash(a) == hash(b) and str(a) == str(b)


def test_composed_holds_atoms_only():
    with pytest.raises(ValueError):
        ComposedTaskMapping((spatial(2),))
