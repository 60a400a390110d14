"""The memory planner: reuse on chains, no overlap between buffers live together."""
from __future__ import annotations

from hypothesis import given, strategies as st

from hidet_framework.runtime.memory_plan import ALIGNMENT, BufferLifetime, align_up, plan_memory


def test_chain_reuses_two_buffers():
    # a chain of 10 steps: each buffer is written at step k and read at step k + 1
    size = 1000
    buffers = [BufferLifetime(size, k, k + 1, f"t{k}") for k in range(10)]
    plan = plan_memory(buffers)
    assert plan.overlapping_pairs() == []
    assert plan.arena_bytes == 2 * align_up(size)
    assert plan.arena_bytes < plan.unplanned_bytes


def test_offsets_are_aligned_and_empty_buffers_cost_nothing():
    plan = plan_memory([BufferLifetime(3, 0, 2), BufferLifetime(0, 0, 2), BufferLifetime(5, 1, 1)])
    assert all(o % ALIGNMENT == 0 for o in plan.offsets)
    assert plan.arena_bytes == 2 * ALIGNMENT


def test_best_fit_picks_the_smallest_hole():
    # layout |big 4|pin1 1|small 2|pin2 1|; at step 5 the holes are 4 and 2 units wide,
    # and a 2-unit buffer goes to the 2-unit hole, leaving the big one whole
    u = ALIGNMENT
    plan = plan_memory([
        BufferLifetime(4 * u, 0, 4, "big"), BufferLifetime(u, 1, 9, "pin1"),
        BufferLifetime(2 * u, 2, 4, "small"), BufferLifetime(u, 3, 9, "pin2"),
        BufferLifetime(2 * u, 5, 6, "new"),
    ])
    assert plan.offsets[:4] == (0, 4 * u, 5 * u, 7 * u)
    assert plan.offsets[4] == plan.offsets[2]
    assert plan.arena_bytes == 8 * u


def test_same_step_buffers_never_share():
    # read at step 1 and written at step 1: a kernel reads its input while writing its output
    plan = plan_memory([BufferLifetime(512, 0, 1), BufferLifetime(512, 1, 2)])
    assert plan.offsets[0] != plan.offsets[1]


lifetimes = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 20), st.integers(0, 6)).map(
        lambda t: BufferLifetime(t[0], t[1], t[1] + t[2])),
    min_size=1, max_size=40)


@given(lifetimes)
def test_no_two_live_buffers_overlap(buffers):
    plan = plan_memory(buffers)
    assert plan.overlapping_pairs() == []
    for b, offset in zip(plan.buffers, plan.offsets):
        assert offset % ALIGNMENT == 0
        assert offset + b.nbytes <= plan.arena_bytes
    # the arena holds at least what is live at the busiest step, and at most everything
    steps = range(max(b.last for b in buffers) + 1)
    busiest = max(sum(align_up(b.nbytes) for b in buffers if b.first <= s <= b.last) for s in steps)
    assert busiest <= plan.arena_bytes <= sum(align_up(b.nbytes) for b in buffers)
