"""The CPU templates candidate by candidate: every space-1 candidate of a few kernel
forms (rows with a lane tail, column tiles with a partial tile, softmax, norms, scans),
run on NaN-poisoned outputs and compared with float64 numpy; spaces come from the
target alone."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target


def _cpu_target():
    from hidet_framework.extension import plugin_host

    return plugin_host().backend_for("cpu").detect_target()


def test_space_follows_the_vector_width_and_cores_only():
    from hidet_plugin_reduce.cpu_rows import cpu_space

    avx2 = Target("cpu", "x86_64", {"cores": 4, "vector_bits": 256})
    avx512 = Target("cpu", "x86_64", {"cores": 2, "vector_bits": 512})
    assert cpu_space(avx2, 0) == [{"workers": 4, "lanes": 16, "order": "block"}]
    assert cpu_space(avx512, 0) == [{"workers": 2, "lanes": 32, "order": "block"}]
    assert {c["lanes"] for c in cpu_space(avx512, 1)} == {16, 32, 64} and len(cpu_space(avx512, 2)) == 6


CASES = [  # (builder, numpy reference)
    (lambda x: hf.ops.reduce_sum(x, -1), lambda e: e.sum(-1)),
    (lambda x: hf.ops.reduce_max(x, 0, keepdims=True), lambda e: e.max(0, keepdims=True)),
    (lambda x: hf.ops.softmax(x, -1), lambda e: np.exp(e - e.max(-1, keepdims=True))
     / np.exp(e - e.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    (lambda x: hf.ops.rms_norm(x, hf.constant(np.linspace(0.5, 1.5, x.shape[-1], dtype=np.float32))),
     lambda e: e / np.sqrt((e * e).mean(-1, keepdims=True) + 1e-5) * np.linspace(0.5, 1.5, e.shape[-1])),
    (lambda x: hf.ops.cumsum(x, 0, reverse=True), lambda e: np.flip(np.cumsum(np.flip(e, 0), 0), 0)),
    (lambda x: hf.ops.argmin(x, -1), lambda e: e.argmin(-1)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_space1_candidate_on_poisoned_outputs(case, rand):
    from hidet_framework.runtime.compiled_task import compile_scheduled

    build, reference = CASES[case]
    x = hf.symbol((23, 71), "float32")  # 71 = 2 lane blocks of 32 + a tail of 7; 23 columns: a partial tile
    y = build(x)
    op = y.producer
    target = _cpu_target()
    a = rand(x.shape)
    inputs = [a] + [t.storage for t in op.inputs[1:]]
    expected = reference(a.astype(np.float64))
    from hidet_framework.extension import plugin_host

    backend = plugin_host().backend_for("cpu")
    (template,) = plugin_host().templates.templates_for(op.name, "cpu")
    assert template.applies(op.task, op.attributes)
    for params in template.space(target, 1):
        compiled = compile_scheduled(op.task, template.build(op.task, op.attributes, params, target), backend, target)
        out = np.full(y.shape, -7 if y.dtype.is_integer() else np.nan, np.dtype(y.dtype.numpy_name))
        outs = [compiled.device.from_numpy(out)]
        compiled.run([compiled.device.from_numpy(v) for v in inputs], outs)
        got = compiled.device.to_numpy(outs[0])
        if y.dtype.is_integer():
            np.testing.assert_array_equal(got, expected, err_msg=str(params))
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=str(params))
