"""Views after an anchor (``fusion/view_epilogue.py``; on by default on cuda, HIDET_FRAMEWORK_VIEW_EPILOGUE=1/0 elsewhere):
a group whose members after the anchor are all reshapes of the anchor's output
schedules the anchor as a lone operator (no graft: its vector stores stay) and renames
the output buffer; anything else after the anchor keeps the graftable kernel.

Fused and unfused run against float64 numpy (``fx.check``)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.fusion import GROUP_ATTRIBUTE
from hidet_framework.fusion.plan import ANCHOR_ATTRIBUTE
from hidet_framework.fusion.view_epilogue import ENV_VIEW_EPILOGUE, index_values, _regroup, is_flat_view, view_tail
from hidet_framework.ir.expr import var

TARGETS = ["evaluator", "cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def views(monkeypatch):
    monkeypatch.setenv(ENV_VIEW_EPILOGUE, "1")


def _groups(fn):
    return [op.attributes[GROUP_ATTRIBUTE] for op in fn.graph.nodes if GROUP_ATTRIBUTE in op.attributes]


def _layer_norm_np(x, s, b):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b


@pytest.mark.parametrize("target", TARGETS)
def test_layer_norm_then_reshape_is_the_lone_kernel(target, fx, rng, views):
    fx.need_ops("layer_norm", "reshape", "matmul")
    x, w = hf.symbol((1, 8, 64), "float32"), hf.symbol((64, 24), "float32")
    s = hf.constant(rng.standard_normal(64).astype(np.float32))
    b = hf.constant(rng.standard_normal(64).astype(np.float32))
    y = hf.ops.reshape(hf.ops.layer_norm(x, s, b), [8, 64])
    z = hf.ops.matmul(y, w)  # y is also read: the group's output is stored, under the view's shape
    fused, _ = fx.check(target, [y, z], [x, w], lambda xv, wv: [
        _layer_norm_np(xv, s.storage, b.storage).reshape(8, 64),
        _layer_norm_np(xv, s.storage, b.storage).reshape(8, 64) @ wv], rng, rtol=1e-4, atol=1e-4)
    (group,) = _groups(fused)
    assert group.describe() == "[layer_norm] -> reshape" and ANCHOR_ATTRIBUTE not in group.anchor_attributes()


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_then_reshape_and_unsqueeze(target, fx, rng, views):
    fx.need_ops("matmul", "reshape", "unsqueeze")
    a, bm = hf.symbol((6, 5), "float32"), hf.symbol((5, 10), "float32")
    y = hf.ops.unsqueeze(hf.ops.reshape(hf.ops.matmul(a, bm), [3, 20]), 0)
    fused, _ = fx.check(target, [y], [a, bm], lambda av, bv: [(av @ bv).reshape(1, 3, 20)], rng)
    (group,) = _groups(fused)
    assert view_tail(group) == [1, 2] and ANCHOR_ATTRIBUTE not in group.anchor_attributes()
    assert fused.num_launches == 1


def test_a_lone_kernel_that_cannot_be_renamed_falls_back_to_the_graft(fx, rng, views, monkeypatch):
    """(Forced here: the rename refused.) The group is still one kernel: the graftable
    one, the views grafted onto its stores."""
    from hidet_framework.driver import clear_task_cache
    from hidet_framework.fusion import FusionError
    fuse_group_module = sys.modules["hidet_framework.fusion.fuse_group"]  # (the package exports the function)

    def refuse(*args):
        raise FusionError("refused by the test")

    fx.need_ops("matmul", "reshape")
    clear_task_cache()
    monkeypatch.setattr(fuse_group_module, "rename_buffer", refuse)
    a, bm = hf.symbol((6, 5), "float32"), hf.symbol((5, 10), "float32")
    try:
        fused, _ = fx.check("cpu", [hf.ops.reshape(hf.ops.matmul(a, bm), [60])], [a, bm],
                            lambda av, bv: [(av @ bv).reshape(60)], rng)
    finally:
        clear_task_cache()
    (row,) = fused.fusion_report()
    assert row.status == "fused" and row.launches == fused.num_launches == 1, row


# after the anchor: (graph, numpy) where something is grafted, so the kernel stays graftable
GRAFTED = {
    "add then reshape": (lambda mm, c: hf.ops.reshape(hf.ops.add(mm, c), [5, 6]),
                         lambda m, c: (m + c).reshape(5, 6)),
    "reshape then add": (lambda mm, c: hf.ops.add(hf.ops.reshape(mm, [5, 6]), 1.0), lambda m, c: m.reshape(5, 6) + 1),
    "transpose": (lambda mm, c: hf.ops.transpose(mm, [1, 0]), lambda m, c: m.T),
}


@pytest.mark.parametrize("case", sorted(GRAFTED))
def test_a_group_with_a_graft_keeps_the_graftable_kernel(case, fx, rng, views):
    fx.need_ops("matmul", "add", "reshape", "transpose")
    build, ref = GRAFTED[case]
    a, bm = hf.symbol((3, 4), "float32"), hf.symbol((4, 10), "float32")
    c = hf.constant(rng.standard_normal(10).astype(np.float32))
    fused, _ = fx.check("evaluator", [build(hf.ops.matmul(a, bm), c)], [a, bm],
                        lambda av, bv: [ref(av @ bv, c.storage)], rng)
    (group,) = _groups(fused)
    assert view_tail(group) == [] and group.anchor_attributes()[ANCHOR_ATTRIBUTE] is True, group.describe()


@pytest.mark.parametrize("target,renamed", [("cuda", True), ("cpu", False), ("evaluator", False), (None, False)])
def test_by_default_on_for_cuda_only(target, renamed, fx, monkeypatch):
    """The partition, run offline for each target: the group records the decision."""
    from hidet_framework.fusion import FUSION_PASSES
    from hidet_framework.graph.passes import GRAPH_PASSES, GraphPassContext, run_graph_passes

    monkeypatch.delenv(ENV_VIEW_EPILOGUE, raising=False)
    fx.need_ops("matmul", "reshape")
    a, bm = hf.symbol((6, 5), "float32"), hf.symbol((5, 10), "float32")
    graph = run_graph_passes(hf.trace([hf.ops.reshape(hf.ops.matmul(a, bm), [60])], inputs=[a, bm]),
                             GraphPassContext(target=target), GRAPH_PASSES + FUSION_PASSES)
    (group,) = [op.attributes[GROUP_ATTRIBUTE] for op in graph.nodes if GROUP_ATTRIBUTE in op.attributes]
    assert group.views is renamed and (view_tail(group) != []) is renamed, group.describe()


def test_without_the_switch_nothing_changes(fx, rng, monkeypatch):
    monkeypatch.delenv(ENV_VIEW_EPILOGUE, raising=False)
    fx.need_ops("matmul", "reshape")
    a, bm = hf.symbol((6, 5), "float32"), hf.symbol((5, 10), "float32")
    fused, _ = fx.check("evaluator", [hf.ops.reshape(hf.ops.matmul(a, bm), [60])], [a, bm],
                        lambda av, bv: [(av @ bv).reshape(60)], rng)
    (group,) = _groups(fused)
    assert view_tail(group) == [] and ANCHOR_ATTRIBUTE in group.anchor_attributes()


def _task(shape, out_shape, element):
    node = tensor_input("x", "float32", shape)
    return Task("t", [node], [compute("y", out_shape, lambda *i: element(node, i))])


def test_which_tasks_are_views(fx):
    fx.need_ops("reshape", "flatten", "squeeze", "unsqueeze", "transpose", "slice", "neg", "cast")
    x = hf.symbol((2, 1, 3, 4), "float32")
    o = hf.ops
    yes = {"reshape": o.reshape(x, [6, 4]), "flatten": o.flatten(x, 1), "squeeze": o.squeeze(x, [1]),
           "unsqueeze": o.unsqueeze(x, [0, 5]), "transpose of an extent-1 axis": o.transpose(x, [1, 0, 2, 3])}
    no = {"transpose": o.transpose(x, [0, 1, 3, 2]), "slice": o.slice(x, [1], [3], axes=[3]), "neg": o.neg(x),
          "cast": o.cast(x, "float16")}
    assert [name for name, t in yes.items() if not is_flat_view(t.producer.task)] == []
    assert [name for name, t in no.items() if is_flat_view(t.producer.task)] == []
    # same size and dtype, a plain read, but the mirrored element
    assert not is_flat_view(_task([8], [8], lambda a, i: a[7 - i[0]]))
    assert is_flat_view(_task([8], [2, 4], lambda a, i: a[i[0] * 4 + i[1]]))
    assert not is_flat_view(_task([8], [2, 4], lambda a, i: a[i[1] * 2 + i[0]]))


@pytest.mark.parametrize("old,new", [((1, 128, 768), (128, 768)), ((6, 4), (2, 3, 4)), ((2, 3, 4), (4, 6)),
                                     ((12,), (3, 1, 4)), ((1, 1), (1,)), ((4, 6, 5), (8, 15)), ((7, 1, 3), (21,))])
def test_regrouped_indices_address_the_same_element(old, new):
    axes = [var(f"i{d}", "int32") for d in range(len(old))]
    grids = np.indices(old).reshape(len(old), -1)
    got = [index_values(e, dict(zip(axes, grids))) for e in _regroup(tuple(axes), list(old), list(new))]
    got = [np.broadcast_to(np.asarray(g), grids.shape[1:]) for g in got]
    flat_old = np.ravel_multi_index(tuple(grids), old)
    np.testing.assert_array_equal(np.ravel_multi_index(tuple(got), new), flat_old)
