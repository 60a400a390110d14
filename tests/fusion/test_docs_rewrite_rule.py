"""The rewrite-rule example of docs/plugins.md (section 4), run as written: the code
block is read from the document, executed with the rowops operators as `scale` and
`rowsum` and a `register` that keeps what it is given, and the rule it registers is
checked at its point, on a graph, against numpy. A rule registered at a point that
does not exist is refused when its plugin loads, naming the known points. The
operator and template blocks of sections 2 and 3 run as written too, through the
page's own compile-and-run block."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import points

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _rule_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if "def sum_of_scaled" in b]
    return block


def _registered_by_the_example(with_ops: bool = True) -> dict:
    """What the example registers; `scale` and `rowsum` are only called by the rule."""
    registered: dict = {}
    ops = {}
    if with_ops:
        pytest.importorskip("hidet_plugin_rowops")
        ops = {"scale": hf.ops.rowops.scale, "rowsum": hf.ops.rowops.rowsum}
    namespace = {**ops, "register": lambda name, obj: registered.setdefault(name, obj)}
    exec(compile(_rule_example(), f"{DOC}:sum_of_scaled", "exec"), namespace)
    return registered


def test_the_documented_rule_runs_at_its_point_and_keeps_the_value(rng):
    from hidet_framework.graph.passes.base import GraphPassContext
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

    (name, rule), = _registered_by_the_example().items()
    assert name == "rowops.sum_of_scaled" and rule.point == points.GRAPH_REWRITE
    x = hf.symbol([5, 7], "float32")
    graph = hf.trace(hf.ops.rowops.rowsum(hf.ops.rowops.scale(x, 3.0)), inputs=[x])
    ctx = GraphPassContext(rewrite_rules=[rule])
    rewritten = rewrite_patterns(graph, ctx)
    assert ctx.stats["rewrite_patterns"]["applied"] == 1
    assert [op.name for op in rewritten.nodes] == ["rowops.rowsum", "rowops.scale"]
    fn = hf.compile(rewritten, target="evaluator")
    xv = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(fn(xv), 3.0 * xv.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("point", ["graph.before_fusion", "before_fusion", "graph_rewrites"])
def test_the_documented_rule_at_an_unknown_point_is_refused_naming_the_points(point, isolated_plugin_host):
    import attrs

    from hidet_framework.extension import hookimpl

    (rule,) = _registered_by_the_example(with_ops=False).values()
    misplaced = attrs.evolve(rule, point=point)

    class Plugin:
        @staticmethod
        @hookimpl
        def register_passes(register):
            register("mine.sum_of_scaled", misplaced)

    with isolated_plugin_host.temporary_plugin(Plugin, name="mine"):
        (info,) = isolated_plugin_host.report()
        assert "mine.sum_of_scaled" not in isolated_plugin_host.passes.passes_at(points.GRAPH_REWRITE)
    assert info.status == "failed" and info.error.type == "RegistrationError"
    message = info.error.message
    assert "mine.sum_of_scaled" in message and repr(point) in message
    assert all(p in message for p in points.PASS_POINTS), message


def _block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def test_the_documented_operator_and_template_run_as_written(rng, tmp_path):
    """Sections 2 and 3 of docs/plugins.md, executed as written: the operator block
    gives `rowsum`, the template block `RowsumTemplate`, whose every candidate (built
    and run the way the page's third block says) matches float64 on poisoned outputs."""
    from hidet_framework import driver

    cpu = driver.host_target()
    if cpu is None:
        pytest.skip("no usable CPU backend (gcc) here")
    import importlib.util

    # script functions are parsed from their source file: the two blocks become one module
    source = tmp_path / "plugins_md_sections_2_3.py"
    source.write_text(_block("def rowsum(x: Tensor)") + "\n\n" + _block("class RowsumTemplate(Template)"))
    spec = importlib.util.spec_from_file_location("plugins_md_sections_2_3", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace = vars(module)
    run_block = _block("compiled = compile_scheduled(")
    template = namespace["RowsumTemplate"]()
    for shape in [(1, 1), (37, 29), (5, 1031)]:
        op = namespace["rowsum"](hf.symbol(shape, "float32")).producer
        assert template.applies(op.task, op.attributes)
        for params in template.space(cpu.target, 1):
            x_array = rng.standard_normal(shape).astype(np.float32)
            y_array = np.full(shape[:1], np.nan, np.float32)  # poisoned
            scope = {"task": op.task, "template": template, "attrs": op.attributes, "params": params,
                     "backend": cpu.backend, "target": cpu.target, "x_array": x_array, "y_array": y_array}
            exec(compile(run_block, f"{DOC}:compile_scheduled", "exec"), scope)
            np.testing.assert_allclose(y_array, x_array.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4,
                                       err_msg=str(params))
