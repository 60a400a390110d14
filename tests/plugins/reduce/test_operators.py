"""Every operator of the reduce plugin against a float64 numpy reference, through
``hf.compile`` (templates where they apply, the auto-scheduler elsewhere): fresh random
inputs, odd and prime sizes, every axis and axis block, keepdims both ways, float16 and
bfloat16 inputs. Each test compiles one graph holding many operators, so the builds of
one test run together."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf

SHAPE = (7, 13, 5)
AXES = [0, 1, 2, -1, (0, 1), (1, 2), (0, 2), None, ()]

NUMPY = {
    "sum": lambda a, ax, kd: np.sum(a, axis=ax, keepdims=kd),
    "mean": lambda a, ax, kd: np.mean(a, axis=ax, keepdims=kd),
    "max": lambda a, ax, kd: np.max(a, axis=ax, keepdims=kd),
    "min": lambda a, ax, kd: np.min(a, axis=ax, keepdims=kd),
    "prod": lambda a, ax, kd: np.prod(a, axis=ax, keepdims=kd),
    "l2": lambda a, ax, kd: np.sqrt(np.sum(a * a, axis=ax, keepdims=kd)),
    "sum_square": lambda a, ax, kd: np.sum(a * a, axis=ax, keepdims=kd),
}


def _numpy_axes(axes):
    if axes == ():
        return None  # handled by the caller: nothing reduced
    return axes


def _reference(kind, a, axes, keepdims):
    a = a.astype(np.float64)
    if axes == ():
        return {"l2": np.abs(a), "sum_square": a * a}.get(kind, a)
    return NUMPY[kind](a, _numpy_axes(axes), keepdims)


def _draw(rand, kind, shape, dtype):
    if kind == "prod":  # magnitudes near 1 keep a product of 91 factors representable
        sign = np.where(rand(shape, "float32") < 0, -1.0, 1.0)
        return (rand(shape, "float32", 0.8, 1.25) * sign).astype(dtype)
    return rand(shape, dtype)


@pytest.mark.parametrize("kind", list(NUMPY))
def test_reduce_every_axis_and_keepdims(kind, target, rand, check):
    x = hf.symbol(SHAPE, "float32")
    a = _draw(rand, kind, SHAPE, "float32")
    # every axis set without keepdims, and keepdims on a middle axis, a non-contiguous
    # pair, everything and nothing (each case is one build: CI time)
    cases = [(axes, False) for axes in AXES] + [(axes, True) for axes in (1, (0, 2), None, ())]
    outs = [getattr(hf.ops, f"reduce_{kind}")(x, axes, keepdims=keepdims) for axes, keepdims in cases]
    results, _ = check.run_graph(outs, [x], [a], target)
    tol = 2e-4 if kind == "prod" else None
    for (axes, keepdims), got in zip(cases, results):
        check.assert_close(got, _reference(kind, a, axes, keepdims), "float32", tol, f"{kind} axes={axes} kd={keepdims}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduce_half_inputs_accumulate_in_float32(dtype, target, rand, check):
    from hidet_framework.ir.dtypes import data_type

    shape = (5, 257)  # long enough that float16 accumulation would be visibly off
    x = hf.symbol(shape, dtype)
    a32 = rand(shape, "float32", 0.9, 1.1)  # a product of 257 stays a normal float16
    kinds = list(NUMPY)
    outs = [getattr(hf.ops, f"reduce_{k}")(x, axes) for k in kinds for axes in (-1, 0)]
    feed = a32.astype(np.float16) if dtype == "float16" else _to_bfloat16(a32)
    results, _ = check.run_graph(outs, [x], [feed], target)
    exact = feed.astype(np.float64) if dtype == "float16" else _bf16_values(feed)
    k = 0
    for kind in kinds:
        for axes in (-1, 0):
            ref = _reference(kind, exact, axes, False)
            if kind == "prod":  # 257 factors: compare in log space
                got = _as_float(results[k], dtype)
                np.testing.assert_allclose(np.log(np.abs(got)), np.log(np.abs(ref)), atol=0.05, err_msg=kind)
            else:
                # bfloat16 comes back as its bits (uint16), or as ml_dtypes' bfloat16 where numpy has it
                assert results[k].dtype.name in (data_type(dtype).numpy_name, dtype), (kind, results[k].dtype)
                check.assert_close(_as_float(results[k], dtype).astype(np.float32), ref, "float32",
                                   check.TOLERANCES[dtype], f"{kind} axes={axes}")
            k += 1


def _to_bfloat16(a32):
    from hidet_framework.ir.dtypes import data_type

    bits = (a32.astype(np.float32).view(np.uint32) + 0x8000) >> 16
    return bits.astype(np.uint16).view(np.dtype(data_type("bfloat16").numpy_name))


def _bf16_values(b):
    return (np.asarray(b).view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _as_float(out, dtype):
    return _bf16_values(out) if dtype == "bfloat16" else np.asarray(out, np.float64)


def test_integer_reductions(target, rand, check):
    x = hf.symbol((6, 11), "int32")
    a = rand((6, 11), "int32", -9, 9)
    outs = [hf.ops.reduce_sum(x, 1), hf.ops.reduce_max(x, 0, keepdims=True), hf.ops.reduce_min(x, None),
            hf.ops.reduce_sum_square(x, 0), hf.ops.argmax(x, 1), hf.ops.cumsum(x, 1)]
    results, _ = check.run_graph(outs, [x], [a], target)
    refs = [a.sum(1), a.max(0, keepdims=True), a.min(), (a * a).sum(0), a.argmax(1), np.cumsum(a, 1)]
    for got, ref in zip(results, refs):
        assert got.dtype in (np.int32, np.int64)
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_arg_every_axis(kind, target, rand, check):
    x = hf.symbol(SHAPE, "float32")
    a = rand(SHAPE, "float32")
    a[2, 3, :] = a[2, 3, 0]  # ties along the last axis
    cases = [(axis, kd, last) for axis in (0, 1, 2, -2) for kd in (False, True) for last in (False, True)]
    outs = [getattr(hf.ops, kind)(x, axis, keepdims=kd, select_last_index=last) for axis, kd, last in cases]
    results, _ = check.run_graph(outs, [x], [a], target)
    for (axis, kd, last), got in zip(cases, results):
        fn = np.argmax if kind == "argmax" else np.argmin
        ref = fn(np.flip(a, axis), axis=axis, keepdims=kd)
        ref = (a.shape[axis] - 1 - ref) if last else fn(a, axis=axis, keepdims=kd)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, ref, err_msg=f"{kind} axis={axis} keepdims={kd} last={last}")


def test_cumsum_every_axis_and_direction(target, rand, check):
    x = hf.symbol(SHAPE, "float32")
    a = rand(SHAPE, "float32")
    cases = [(axis, ex, rev) for axis in (0, 1, -1) for ex in (False, True) for rev in (False, True)]
    outs = [hf.ops.cumsum(x, axis, exclusive=ex, reverse=rev) for axis, ex, rev in cases]
    results, _ = check.run_graph(outs, [x], [a], target)
    e = a.astype(np.float64)
    for (axis, ex, rev), got in zip(cases, results):
        src = np.flip(e, axis) if rev else e
        ref = np.cumsum(src, axis) - (src if ex else 0)
        ref = np.flip(ref, axis) if rev else ref
        check.assert_close(got, ref, "float32", None, f"cumsum axis={axis} exclusive={ex} reverse={rev}")


def _softmax(e, axis):
    z = np.exp(e - e.max(axis, keepdims=True))
    return z / z.sum(axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_softmax_every_axis(dtype, target, rand, check):
    x = hf.symbol(SHAPE, dtype)
    a = rand(SHAPE, dtype, -6, 6)
    axes = (0, 1, 2, -1)
    outs = [hf.ops.softmax(x, ax) for ax in axes] + [hf.ops.log_softmax(x, ax) for ax in axes]
    results, _ = check.run_graph(outs, [x], [a], target)
    e = a.astype(np.float64)
    for k, ax in enumerate(axes):
        check.assert_close(results[k], _softmax(e, ax), dtype, None, f"softmax axis={ax}")
        check.assert_close(results[k + len(axes)], np.log(_softmax(e, ax)), dtype, None, f"log_softmax axis={ax}")


def _layer_norm(e, scale, bias, axis, eps, rms=False):
    axes = tuple(range(axis % e.ndim, e.ndim))
    if rms:
        return e / np.sqrt((e * e).mean(axes, keepdims=True) + eps) * scale
    mu, var = e.mean(axes, keepdims=True), e.var(axes, keepdims=True)
    out = (e - mu) / np.sqrt(var + eps) * scale
    return out + bias if bias is not None else out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layer_and_rms_norm(dtype, target, rand, check):
    shape = (3, 7, 37)
    x = hf.symbol(shape, dtype)
    s1, b1 = hf.symbol((37,), dtype), hf.symbol((37,), dtype)
    s2, b2 = hf.symbol((7, 37), dtype), hf.symbol((1, 37), dtype)
    outs = [hf.ops.layer_norm(x, s1, b1), hf.ops.layer_norm(x, s2, b2, axis=1, epsilon=1e-3),
            hf.ops.layer_norm(x, s1), hf.ops.rms_norm(x, s1), hf.ops.rms_norm(x, s2, axis=-2, epsilon=0.5)]
    arrays = [rand(t.shape, dtype) for t in (x, s1, b1, s2, b2)]
    results, _ = check.run_graph(outs, [x, s1, b1, s2, b2], arrays, target)
    e, es1, eb1, es2, eb2 = (a.astype(np.float64) for a in arrays)
    refs = [_layer_norm(e, es1, eb1, -1, 1e-5), _layer_norm(e, es2, eb2, 1, 1e-3), _layer_norm(e, es1, None, -1, 1e-5),
            _layer_norm(e, es1, None, -1, 1e-5, rms=True), _layer_norm(e, es2, None, -2, 0.5, rms=True)]
    for k, (got, ref) in enumerate(zip(results, refs)):
        check.assert_close(got, ref, dtype, None, f"norm case {k}")


def test_variance_is_accurate_at_a_large_mean(target, rand, check):
    """mean 1e4, std 1: E[x^2] - E[x]^2 in float32 would lose every digit of the variance."""
    shape = (9, 1031)
    x, s = hf.symbol(shape), hf.symbol((1031,))
    a = (1e4 + rand(shape, "float32", -1.7, 1.7)).astype(np.float32)
    scale = rand((1031,), "float32")
    results, _ = check.run_graph([hf.ops.layer_norm(x, s)], [x, s], [a, scale], target)
    ref = _layer_norm(a.astype(np.float64), scale.astype(np.float64), None, -1, 1e-5)
    # float32 holds 1e4 to +-5e-4, so x - mean carries that much: 2e-3 of a unit-std output
    check.assert_close(results[0], ref, "float32", 2e-3, "layer_norm at mean 1e4")


def _channel_ref(e, scale, bias, groups, eps):
    n, c = e.shape[:2]
    g = e.reshape(n, groups, -1)
    out = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(e.shape)
    shape = (1, c) + (1,) * (e.ndim - 2)
    return out * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_channel_norms(dtype, target, rand, check):
    shape = (2, 6, 5, 7)
    x = hf.symbol(shape, dtype)
    s, b, m, v = (hf.symbol((6,), dtype) for _ in range(4))
    x3 = hf.symbol((3, 4, 11), dtype)
    s3, b3 = hf.symbol((4,), dtype), hf.symbol((4,), dtype)
    outs = [hf.ops.batch_norm(x, s, b, m, v, epsilon=1e-3), hf.ops.instance_norm(x, s, b),
            hf.ops.group_norm(x, s, b, 3), hf.ops.group_norm(x, s, b, 6, epsilon=1e-2), hf.ops.group_norm(x3, s3, b3, 2)]
    arrays = [rand(t.shape, dtype) for t in (x, s, b, m, v, x3, s3, b3)]
    arrays[4] = np.abs(arrays[4]) + np.asarray(0.1, dtype)
    results, _ = check.run_graph(outs, [x, s, b, m, v, x3, s3, b3], arrays, target)
    e, es, eb, em, ev, e3, es3, eb3 = (a.astype(np.float64) for a in arrays)
    c = (1, 6, 1, 1)
    refs = [(e - em.reshape(c)) / np.sqrt(ev.reshape(c) + 1e-3) * es.reshape(c) + eb.reshape(c),
            _channel_ref(e, es, eb, 6, 1e-5), _channel_ref(e, es, eb, 3, 1e-5), _channel_ref(e, es, eb, 6, 1e-2),
            _channel_ref(e3, es3, eb3, 2, 1e-5)]
    for k, (got, ref) in enumerate(zip(results, refs)):
        check.assert_close(got, ref, dtype, None, f"channel norm case {k}")


def test_onnx_extras_bool_any_all_empty_sets_and_layer_norm_statistics(target, rand, check):
    """ReduceMax/Min of bools (any/all), reductions over an empty axis (the identity),
    and LayerNormalization's Mean and InvStdDev outputs."""
    b, e = hf.symbol((5, 7), "bool"), hf.symbol((3, 0, 4))
    x, s = hf.symbol((6, 3, 11)), hf.symbol((3, 11))
    y, mean, inv_std = hf.ops.layer_norm(x, s, axis=1, epsilon=1e-3, return_stats=True)
    outs = [y, mean, inv_std, hf.ops.reduce_max(b, 1), hf.ops.reduce_min(b, 0, keepdims=True)]
    empty = target == "cpu"  # zero-size buffers: checked where they cost no device allocation
    if empty:
        outs += [hf.ops.reduce_max(e, 1), hf.ops.reduce_min(e, 1), hf.ops.reduce_sum(e, 1, keepdims=True),
                 hf.ops.reduce_prod(e, 1)]
    ab = rand((5, 7)) < 0
    ab[0] = False
    ab[:, 3] = True
    ax, as_ = rand(x.shape), rand(s.shape)
    inputs, arrays = [b, x, s] + ([e] if empty else []), [ab, ax, as_] + ([np.zeros((3, 0, 4), np.float32)] if empty else [])
    got, _ = check.run_graph(outs, inputs, arrays, target)
    ex = ax.astype(np.float64)
    mu, var = ex.mean((1, 2), keepdims=True), ex.var((1, 2), keepdims=True)
    check.assert_close(got[0], (ex - mu) / np.sqrt(var + 1e-3) * as_, "float32")
    check.assert_close(got[1], mu, "float32")
    check.assert_close(got[2], 1 / np.sqrt(var + 1e-3), "float32")
    np.testing.assert_array_equal(got[3], ab.any(1))
    np.testing.assert_array_equal(got[4], ab.all(0, keepdims=True))
    if empty:
        assert np.all(got[5] == -np.inf) and np.all(got[6] == np.inf) and got[5].shape == (3, 4)
        np.testing.assert_array_equal(got[7], np.zeros((3, 1, 4)))
        np.testing.assert_array_equal(got[8], np.ones((3, 4)))
