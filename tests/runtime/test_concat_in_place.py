"""Concats written in place (``runtime/concat_in_place.py``): the producers of a concat's
inputs store straight into the concat's buffer and the concat launches nothing.

Checked: which tasks are placements (decided from the compute definition: concats along
an axis behind extents of 1, nested concats; not a concat behind a larger extent, a
promoting concat, a pad, a shifted or doubled read); compiled graphs that take it give
the float64 reference's values in NaN-poisoned ``out=`` arrays, through the direct and
the copying call paths and after a save/load round trip, with one launch fewer and no
overlapping live buffers; and what must run as before: an input that is a graph input,
an output that is returned, an input that is returned, given twice or already placed,
runs off the alignment, the switch off; an input read long after the concat keeps its
bytes; an input never lends its bytes to an in-place output."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator
from hidet_framework.ir.expr import BinaryOp, const, if_then_else
from hidet_framework.runtime.concat_in_place import ENV_CONCAT_IN_PLACE, PlacedConcat, placement


def _sum_last(x):
    """Sums over the last axis: a reduction, so it anchors its own kernel (a producer
    the concat cannot absorb)."""
    a = tensor_input("a", x.dtype, x.shape)
    k = x.shape[-1]
    y = compute("y", x.shape[:-1], lambda *i: reduce([k], lambda r: a[(*i, r)], "sum"))
    return Operator("sum_last", [x], Task("sum_last", [a], [y])).outputs[0]


def _task(t):
    return t.producer.task


def _placed_ops(fn):
    return [k for k, task in enumerate(fn.tasks) if isinstance(task, PlacedConcat)]


def _check(fn, inputs, want):
    """Right values in NaN-poisoned out= arrays (twice), on the copying path (Fortran
    order inputs), and no two live buffers sharing bytes."""
    assert fn.plan.overlapping_pairs() == []
    outs = [np.full(w.shape, np.nan, np.float32) for w in want]
    for _ in range(2):
        fn(*inputs, out=outs if len(outs) > 1 else outs[0])
        for o, w in zip(outs, want):
            np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-5)
    got = fn(*[np.asfortranarray(a) for a in inputs])
    for o, w in zip(got if isinstance(got, tuple) else (got,), want):
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- which tasks place

@pytest.mark.parametrize("shapes, axis, starts", [
    ([(1, 3, 4, 5), (1, 7, 4, 5), (1, 2, 4, 5)], 1, (0, 60, 200)),
    ([(2, 3), (5, 3)], 0, (0, 6)),
    ([(1, 1, 4, 5), (1, 1, 3, 5)], 2, (0, 20)),
    ([(1, 5, 3)], 1, (0,)),
])
def test_concats_behind_unit_extents_are_placements(shapes, axis, starts):
    y = hf.ops.concat([hf.symbol(s, "float32") for s in shapes], axis=axis)
    assert placement(_task(y)) == starts


def test_the_starts_follow_the_output_not_the_input_order():
    a, b = hf.symbol((1, 2, 3), "float32"), hf.symbol((1, 4, 3), "float32")
    x = tensor_input("x", a.dtype, a.shape)
    z = tensor_input("z", b.dtype, b.shape)
    y = compute("y", (1, 6, 3), lambda n, c, w: if_then_else(BinaryOp("lt", c, const(4)), z[n, c, w],
                                                              x[n, c - 4, w]))
    assert placement(Task("swapped", [x, z], [y])) == (12, 0)


@pytest.mark.parametrize("build", [
    lambda: hf.ops.concat([hf.symbol((2, 3, 4), "float32"), hf.symbol((2, 5, 4), "float32")], axis=1),
    lambda: hf.ops.concat([hf.symbol((1, 3), "float16"), hf.symbol((1, 5), "float32")], axis=1),
    lambda: hf.ops.relu(hf.symbol((1, 8), "float32")),
    lambda: hf.ops.pad(hf.symbol((1, 8), "float32"), [0, 1, 0, 1]),
])
def test_other_tasks_are_not_placements(build):
    """Behind an extent of 2 the runs interleave; a promoting concat casts; relu
    computes; pad reads nothing at its borders."""
    assert placement(_task(build())) is None


def test_a_shifted_or_doubled_read_is_not_a_placement():
    x = tensor_input("x", hf.symbol((4,), "float32").dtype, (4,))
    z = tensor_input("z", x.dtype, (4,))
    shifted = compute("y", (8,), lambda i: if_then_else(BinaryOp("lt", i, const(4)), x[i],
                                                       z[BinaryOp("mod", i - 3, const(4))]))
    doubled = compute("y", (8,), lambda i: if_then_else(BinaryOp("lt", i, const(4)), x[i], x[i - 4]))
    past_end = compute("y", (8,), lambda i: if_then_else(BinaryOp("lt", i, const(5)), x[i], z[i - 5]))
    assert placement(Task("shifted", [x, z], [shifted])) is None
    assert placement(Task("doubled", [x, z], [doubled])) is None
    assert placement(Task("past_end", [x, z], [past_end])) is None


def test_an_index_past_its_extent_is_not_a_placement():
    """y[0, j] = x[0, j] on a 2 x 2 x: the flat offsets would match, the indices do not."""
    x = tensor_input("x", hf.symbol((2, 2), "float32").dtype, (2, 2))
    y = compute("y", (1, 4), lambda i, j: x[i, j])
    assert placement(Task("wide", [x], [y])) is None


# ---------------------------------------------------------------- compiled graphs

def _branches(rng, c=(16, 32, 16), hw=(4, 4), k=3):
    """x -> one reduction per branch -> concat along channels, read twice."""
    x = hf.symbol((1, sum(c), *hw, k), "float32")
    parts, start = [], 0
    for n in c:
        parts.append(_sum_last(hf.ops.slice(x, [start], [start + n], [1])))
        start += n
    y = hf.ops.concat(parts, axis=1)
    a = rng.standard_normal((1, sum(c), *hw, k)).astype(np.float32)
    ref = a.astype(np.float64).sum(-1)
    return x, parts, y, a, ref


@pytest.mark.parametrize("target", ["cpu", "evaluator"])
def test_the_producers_write_into_the_concat(rng, monkeypatch, target):
    monkeypatch.setenv(ENV_CONCAT_IN_PLACE, "1")
    x, parts, y, a, ref = _branches(rng)
    graph = hf.trace([y * 2.0, y + 1.0], [x])
    fn = hf.compile(graph, target=target)
    (k,) = _placed_ops(fn)
    assert fn.graph.nodes[k].name == "concat"
    monkeypatch.setenv(ENV_CONCAT_IN_PLACE, "0")
    off = hf.compile(graph, target=target)
    assert _placed_ops(off) == [] and fn.num_launches == off.num_launches - 1
    assert fn.memory_report().peak_bytes <= off.memory_report().peak_bytes
    _check(fn, [a], [ref * 2, ref + 1])
    # each input's view starts at its run of the concat's buffer
    y_node = fn.graph.nodes[k]
    base = fn._array_of(y_node.outputs[0]).__array_interface__["data"][0]
    starts = [fn._array_of(t).__array_interface__["data"][0] - base for t in y_node.inputs]
    assert starts == [0, 16 * 16 * 4, 48 * 16 * 4]
    assert any(r.status == "in place" and r.launches == 0 for r in fn.fusion_report())


def test_nested_concats_fused_into_one_group_are_placed(rng):
    x, parts, _, a, ref = _branches(rng, c=(16, 16, 32))
    y = hf.ops.concat([hf.ops.concat(parts[:2], axis=1), parts[2]], axis=1)
    fn = hf.compile(hf.trace([y * 3.0, y - 1.0], [x]), target="cpu")
    assert len(_placed_ops(fn)) == 1
    _check(fn, [a], [ref * 3, ref - 1])


def test_a_saved_graph_keeps_the_placement(rng, tmp_path):
    x, _, y, a, ref = _branches(rng)
    fn = hf.compile(hf.trace([y * 2.0, y + 1.0], [x]), target="cpu")
    assert _placed_ops(fn)
    loaded = hf.load_compiled(fn.save(str(tmp_path / "saved")))
    for got, want in zip(loaded(a), [ref * 2, ref + 1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _compile(outputs, inputs):
    return hf.compile(hf.trace(outputs, inputs), target="cpu")


def test_what_must_run_as_before(rng):
    x, parts, y, a, ref = _branches(rng)
    # the concat's output is returned: it is written by fresh arrays each call
    fn = _compile([y, y * 2.0], [x])
    assert _placed_ops(fn) == []
    _check(fn, [a], [ref, ref * 2])
    # an input is returned
    fn = _compile([y * 2.0, y + 1.0, parts[0]], [x])
    assert _placed_ops(fn) == []
    _check(fn, [a], [ref * 2, ref + 1, ref[:, :16]])
    # an input is a graph input
    s = hf.symbol((1, 8, 4, 4), "float32")
    z = hf.ops.concat([parts[0], s], axis=1)
    sa = rng.standard_normal((1, 8, 4, 4)).astype(np.float32)
    fn = _compile([z * 2.0, z + 1.0], [x, s])
    assert _placed_ops(fn) == []
    want = np.concatenate([ref[:, :16], sa], 1)
    _check(fn, [a, sa], [want * 2, want + 1])
    # one input: a reshape (a view, left to fusion; here unfused, so it is alone)
    fn = hf.compile(hf.trace([hf.ops.reshape(parts[0], [16, 16]) * 2.0], [x]), target="cpu", fusion=False)
    assert _placed_ops(fn) == [] and placement(_task(hf.ops.reshape(parts[0], [16, 16]))) == (0,)
    _check(fn, [a], [ref[:, :16].reshape(16, 16) * 2])
    # the same input twice
    z = hf.ops.concat([parts[0], parts[0]], axis=1)
    fn = _compile([z * 2.0, z + 1.0], [x])
    assert _placed_ops(fn) == []
    want = np.concatenate([ref[:, :16]] * 2, 1)
    _check(fn, [a], [want * 2, want + 1])


def test_an_input_is_placed_in_one_concat_only(rng):
    x, parts, y, a, ref = _branches(rng)
    z = hf.ops.concat([parts[1], parts[2]], axis=1)
    fn = _compile([y * 2.0, y + 1.0, z * 2.0, z + 1.0], [x])
    assert len(_placed_ops(fn)) == 1
    _check(fn, [a], [ref * 2, ref + 1, ref[:, 16:] * 2, ref[:, 16:] + 1])


def test_runs_off_the_alignment_are_not_placed(rng):
    """3 x 3 images of 16 channels: the second run starts 576 bytes in, a cache line
    multiple; 5 channels put it at 180 bytes, which is not."""
    x, _, y, a, ref = _branches(rng, c=(16, 16), hw=(3, 3))
    assert len(_placed_ops(_compile([y * 2.0, y + 1.0], [x]))) == 1
    x, _, y, a, ref = _branches(rng, c=(5, 16), hw=(3, 3))
    fn = _compile([y * 2.0, y + 1.0], [x])
    assert _placed_ops(fn) == []
    _check(fn, [a], [ref * 2, ref + 1])


def test_an_input_read_after_the_concat_keeps_its_bytes(rng):
    """parts[0] is read again at the end, long after the concat's two readers: the
    joined buffer lives until then, whatever the buffers in between are."""
    x, parts, y, a, ref = _branches(rng)
    z = hf.symbol((1, 64, 4, 4, 8, 2), "float32")
    h = _sum_last(hf.ops.unsqueeze(y * 2.0, [4])) + _sum_last(hf.ops.unsqueeze(y + 1.0, [4]))
    big = _sum_last(z + hf.ops.unsqueeze(h, [4, 5]))  # 32 KB born after the concat's readers
    h = _sum_last(big)
    late = parts[0] * 3.0 + hf.ops.slice(h, [0], [16], [1])
    fn = _compile([late], [x, z])
    assert _placed_ops(fn)
    za = rng.standard_normal((1, 64, 4, 4, 8, 2)).astype(np.float32)
    hh = (za.astype(np.float64) + (3 * ref + 1)[..., None, None]).sum((-1, -2))
    _check(fn, [a, za], [ref[:, :16] * 3 + hh[:, :16]])


def test_the_joined_buffer_is_live_from_the_first_input_on(rng):
    """parts[0] is written first; a large intermediate of the second branch is born and
    dies before the concat. Its bytes must not be the joined buffer's."""
    x0, z = hf.symbol((1, 16, 4, 4, 3), "float32"), hf.symbol((1, 48, 4, 4, 3, 5), "float32")
    p0 = _sum_last(x0)
    p1 = _sum_last(_sum_last(z))
    y = hf.ops.concat([p0, p1], axis=1)
    fn = _compile([y * 2.0, y + 1.0], [x0, z])
    assert _placed_ops(fn)
    a0 = rng.standard_normal((1, 16, 4, 4, 3)).astype(np.float32)
    az = rng.standard_normal((1, 48, 4, 4, 3, 5)).astype(np.float32)
    cat = np.concatenate([a0.astype(np.float64).sum(-1), az.astype(np.float64).sum((-1, -2))], 1)
    _check(fn, [a0, az], [cat * 2, cat + 1])


def test_an_input_never_lends_its_bytes_to_an_in_place_output(rng):
    """A convolution whose residual is a concat input that dies at it would write in
    place of that input; the input lives inside the concat's buffer, so it does not."""
    x = hf.symbol((1, 16, 8, 8), "float32")
    a = hf.ops.max_pool2d(x, 3, 1, 1)
    b = hf.ops.avg_pool2d(x, 3, 1, 1)
    y = hf.ops.concat([a, b], axis=1)
    w = (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)
    r = hf.ops.conv2d(x, hf.constant(w)) + a
    fn = _compile([y * 2.0, y + 1.0, r], [x])
    assert _placed_ops(fn) and not any(inp == a.name for _, inp, _ in fn.in_place)
    xa = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    pad = np.pad(xa.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    mx = np.max([pad[:, :, i:i + 8, j:j + 8] for i in range(3) for j in range(3)], axis=0)
    zp = np.pad(xa.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    av = np.sum([zp[:, :, i:i + 8, j:j + 8] for i in range(3) for j in range(3)], axis=0) / 9
    cat = np.concatenate([mx, av], 1)
    conv = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), xa.astype(np.float64))
    _check(fn, [xa], [cat * 2, cat + 1, conv + mx])
