"""Fusion's decisions and what it says about them, exactly: the report line of each
kind of group, the reason fusion stopped at each edge (read twice, a graph output, an
empty tensor, a reduction, not a bijection), and the plan records (roles, sources,
what the cache key must tell apart). Evaluator target: no compiler. Written to kill
mutants of fusion/ (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.fusion.plan import FusionGroup, GroupReport, Member, Source


def _report(outs, ins):
    fn = hf.compile(hf.trace(outs, inputs=ins), target="evaluator")
    return [(r.operators, r.status, r.reason) for r in fn.fusion_report()], fn


def test_report_lines():
    assert str(GroupReport("neg -> [relu]", "fused", 1, "auto")) == "fused    1 launch  neg -> [relu]  (auto)"
    assert str(GroupReport("a -> [b]", "separate", 2, "", "no graft")) == "separate 2 launches  a -> [b]  -- no graft"
    assert str(GroupReport("exp", "single", 0, "tpl", "why")) == "single   0 launches  exp  (tpl)  -- why"


def test_a_value_read_twice_stops_both_consumers(fx):
    fx.need_ops("neg", "relu", "exp", "tanh", "add")
    x = hf.symbol((4, 5), name="x")
    s = hf.ops.relu(hf.ops.neg(x))
    got, fn = _report([hf.ops.add(hf.ops.exp(s), hf.ops.tanh(s))], [x])
    assert got == [("neg -> [relu]", "fused", ""),
                   ("exp -> tanh -> [add]", "fused", "relu not fused before exp: it is read 2 times; "
                                                     "relu not fused before tanh: it is read 2 times")]
    xv = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    r = np.maximum(-xv.astype(np.float64), 0)
    np.testing.assert_allclose(fn(xv), np.exp(r) + np.tanh(r), rtol=1e-5)


def test_a_returned_value_and_an_empty_one_stop_fusion(fx):
    fx.need_ops("neg", "relu", "exp")
    x = hf.symbol((4, 5), name="x")
    m = hf.ops.relu(hf.ops.neg(x))
    got, _ = _report([hf.ops.exp(m), m], [x])
    assert got == [("neg -> [relu]", "fused", ""), ("exp", "single", "relu not fused before exp: it is a graph output")]
    z = hf.symbol((0, 5), name="z")
    got, fn = _report([hf.ops.exp(hf.ops.relu(z))], [z])
    assert got == [("relu", "single", ""), ("exp", "single", "relu not fused before exp: relu's output is empty")]
    assert fn.pass_stats["partition_fusion_groups"] == {"groups": 0, "operators_fused": 0}


def test_epilogue_stops_at_a_broadcast_and_at_a_second_reader(fx):
    fx.need_ops("matmul", "relu", "broadcast_to", "exp", "add")
    a, b = hf.symbol((3, 4), name="a"), hf.symbol((4, 5), name="b")
    mm = hf.ops.matmul(a, b)
    got, _ = _report([hf.ops.broadcast_to(hf.ops.relu(mm), (2, 3, 5))], [a, b])
    assert got == [("[matmul] -> relu", "fused", "broadcast_to not fused after relu: consumer 'broadcast_to' "
                                                 "is not a bijection from input 0 to its output"),
                   ("broadcast_to", "single", "")]
    mm = hf.ops.matmul(a, b)
    got, _ = _report([hf.ops.exp(mm), hf.ops.relu(mm)], [a, b])
    assert got[0] == ("matmul", "single", "stored after matmul: it is read 2 times (exp's output is a graph output)")
    assert [g[:2] for g in got[1:]] == [("exp", "single"), ("relu", "single")]
    # readers that reconverge at one operator are one epilogue member (fusion/epilogue_dag.py)
    mm = hf.ops.matmul(a, b)
    got, _ = _report([hf.ops.add(hf.ops.exp(mm), hf.ops.relu(mm))], [a, b])
    assert got == [("[matmul] -> exp_relu_add", "fused", "")]


def test_a_reduction_after_an_anchor_anchors_its_own_group(fx):
    fx.need_ops("matmul", "relu")
    a, b, c = hf.symbol((3, 4), name="a"), hf.symbol((4, 5), name="b"), hf.symbol((5, 2), name="c")
    got, fn = _report([hf.ops.matmul(hf.ops.relu(hf.ops.matmul(a, b)), c)], [a, b, c])
    assert got == [("[matmul] -> relu", "fused",
                    "matmul not fused after relu: matmul reduces (not injective): it anchors its own group"),
                   ("matmul", "single", "")]
    assert fn.pass_stats["partition_fusion_groups"] == {"groups": 1, "operators_fused": 2}


def _task(n=3, scale=2.0):
    x = tensor_input("x", "float32", [n])
    return Task("s", [x], [compute("y", [n], lambda i: x[i] * scale)])


def _group(**change):
    t = _task()
    members = [Member("neg", change.get("task", t), {}, change.get("role", "prologue"), [Source("input", 0)]),
               Member("relu", t, {}, "anchor", [Source(change.get("kind", "member"), change.get("index", 0))])]
    return FusionGroup(members, change.get("anchor", 1), change.get("outputs", [(1, 0)]), change.get("inputs", 1))


def test_plan_records():
    g = _group()
    assert g.anchor_member.name == "relu" and g.describe() == "neg -> [relu]"
    assert [j for j, _ in g.members_in("prologue")] == [0] and g.members_in("epilogue") == []
    assert g.structure_key() == _group().structure_key()
    for change in ({"role": "epilogue"}, {"kind": "input"}, {"index": 1}, {"anchor": 0}, {"outputs": [(0, 0)]},
                   {"inputs": 2}, {"task": _task(scale=3.0)}, {"task": _task(n=4)}):
        assert _group(**change).structure_key() != g.structure_key(), change
    with pytest.raises(ValueError):
        Source("output", 0)
    with pytest.raises(ValueError):
        Member("x", _task(), {}, "middle", [])
