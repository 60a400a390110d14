"""The example plugin (examples/plugin_template, installed by requirements-dev.txt):
found through its entry point, its operators reachable from hf.ops, its template's
every candidate correct on odd and prime shapes, its rewrite rule applied, and what it
must refuse refused."""
from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.extension import plugin_host
from hidet_framework.graph import ShapeError

SHAPES = [(1, 1), (37, 29), (3, 1031), (64, 1), (17, 256)]


@pytest.fixture
def cpu():
    target = driver.host_target()
    if target is None:
        pytest.skip("no usable CPU backend (gcc) here")
    return target


def test_the_plugin_is_installed_and_loaded_through_its_entry_point():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="hidet_framework")}
    assert eps.get("rowops") == "hidet_plugin_rowops"
    (info,) = [i for i in plugin_host().report() if i.name == "rowops"]
    assert info.status == "loaded" and info.error is None and info.distribution == "hidet-plugin-rowops"
    assert info.registered == {"operators": ("rowops.rowsum", "rowops.scale"), "templates": ("rowops.rowsum_cpu",),
                               "passes": ("rowops.sum_of_scaled",)}


def test_prefixed_operators_are_reachable_and_check_their_inputs():
    assert hf.ops.rowops.rowsum is hf.ops["rowops.rowsum"]
    assert "rowsum" in dir(hf.ops.rowops)
    with pytest.raises(ShapeError, match="rowops.rowsum: expected a 2-D tensor"):
        hf.ops.rowops.rowsum(hf.symbol([4], "float32"))
    with pytest.raises(TypeError, match="factor must be a number"):
        hf.ops.rowops.scale(hf.symbol([4], "float32"), "2")


@pytest.mark.parametrize("shape", SHAPES)
def test_every_template_candidate_matches_float64(cpu, shape, rng):
    from hidet_framework.runtime.compiled_task import compile_scheduled

    template = plugin_host().templates["rowops.rowsum_cpu"]
    x = hf.symbol(shape, "float32")
    op = hf.ops.rowops.rowsum(x).producer
    assert template.applies(op.task, op.attributes)
    space = template.bounded_space(cpu.target, 2)
    assert len(space) >= 2 and space[0] == template.bounded_space(cpu.target, 0)[0]
    for params in space:
        compiled = compile_scheduled(op.task, template.build(op.task, op.attributes, params, cpu.target),
                                     cpu.backend, cpu.target)
        xv = rng.standard_normal(shape).astype(np.float32)
        out = np.full(shape[:1], np.nan, np.float32)  # poisoned: every row must be written
        compiled.run([xv], [out])
        np.testing.assert_allclose(out, xv.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5 * shape[1] ** 0.5,
                                   err_msg=str(params))


def test_the_template_refuses_other_dtypes():
    template = plugin_host().templates["rowops.rowsum_cpu"]
    op = hf.ops.rowops.rowsum(hf.symbol([3, 5], "float16")).producer
    assert not template.applies(op.task, op.attributes)


@pytest.mark.parametrize("target", ["cpu", "evaluator"])
def test_graph_rewrite_and_compile(target, rng, request):
    if target == "cpu":
        request.getfixturevalue("cpu")
    x = hf.symbol([37, 29], "float32")
    y = hf.ops.rowops.rowsum(hf.ops.rowops.scale(x, 3.0))
    fn = hf.compile(hf.trace(y, inputs=[x]), target=target, space=1 if target == "cpu" else 0)
    assert fn.pass_stats["rewrite_patterns"]["applied"] == 1  # the rule fired once
    (group,) = fn.fusion_report()
    assert group.operators == "[rowops.rowsum] -> rowops.scale" and group.status == "fused"
    if target == "cpu":
        assert group.scheduled_by == "rowops.rowsum_cpu"  # the template, not the auto-scheduler
    xv = rng.standard_normal((37, 29)).astype(np.float32)
    np.testing.assert_allclose(fn(xv), 3.0 * xv.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def test_the_rule_leaves_other_producers_alone():
    from hidet_plugin_rowops.rewrite import sum_of_scaled

    x = hf.symbol([3, 5], "float32")
    assert sum_of_scaled(hf.ops.rowops.rowsum(x).producer) is None
    assert sum_of_scaled(hf.ops.rowops.rowsum(hf.ops.relu(x)).producer) is None
