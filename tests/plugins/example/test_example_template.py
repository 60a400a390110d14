"""The example plugin's extra matmul template: it is discovered through
``register_templates``, joins the tuner's candidates next to the bundled packed
template, computes correct results, and wins only where it measures faster.

Honesty note: the "measures faster" part uses a *fake* `measure` (run times made up
per template and shape: the simple kernel is told to be fast on a tiny shape and slow
on a large one), because real timings on a shared two-core CI machine are too noisy
to assert on. Correctness of every candidate of the simple template is checked for
real, on the CPU, against float64 numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_plugin_example
import hidet_plugin_matmul
from hidet_framework.tuner import TuningCache, tune
from hidet_plugin_matmul.operators import matmul_task


@pytest.fixture
def host_with_both(isolated_plugin_host):
    with isolated_plugin_host.temporary_plugin(hidet_plugin_matmul, "matmul"), \
            isolated_plugin_host.temporary_plugin(hidet_plugin_example, "example"):
        yield isolated_plugin_host


def _target():
    from hidet_framework.backend.contract import Target

    return Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 << 10,
                                    "l2_bytes": 1 << 20, "l3_bytes": 32 << 20})


def test_example_template_is_discovered_next_to_the_bundled_one(host_with_both):
    names = {t.name for t in host_with_both.templates.templates_for("matmul", "cpu")}
    assert {"matmul.cpu_packed", "example.matmul_simple_rows"} <= names


def _fake_measure(tiny_m):
    """Simple template: 1 ms on the tiny shape, 1 s otherwise; packed: 10 ms always."""
    def measure(scheduled, runs, prepared=None):
        simple = scheduled.source.startswith("example.")
        m = scheduled.module.functions[scheduled.launches[0].function].params[0].type.shape[-2]
        seconds = (1e-3 if m == tiny_m else 1.0) if simple else 1e-2
        return [seconds] * runs
    return measure


@pytest.mark.parametrize("shape,winner", [((4, 4, 4), "example.matmul_simple_rows"),
                                          ((256, 256, 256), "matmul.cpu_packed")])
def test_example_wins_only_where_it_measures_faster(host_with_both, tmp_path, shape, winner):
    m, n, k = shape
    task, attributes = matmul_task((m, k), (k, n), "float32")
    templates = host_with_both.templates.templates_for("matmul", "cpu")
    result = tune(task, attributes, "matmul", _target(), templates, 1, prepare=lambda s: None,
                  measure=_fake_measure(4), cache=TuningCache(str(tmp_path)), workers=1)
    assert result.candidates == sum(len(t.bounded_space(_target(), 1)) for t in templates)
    assert result.template.name == winner


@pytest.mark.parametrize("a_shape,b_shape", [((1, 1), (1, 1)), ((7, 5), (5, 13)), ((3, 17, 19), (19, 23)),
                                             ((2, 9, 31), (2, 31, 3))])
def test_simple_template_is_correct(a_shape, b_shape):
    from hidet_plugin_cpu import CpuBackend
    from hidet_plugin_example.simple_matmul import SimpleRowMatmul
    from hidet_framework.runtime.compiled_task import compile_scheduled

    backend = CpuBackend()
    if not backend.availability().usable:
        pytest.skip(backend.availability().reason)
    template, rng = SimpleRowMatmul(), np.random.default_rng()
    task, attributes = matmul_task(a_shape, b_shape, "float32")
    target = backend.detect_target()
    for params in template.space(target, 2):
        compiled = compile_scheduled(task, template.build(task, attributes, params, target), backend, target)
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        ref = np.matmul(a.astype(np.float64), b)
        c = np.full(ref.shape, np.nan, np.float32)
        compiled.run([a, b], [c])
        assert np.max(np.abs(c - ref)) / np.max(np.abs(ref)) < 1e-5, params
