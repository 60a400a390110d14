"""The memory planner's hand-over (``BufferLifetime.alias_of``): an output that takes
the bytes of an input dying at its kernel (fusion/inplace.py proves when a kernel
allows it). What it must refuse, and that nothing else then overlaps."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from hidet_framework.runtime.memory_plan import ALIGNMENT, BufferLifetime, align_up, plan_memory


def test_an_heir_takes_the_bytes_of_the_buffer_dying_at_its_step():
    u = 3 * ALIGNMENT + 17  # not a multiple of the alignment
    buffers = [BufferLifetime(u, 0, 2, "r"), BufferLifetime(u, 1, 2, "x"),
               BufferLifetime(u, 2, 3, "y", alias_of=0), BufferLifetime(u, 2, 2, "workspace")]
    plan = plan_memory(buffers)
    assert plan.offsets[2] == plan.offsets[0]
    assert plan.overlapping_pairs() == []
    # the workspace born at the same step never lands on the handed-over bytes
    assert plan.offsets[3] not in (plan.offsets[0], plan.offsets[1])
    apart = plan_memory([BufferLifetime(b.nbytes, b.first, b.last, b.name) for b in buffers])
    assert plan.arena_bytes == 3 * align_up(u) < apart.arena_bytes == 4 * align_up(u)


def test_a_chain_of_hand_overs_and_the_bytes_freed_after_the_last():
    u = ALIGNMENT
    buffers = [BufferLifetime(u, 0, 1), BufferLifetime(u, 1, 2, alias_of=0), BufferLifetime(u, 2, 3, alias_of=1),
               BufferLifetime(u, 4, 5)]
    plan = plan_memory(buffers)
    assert plan.offsets[0] == plan.offsets[1] == plan.offsets[2]
    assert plan.offsets[3] == plan.offsets[0]  # freed once the last heir died
    assert plan.arena_bytes == u and plan.overlapping_pairs() == []


def test_overlap_without_a_hand_over_is_still_reported():
    u = ALIGNMENT
    plan = plan_memory([BufferLifetime(u, 0, 1), BufferLifetime(u, 1, 2, alias_of=0)])
    forged = type(plan)((BufferLifetime(u, 0, 1), BufferLifetime(u, 1, 2)), plan.offsets, plan.arena_bytes)
    assert forged.overlapping_pairs() == [(0, 1)]


@pytest.mark.parametrize("buffers, why", [
    ([BufferLifetime(512, 0, 3), BufferLifetime(512, 2, 4, alias_of=0)], "still read after the heir's step"),
    ([BufferLifetime(512, 0, 1), BufferLifetime(512, 2, 4, alias_of=0)], "dead before the heir's step"),
    ([BufferLifetime(512, 0, 2), BufferLifetime(256, 2, 4, alias_of=0)], "another size"),
    ([BufferLifetime(512, 0, 2), BufferLifetime(512, 2, 4, alias_of=0), BufferLifetime(512, 2, 3, alias_of=0)],
     "taken twice"),
    ([BufferLifetime(512, 0, 2, alias_of=0)], "itself"),
    ([BufferLifetime(512, 0, 2, alias_of=5)], "no such buffer"),
    ([BufferLifetime(512, 2, 2), BufferLifetime(512, 2, 4, alias_of=0)], "born at the same step"),
])
def test_hand_overs_the_planner_refuses(buffers, why):
    with pytest.raises(ValueError):
        plan_memory(buffers)


steps = st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 5), st.booleans()), min_size=1, max_size=25)


@given(steps)
def test_random_chains_with_hand_overs_never_overlap(spec):
    """A chain of kernels, each born one step after the last; each new buffer either
    takes the previous one's bytes (same size, dying at its step) or is fresh; plus a
    long-lived buffer per step that nobody may take."""
    buffers: list[BufferLifetime] = []
    prev = None
    for k, (size, life, heir) in enumerate(spec):
        step = k + 1
        if heir and prev is not None and buffers[prev].last == step:
            buffers.append(BufferLifetime(buffers[prev].nbytes, step, step + 1, f"h{k}", alias_of=prev))
        else:
            buffers.append(BufferLifetime(size, step, step + 1, f"b{k}"))
        prev = len(buffers) - 1
        buffers.append(BufferLifetime(size // 2 + 1, step, step + life, f"long{k}"))
    plan = plan_memory(buffers)
    assert plan.overlapping_pairs() == []
    for i, b in enumerate(buffers):
        assert plan.offsets[i] % ALIGNMENT == 0 and plan.offsets[i] + b.nbytes <= plan.arena_bytes
        if b.alias_of is not None:
            assert plan.offsets[i] == plan.offsets[b.alias_of]
