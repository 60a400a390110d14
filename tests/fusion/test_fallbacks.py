"""Where a graft is impossible the operators stay separate kernels, never a wrong
answer: graph-level refusals (the partition) and kernel-level ones (the engine)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.driver import task_compiler
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.fusion import FusionError, FusionGroup, Member, Source, compose_task, fuse_group
from hidet_framework.ir.expr import Address, TensorElement, var
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.stmt import BufferStoreStmt, EvaluateStmt, ForStmt, seq
from hidet_framework.ir.types import TensorType
from hidet_framework.schedule import BufferRef, Launch, ScheduledTask, auto_schedule

# cuda: runs on the lent GPU machine (marked; skipped with the reason elsewhere)
TARGETS = ["cpu", "evaluator", pytest.param("cuda", marks=pytest.mark.cuda)]


def statuses(fn) -> list[tuple[str, str]]:
    return [(r.operators, r.status) for r in fn.fusion_report()]


@pytest.mark.parametrize("target", TARGETS)
def test_producer_with_two_consumers(target, fx, rng):
    fx.need_ops("matmul", "relu", "tanh")
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    r = hf.ops.relu(x)
    outs = [hf.ops.matmul(r, w), hf.ops.tanh(r)]
    fused, unfused = fx.check(target, outs, [x],
                              lambda xv: [np.maximum(xv, 0) @ w.storage, np.tanh(np.maximum(xv, 0))], rng)
    assert fused.num_launches == unfused.num_launches == 3
    assert sorted(statuses(fused)) == [("matmul", "single"), ("relu", "single"), ("tanh", "single")]


@pytest.mark.parametrize("target", TARGETS)
def test_intermediate_that_is_a_graph_output(target, fx, rng):
    fx.need_ops("matmul", "relu", "add")
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.matmul(x, w)
    z = hf.ops.add(hf.ops.relu(y), 1.0)      # relu + add still fuse with each other
    fused, unfused = fx.check(target, [y, z], [x],
                              lambda xv: [xv @ w.storage, np.maximum(xv @ w.storage, 0) + 1.0], rng)
    assert (fused.num_launches, unfused.num_launches) == (2, 3)
    assert statuses(fused) == [("matmul", "single"), ("relu -> [add]", "fused")]


@pytest.mark.parametrize("target", TARGETS)
def test_non_bijective_consumer_broadcast(target, fx, rng):
    """broadcast_to after a matmul writes each element several times: no epilogue (it
    becomes the prologue of its own consumer instead)."""
    fx.need_ops("matmul", "broadcast_to", "relu")
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.relu(hf.ops.broadcast_to(hf.ops.matmul(x, w), [2, 5, 3]))
    fused, unfused = fx.check(target, [y], [x],
                              lambda xv: [np.broadcast_to(np.maximum(xv @ w.storage, 0), (2, 5, 3))], rng)
    assert (fused.num_launches, unfused.num_launches) == (2, 3)
    assert statuses(fused) == [("matmul", "single"), ("broadcast_to -> [relu]", "fused")]


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_consumer(target, fx, rng):
    fx.need_ops("matmul")
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = fx.row_sum(hf.ops.matmul(x, w))
    fused, unfused = fx.check(target, [y], [x], lambda xv: [(xv @ w.storage).sum(1)], rng)
    assert fused.num_launches == unfused.num_launches == 2


@pytest.mark.parametrize("target", TARGETS)
def test_graft_failure_runs_the_members_apart(target, fx, rng, monkeypatch):
    """When the engine refuses (here: forced), the group runs as its members' own
    kernels with the intermediates in workspace, and the report says why."""
    fx.need_ops("matmul", "relu", "add")
    driver.clear_task_cache()

    def refuse(scheduled, group):
        raise FusionError("refused by the test")

    # both places that graft: the model compiler's build workers (forked: they inherit
    # the patch) and the per-operator path
    monkeypatch.setattr(task_compiler, "fuse_group", refuse)
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.add(hf.ops.matmul(hf.ops.relu(x), w), 0.25)
    try:
        fused, unfused = fx.check(target, [y], [x], lambda xv: [np.maximum(xv, 0) @ w.storage + 0.25], rng)
    finally:
        driver.clear_task_cache()  # the refusal must not outlive the test
    assert fused.num_launches == unfused.num_launches == 3
    (row,) = fused.fusion_report()
    assert row.status == "separate" and "refused by the test" in row.reason


# ------------------------------------------------------------ kernel-level refusals

def _copy_group():
    """A producer (x * 2) feeding an anchor (x + 1) whose kernels the tests write by hand."""
    a = tensor_input("a", "float32", [4])
    r = compute("r", [4], lambda i: a[i] * 2.0)
    producer = Task("double", [a], [r])
    b = tensor_input("b", "float32", [4])
    c = compute("c", [4], lambda i: b[i] + 1.0)
    anchor = Task("inc", [b], [c])
    members = [Member("double", producer, {}, "prologue", [Source("input", 0)]),
               Member("inc", anchor, {}, "anchor", [Source("member", 0)])]
    return FusionGroup(members, 1, [(1, 0)], 1), anchor


def _hand_kernel(body_of) -> ScheduledTask:
    src = var("src", TensorType("float32", (4,)))
    dst = var("dst", src.type)
    fn = Function("k", [src, dst], body_of(src, dst), kind="cpu_kernel")
    return ScheduledTask(module("m", [fn]), [Launch("k", [BufferRef("input", 0), BufferRef("output", 0)])])


def test_engine_refuses_an_address_taken_input():
    group, _ = _copy_group()
    i = var("i")
    kernel = _hand_kernel(lambda src, dst: ForStmt(i, 4, seq(EvaluateStmt(Address(TensorElement(src, [i]))),
                                                             BufferStoreStmt(dst, [i], TensorElement(src, [i])))))
    with pytest.raises(FusionError, match="address"):
        fuse_group(kernel, group)


def test_engine_refuses_a_read_back_output():
    group, anchor = _copy_group()
    i = var("i")
    kernel = _hand_kernel(lambda src, dst: ForStmt(i, 4, BufferStoreStmt(dst, [i], TensorElement(dst, [i]))))
    epilogue_group = FusionGroup([Member("inc", anchor, {}, "anchor", [Source("input", 0)]),
                                  Member("inc", anchor, {}, "epilogue", [Source("member", 0)])], 0, [(1, 0)], 1)
    with pytest.raises(FusionError, match="reads back"):
        fuse_group(kernel, epilogue_group)


def test_engine_grafts_into_every_launch_of_a_multi_stage_anchor(rng):
    """A two-stage anchor (row maxima in a workspace, then x - max) reads its input in
    both launches: the producer is grafted into both."""
    from hidet_framework.compute import reduce
    from hidet_framework.analysis.evaluator import evaluate_function

    x = tensor_input("x", "float32", [3, 5])
    doubled = compute("d", [3, 5], lambda i, j: x[i, j] * 2.0)
    a = tensor_input("a", "float32", [3, 5])
    mx = compute("mx", [3], lambda i: reduce([5], lambda k: a[i, k], "max"))
    y = compute("y", [3, 5], lambda i, j: a[i, j] - mx[i])
    anchor = Task("center", [a], [y])
    group = FusionGroup([Member("double", Task("double", [x], [doubled]), {}, "prologue", [Source("input", 0)]),
                         Member("center", anchor, {}, "anchor", [Source("member", 0)])], 1, [(1, 0)], 1)
    fused = fuse_group(auto_schedule(anchor, "cpu"), group)
    assert len(fused.launches) == 2
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    out, ws = np.full((3, 5), np.nan, np.float32), np.full((3,), np.nan, np.float32)
    for name, buffers, scalars in fused.bind([xv], [out], [ws]):
        evaluate_function(fused.module.functions[name], *buffers, *scalars, module=fused.module)
    np.testing.assert_allclose(out, 2 * xv - (2 * xv).max(1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("target", ["evaluator"])
def test_a_refusal_without_a_message_is_still_reported_separate(target, fx, rng, monkeypatch):
    """The report tells a fallback from a graft by what ran, not by the message."""
    fx.need_ops("matmul", "relu")
    driver.clear_task_cache()

    def refuse(scheduled, group):
        raise FusionError()

    # both places that graft: the model compiler's build workers (forked: they inherit
    # the patch) and the per-operator path
    monkeypatch.setattr(task_compiler, "fuse_group", refuse)
    x = hf.symbol((5, 7), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.matmul(hf.ops.relu(x), w)
    try:
        fused, _ = fx.check(target, [y], [x], lambda xv: [np.maximum(xv, 0) @ w.storage], rng)
    finally:
        driver.clear_task_cache()
    (row,) = fused.fusion_report()
    assert row.status == "separate" and row.reason


def test_fused_cache_keys_on_the_members_attributes(monkeypatch):
    """compile_fused, like compile_task, schedules again when an anchor's attributes
    (which select and parameterise templates) differ, even on the same tasks."""
    group, _ = _copy_group()
    seen = []
    from hidet_framework.driver import task_compiler

    real = task_compiler.schedule

    def record(task, op_name, target, space, attributes):
        seen.append(dict(attributes))
        return real(task, op_name, target, space, attributes)

    monkeypatch.setattr(task_compiler, "schedule", record)
    driver.clear_task_cache()
    try:
        for tile in (1, 2):
            members = list(group.members)
            members[1] = Member("inc", members[1].task, {"tile": tile}, "anchor", members[1].sources)
            other = FusionGroup(members, group.anchor, group.outputs, group.num_inputs)
            task = compose_task(other, [(4,)], ["float32"])
            driver.compile_fused(task, other, driver.EVALUATOR_TARGET)
    finally:
        driver.clear_task_cache()
    from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE, PROLOGUE_INPUTS_ATTRIBUTE

    # the driver adds ANCHOR_ATTRIBUTE (templates build a kernel that takes grafts) and the
    # anchor inputs a prologue feeds (here the producer feeds input 0)
    assert seen == [{"tile": t, ANCHOR_ATTRIBUTE: True, PROLOGUE_INPUTS_ATTRIBUTE: (0,)} for t in (1, 2)]
