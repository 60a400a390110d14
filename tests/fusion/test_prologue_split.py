"""Where only a group's producers cannot be grafted, they run apart and the anchor keeps
its consumers grafted onto its stores (`fusion/chained_task.split_prologues`, used by
both fallback paths of the driver: `task_compiler.compile_fused` and the whole-model
compiler's `_plan`). Inception-V3's slices of its horizontally fused 1x1 convolutions
feed packed convolutions, which read their input through a pointer: slice, then
convolution + relu (two launches), where the whole group used to run apart (three)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.driver import model_compiler, task_compiler
from hidet_framework.fusion import FusionError, FusionGroup, Member, Source
from hidet_framework.fusion.chained_task import split_prologues


def conv_relu64(x, w, b, pad):
    """float64 relu(conv2d(x, w, b)) with stride 1 and `pad` zeros on each side."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, o, oh, ow)) + b.astype(np.float64)[None, :, None, None]
    for r in range(kh):
        for q in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, r:r + oh, q:q + ow], w[:, :, r, q].astype(np.float64))
    return np.maximum(y, 0.0)


def _no_split(monkeypatch):
    for mod in (task_compiler, model_compiler):
        monkeypatch.setattr(mod, "split_prologues", lambda task, group: None)


@pytest.mark.parametrize("split", [True, False])
def test_a_refused_slice_runs_apart_and_the_convolution_keeps_its_relu(fx, rng, split, monkeypatch):
    fx.need_target("cpu")
    if not split:
        _no_split(monkeypatch)
    wv = (rng.standard_normal((37, 24, 3, 3)) * 0.2).astype(np.float32)
    bv = rng.standard_normal(37).astype(np.float32)
    x = hf.symbol((1, 40, 13, 11), "float32")
    y = hf.ops.relu(hf.ops.conv2d(hf.ops.slice(x, [11], [35], [1]), hf.constant(wv), hf.constant(bv), padding=1))
    driver.clear_task_cache()
    try:
        fn = hf.compile(hf.trace(y, inputs=[x]), target="cpu", space=0)
    finally:
        driver.clear_task_cache()
    (row,) = fn.fusion_report()
    assert row.status == "separate" and "other than through elements" in row.reason
    assert fn.num_launches == (2 if split else 3)
    for _ in range(2):
        xv = rng.standard_normal((1, 40, 13, 11)).astype(np.float32)
        out = np.full((1, 37, 13, 11), np.nan, np.float32)
        fn(xv, out=out)
        np.testing.assert_allclose(out, conv_relu64(xv[:, 11:35], wv, bv, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["cpu", "evaluator"])
def test_only_the_producers_refused(target, fx, rng, monkeypatch):
    """The engine refuses every prologue graft (forced): relu apart, matmul + add + tanh
    one kernel; the result is the unfused one's."""
    fx.need_ops("matmul", "relu", "add", "tanh")
    graft = sys.modules["hidet_framework.fusion.fuse_group"]

    def refuse(*args, **kwargs):
        raise FusionError("prologue refused by the test")

    monkeypatch.setattr(graft, "graft_producer", refuse)
    driver.clear_task_cache()
    x = hf.symbol((5, 7), "float32")
    bias = hf.symbol((5, 3), "float32")
    w = hf.constant(rng.standard_normal((7, 3)).astype(np.float32))
    y = hf.ops.tanh(hf.ops.add(hf.ops.matmul(hf.ops.relu(x), w), bias))
    try:
        fused, unfused = fx.check(target, [y], [x, bias],
                                  lambda xv, bv: [np.tanh(np.maximum(xv, 0) @ w.storage + bv)], rng)
    finally:
        driver.clear_task_cache()
    assert (fused.num_launches, unfused.num_launches) == (2, 4)
    (row,) = fused.fusion_report()
    assert row.status == "separate" and "prologue refused by the test" in row.reason


def _task(name, shapes, fn):
    ins = [tensor_input(f"{name}{k}", "float32", s) for k, s in enumerate(shapes)]
    return Task(name, ins, [compute(f"{name}_y", [4], lambda i: fn(*[t[i] for t in ins]))])


def test_split_wiring():
    """Two producers (one of the other), the anchor reading a group input beside them,
    two consumers, one reading another group input: the inner group takes its inputs
    in order of first use and keeps the epilogues; the outer one runs the producers,
    then the inner group as its anchor."""
    p0 = Member("neg", _task("neg", [[4]], lambda a: -a), {}, "prologue", [Source("input", 1)])
    p1 = Member("dbl", _task("dbl", [[4]], lambda a: a * 2.0), {}, "prologue", [Source("member", 0)])
    an = Member("mul", _task("mul", [[4], [4]], lambda a, b: a * b), {}, "anchor",
                [Source("input", 0), Source("member", 1)])
    e0 = Member("inc", _task("inc", [[4]], lambda a: a + 1.0), {}, "epilogue", [Source("member", 2)])
    e1 = Member("sub", _task("sub", [[4], [4]], lambda a, b: a - b), {}, "epilogue",
                [Source("input", 2), Source("member", 3)])
    group = FusionGroup([p0, p1, an, e0, e1], 2, [(4, 0)], 3)
    ins = [tensor_input(f"g{k}", "float32", [4]) for k in range(3)]
    task = Task("fused", ins, [compute("o", [4], lambda i: ins[2][i] - (ins[0][i] * (-ins[1][i] * 2.0) + 1.0))])
    outer, inner, inner_task = split_prologues(task, group)
    assert [m.role for m in outer.members] == ["prologue", "prologue", "anchor"]
    assert [(s.kind, s.index) for s in outer.members[1].sources] == [("member", 0)]
    assert [(s.kind, s.index) for s in outer.members[2].sources] == [("input", 0), ("member", 1), ("input", 2)]
    assert outer.outputs == ((2, 0),) and outer.num_inputs == 3 and outer.anchor == 2
    assert [m.name for m in inner.members] == ["mul", "inc", "sub"] and inner.anchor == 0
    assert [[(s.kind, s.index) for s in m.sources] for m in inner.members] == [
        [("input", 0), ("input", 1)], [("member", 0)], [("input", 2), ("member", 1)]]
    assert inner.outputs == ((2, 0),) and inner.num_inputs == 3
    assert len(inner_task.inputs) == 3 and len(inner_task.outputs) == 1
    # nothing to split: no prologue, or no epilogue
    assert split_prologues(task, FusionGroup([an, e0], 0, [(1, 0)], 2)) is None
    assert split_prologues(task, FusionGroup([p0, an], 1, [(1, 0)], 2)) is None
