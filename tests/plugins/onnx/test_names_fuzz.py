"""Names from a model are data: whatever the inputs, initializers, nodes and
intermediate values are called (quotes, newlines, C comment markers, format braces,
non-ASCII, empty), the model imports, compiles and computes the right values, and
every name reaching the graph is a plain identifier."""
from __future__ import annotations

import re

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import hidet_framework as hf
from hidet_plugin_onnx.names import sanitize

HOSTILE = st.text(alphabet=st.sampled_from(list("aZ_09 \"'\\\n\t*/{}%;#<>()[]$.-é\u2028\x00")), min_size=0,
                  max_size=24)


@given(HOSTILE)
def test_sanitize_gives_identifiers(name):
    out = sanitize(name)
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", out) and len(out) <= 48


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(HOSTILE, min_size=5, max_size=5, unique=True).filter(lambda ns: all(ns[:4])))
def test_hostile_names_compile_and_compute(names, build, reference):
    x, w, mid, y, node = names
    weight = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    model = build([helper.make_node("Mul", [x, w], [mid], name=node),
                   helper.make_node("Relu", [mid], [y], name=node + "\n/*r*/")],
                  [(x, TensorProto.FLOAT, [2, 3])], [(y, TensorProto.FLOAT, [2, 3])], {w: weight})
    graph = hf.load(model)
    for t in list(graph.inputs) + [o for op in graph.nodes for o in op.outputs] + graph.constants():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t.name), t.name
    fn = hf.compile(graph, target="cpu")
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_array_equal(fn(a), reference(model, {x: a})[0])
