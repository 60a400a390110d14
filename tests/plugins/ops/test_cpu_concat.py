"""The CPU concat template of rows along the joined axis (cpu_concat.py): against numpy's
concatenate (a copy: exact) on odd and prime sizes, every axis before the last, blocked
and NCHW shapes, an input of extent 0, int32; outputs poisoned with NaN first; the
level-0 default where it applies (an injective tree around a concat stays one fused
auto-scheduled kernel, exact), and refused (the auto-scheduler's kernel) where the last dimension is longer
than a vector, where the run after the axis is shorter than MIN_VECTORS vectors, and
where the inputs' dtypes differ."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import plugin_host
from hidet_plugin_ops.cpu_concat import MIN_VECTORS, CpuConcatRows, applies_to


def _lanes():
    return int(plugin_host().backend_for("cpu").detect_target().get("vector_bits", 256)) // 32


def _sources(fn):
    return [getattr(t.scheduled, "source", "") for t in fn.tasks]


CASES = [  # input shapes (the lanes L stand for the machine's float32 vector), axis
    ([(1, 4, 7, 5, "L"), (1, 3, 7, 5, "L"), (1, 1, 7, 5, "L")], 1),      # channel-blocked
    ([(2, 3, 5, 3, "L"), (2, 2, 5, 3, "L")], 1),                         # two items
    ([(3, 5, 7, "L"), (2, 5, 7, "L")], 0),
    ([(2, 3, 11, 5, "L"), (2, 3, 2, 5, "L"), (2, 3, 0, 5, "L"), (2, 3, 5, 5, "L")], 2),  # an input of extent 0
    ([(1, 13, 11, 7), (1, 2, 11, 7)], 1),                                # NCHW with a narrow plane
]


def _shape(s, lanes):
    return tuple(lanes if d == "L" else d for d in s)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_against_numpy_with_the_outputs_poisoned(rng, case, dtype):
    shapes, axis = case
    lanes = _lanes()
    shapes = [_shape(s, lanes) for s in shapes]
    xs = [hf.symbol(s, dtype) for s in shapes]
    fn = hf.compile(hf.trace(hf.ops.concat(xs, axis=axis), xs), target="cpu", space=0)
    assert _sources(fn) == ["ops.concat_cpu_rows"]
    arrays = [(rng.standard_normal(s) * 100).astype(dtype) for s in shapes]
    ref = np.concatenate(arrays, axis=axis)
    out = np.full(ref.shape, np.nan if dtype == "float32" else -7, dtype)
    fn(*arrays, out=out)
    np.testing.assert_array_equal(out, ref)


def test_injective_neighbours_fuse_into_one_kernel(rng):
    """relu(concat([a + b, c])): one launch, exact: the fusion engine merges an injective
    tree into one auto-scheduled kernel (the template serves a concat alone: Inception's,
    between convolutions)."""
    lanes = _lanes()
    sa, sc = (1, 3, 5, 9, lanes), (1, 2, 5, 9, lanes)
    a, b, c = (hf.symbol(s, "float32") for s in (sa, sa, sc))
    fn = hf.compile(hf.trace(hf.ops.relu(hf.ops.concat([a + b, c], axis=1)), [a, b, c]), target="cpu", space=0)
    assert fn.num_launches == 1 and _sources(fn) == ["auto"], _sources(fn)
    va, vb, vc = (rng.standard_normal(s).astype(np.float32) for s in (sa, sa, sc))
    out = np.full((1, 5, 5, 9, lanes), np.nan, np.float32)
    fn(va, vb, vc, out=out)
    np.testing.assert_array_equal(out, np.maximum(np.concatenate([va + vb, vc], axis=1), 0))


def test_refused_where_the_auto_kernel_does_as_well(rng):
    lanes = _lanes()
    long_last = [(1, 3, 5, lanes + 1), (1, 2, 5, lanes + 1)]            # the last dimension past a vector
    short_run = [(2, 3, 1, MIN_VECTORS - 1, lanes), (2, 4, 1, MIN_VECTORS - 1, lanes)]   # run after the axis short
    enough = [(2, 3, 1, MIN_VECTORS, lanes), (2, 4, 1, MIN_VECTORS, lanes)]
    last_axis = [(2, 5, lanes), (2, 5, lanes)]
    verdicts = []
    for shapes, axis in ((long_last, 1), (short_run, 1), (enough, 1), (last_axis, 2)):
        xs = [hf.symbol(s, "float32") for s in shapes]
        y = hf.ops.concat(xs, axis=axis)
        verdicts.append(CpuConcatRows().applies(y.producer.task, dict(y.producer.attributes)))
    assert verdicts == [False, False, True, False]
    mixed = [hf.symbol((1, 3, 5, lanes), "float32"), hf.symbol((1, 2, 5, lanes), "float16")]
    y = hf.ops.concat(mixed, axis=1)
    target = plugin_host().backend_for("cpu").detect_target()
    assert not applies_to(y.producer.task, dict(y.producer.attributes), target)
    fn = hf.compile(hf.trace(y, mixed), target="cpu", space=0)
    assert _sources(fn) == ["auto"]
    va, vb = rng.standard_normal((1, 3, 5, lanes)).astype(np.float32), rng.standard_normal((1, 2, 5, lanes))
    np.testing.assert_array_equal(fn(va, vb.astype(np.float16)),
                                  np.concatenate([va, vb.astype(np.float16).astype(np.float32)], axis=1))


@pytest.mark.parametrize("bits", [256, 512])
def test_the_build_target_decides_not_this_machine(bits):
    """A last dimension of 16 floats (64 bytes) is one AVX-512 vector but two AVX2 ones: the
    template applies for a 512-bit target and not for a 256-bit one, whatever this machine
    is (the driver asks `applies_on` with the build's target; it used to read this
    machine's, so a cross-compile target's width was ignored)."""
    from hidet_framework.backend.contract import Target
    from hidet_framework.driver.scheduling import applicable_templates, schedule
    from hidet_framework.runtime.compile_target import CompileTarget

    backend = plugin_host().backend_for("cpu")
    native = backend.detect_target()
    target = CompileTarget("cpu", backend, Target("cpu", native.arch, {**native.properties, "vector_bits": bits}))
    xs = [hf.symbol((2, 3, 1, MIN_VECTORS, 16), "float32"), hf.symbol((2, 4, 1, MIN_VECTORS, 16), "float32")]
    y = hf.ops.concat(xs, axis=1)
    task, attributes = y.producer.task, dict(y.producer.attributes)
    chosen = [type(t) for t in applicable_templates(task, "concat", target, attributes)]
    assert (CpuConcatRows in chosen) == (bits == 512), chosen
    assert CpuConcatRows().applies_on(task, attributes, target.target) == (bits == 512)
    if bits == 256:  # nothing else schedules a concat: the auto-scheduler's kernel
        assert getattr(schedule(task, "concat", target, 0, attributes)[0], "source", "") == "auto"
