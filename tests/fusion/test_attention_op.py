"""The ``attention`` operator (hidet_plugin_ops/attention.py) and its CPU template
(cpu_attention.py): every candidate against a float64 numpy reference on odd and
prime sizes with poisoned outputs (masks added and selected, broadcast batch axes,
a fully masked row under ``zero_nan``, float16 operands with float32 statistics); the
compute definition on the evaluator; and what the operator refuses."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.extension import plugin_host
from hidet_framework.graph import ShapeError


def reference(q, kt, v, mask=None, scale=1.0, kind="none", fill=-np.inf, zero_nan=False):
    q, kt, v = (np.asarray(a, np.float64) for a in (q, kt, v))
    s = scale * (q @ kt)
    if kind == "add":
        s = s + np.asarray(mask, np.float64)
    elif kind == "select":
        s = np.where(mask, s, fill)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    if zero_nan:
        p = np.where(np.isnan(p), 0.0, p)
    return p @ v


# (q shape, kt shape, v shape, mask shape or None, mask kind, scale, zero_nan)
CASES = {
    "bert_like": ((1, 3, 11, 8), (1, 3, 8, 11), (1, 3, 11, 8), (1, 1, 1, 11), "add", 0.125, True),
    "prime_no_mask": ((2, 13, 5), (2, 5, 17), (2, 17, 3), None, "none", 1.0, False),
    "broadcast_batch": ((2, 3, 7, 4), (1, 3, 4, 9), (2, 1, 9, 5), (2, 1, 7, 9), "add", 0.5, False),
    "causal_select": ((3, 6, 4), (3, 4, 6), (3, 6, 2), (6, 6), "select", 0.7, True),
    "matrices_one_row": ((1, 31), (31, 1), (1, 1), None, "none", 2.0, False),
    # long enough for the register tiles: whole tiles, a narrower one, then scalar columns
    "long_rows": ((2, 3, 9, 37), (2, 3, 37, 70), (2, 3, 70, 35), (1, 1, 9, 70), "add", 0.3, False),
    "causal_long": ((2, 19, 16), (2, 16, 19), (2, 19, 17), (19, 19), "select", 0.25, True),
}


def _operands(name, rng, dtype=np.float32):
    qs, ks, vs, ms, kind, scale, zero_nan = CASES[name]
    arrays = [rng.standard_normal(s).astype(dtype) for s in (qs, ks, vs)]
    mask = None
    if kind == "add":
        mask = rng.standard_normal(ms).astype(dtype)
    elif kind == "select":
        mask = np.tril(np.ones(ms, dtype=bool))
        mask[..., 2, :] = False  # a fully masked row: NaN probabilities, zeros under zero_nan
    return arrays, mask, dict(scale=scale, mask_kind=kind if ms else None, zero_nan=zero_nan)


def _op(arrays, mask, kwargs, dtype="float32"):
    symbols = [hf.symbol(a.shape, dtype) for a in arrays]
    mask_t = None
    if mask is not None:
        mask_t = hf.symbol(mask.shape, "bool" if mask.dtype == bool else dtype)
        symbols.append(mask_t)
    fill = {"fill": -np.inf} if kwargs["mask_kind"] == "select" else {}
    y = hf.ops.attention(*symbols[:3], mask_t, **kwargs, **fill)
    return y, symbols


@pytest.fixture
def cpu():
    target = driver.host_target()
    if target is None:
        pytest.skip("no usable CPU backend (gcc) here")
    return target


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("kv_copy", [True, False], ids=["kv-copied", "kv-gathered"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_cpu_candidate_matches_float64(name, kv_copy, isa, cpu, rng, monkeypatch):
    """Both ways the kernel reads K and V: a contiguous copy per batch entry (while it
    fits CACHE_LIMIT, then on register tiles of the machine's vectors, or of AVX2's)
    and element loads in the inner loops (larger ones)."""
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_framework.backend.contract import Target
    from hidet_plugin_ops import cpu_attention

    target = cpu.target
    if isa == "avx2":
        if int(target.get("vector_bits", 0)) < 256:
            pytest.skip("the machine has no AVX2")
        target = Target("cpu", target.arch, {**target.properties, "vector_bits": 256})
    if not kv_copy:
        monkeypatch.setattr(cpu_attention, "CACHE_LIMIT", 0)

    template = plugin_host().templates["ops.attention_cpu"]
    arrays, mask, kwargs = _operands(name, rng)
    y, _ = _op(arrays, mask, kwargs)
    op = y.producer
    assert template.applies(op.task, op.attributes)
    space = template.bounded_space(target, 2)
    assert len(space) == 6 and {p["rows"] for p in space} == {1, 4, 8}  # prime M: partial row blocks
    want = reference(*arrays, mask, kind=kwargs["mask_kind"] or "none", scale=kwargs["scale"],
                     zero_nan=kwargs["zero_nan"])
    for params in space:
        compiled = compile_scheduled(op.task, template.build(op.task, op.attributes, params, target),
                                     cpu.backend, target)
        out = np.full(y.shape, np.nan, np.float32)  # poisoned: every element must be written
        compiled.run(arrays + ([] if mask is None else [mask]), [out])
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=str(params))
        if kwargs["mask_kind"] == "select":
            assert np.all(out[..., 2, :] == 0.0)  # the fully masked row


@pytest.mark.parametrize("target", ["evaluator", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_compiled_operator_matches_float64(name, target, fx, rng):
    fx.need_target(target)
    arrays, mask, kwargs = _operands(name, rng)
    y, symbols = _op(arrays, mask, kwargs)
    fn = hf.compile(hf.trace(y, inputs=symbols), target=target)
    got = fn(*arrays, *([] if mask is None else [mask]))
    want = reference(*arrays, mask, kind=kwargs["mask_kind"] or "none", scale=kwargs["scale"],
                     zero_nan=kwargs["zero_nan"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float16_operands_keep_float32_statistics(cpu, rng):
    """Scores of 1e4 in float16 (max 65504): exp(s - max) and the row sum in float16
    would lose the row; in float32 the result is the float64 one rounded to float16."""
    arrays, _, _ = _operands("prime_no_mask", rng, np.float16)
    arrays[0] = (arrays[0] * 40).astype(np.float16)
    y, symbols = _op(arrays, None, dict(scale=1.0, mask_kind=None, zero_nan=False), "float16")
    fn = hf.compile(hf.trace(y, inputs=symbols), target="cpu")
    got = fn(*arrays)
    assert got.dtype == np.float16
    want = reference(*arrays)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("shapes, mask, message", [
    (((2, 5, 4), (2, 3, 7), (2, 7, 6)), None, "inner extents differ"),
    (((2, 5, 4), (2, 4, 7), (2, 6, 6)), None, "inner extents differ"),
    (((5,), (5, 7), (7, 6)), None, "at least 2 axes"),
    (((2, 5, 4), (3, 4, 7), (2, 7, 6)), None, "broadcast"),
    (((2, 5, 4), (2, 4, 7), (2, 7, 6)), ((2, 5, 8), "float32"), "does not broadcast onto the scores"),
    (((1, 5, 4), (1, 4, 7), (1, 7, 6)), ((3, 5, 7), "float32"), "does not broadcast onto the scores"),
    (((2, 5, 4), (2, 4, 7), (2, 7, 6)), ((5, 7), "bool"), "must be float"),
])
def test_the_operator_refuses_what_does_not_fit(shapes, mask, message):
    q, kt, v = (hf.symbol(s, "float32") for s in shapes)
    m = hf.symbol(*mask) if mask else None
    with pytest.raises(ShapeError, match=message):
        hf.ops.attention(q, kt, v, m)


def test_the_operator_refuses_mixed_dtypes_and_a_missing_mask():
    q, kt, v = hf.symbol((5, 4), "float32"), hf.symbol((4, 7), "float16"), hf.symbol((7, 6), "float32")
    with pytest.raises(ShapeError, match="one float dtype"):
        hf.ops.attention(q, kt, v)
    kt = hf.symbol((4, 7), "float32")
    with pytest.raises(ValueError, match="mask_kind 'add' with no mask"):
        hf.ops.attention(q, kt, v, mask_kind="add")
    with pytest.raises(ShapeError, match="must be bool"):
        hf.ops.attention(q, kt, v, hf.symbol((5, 7), "float32"), mask_kind="select")
