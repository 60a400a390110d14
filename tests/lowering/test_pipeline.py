"""Pipelines: the standard order, plugin passes at the named points, `lower`."""
from __future__ import annotations

import pytest

from hidet_framework.extension import hookimpl
from hidet_framework.ir import BufferStoreStmt, ForStmt, Function, module, tensor_type, var
from hidet_framework.lowering.pass_base import FunctionPass
from hidet_framework.lowering.pass_context import PassContext
from hidet_framework.lowering.pipeline import (
    INSERTION_POINTS, PassRegistration, lower, lowering_pipeline, plugin_passes,
)

STANDARD = ["flatten_tensor_slice", "lower_task_mapping", "flatten_tensor_index", "simplify_expr",
            "unroll_loops", "insert_bounds_check", "simplify_expr", "widen_index_arithmetic"]


def names(passes):
    return [p.name for p in passes]


class Marker(FunctionPass):
    def __init__(self, name):
        self.name = name

    def run_on_function(self, fn, ctx):
        return fn


def passes_plugin(*registrations):
    class Plugin:
        @staticmethod
        @hookimpl
        def register_passes(register):
            for name, obj in registrations:
                register(name, obj)
    return Plugin()


def test_standard_order_without_plugins(isolated_plugin_host):
    assert names(lowering_pipeline("cpu")) == STANDARD


def test_plugin_passes_go_to_their_points(isolated_plugin_host):
    plugin = passes_plugin(
        ("early", PassRegistration(point="before_lowering", pass_=Marker("early"))),
        ("late", PassRegistration(point="before_codegen", pass_=Marker("late"))),
        ("mid", PassRegistration(point="after_lowering", pass_=Marker("mid"))),
        ("cuda_only", PassRegistration(point="after_lowering", pass_=Marker("cuda_only"), target_kinds=("cuda",))),
    )
    with isolated_plugin_host.temporary_plugin(plugin):
        cpu = names(lowering_pipeline("cpu"))
        cuda = names(lowering_pipeline("cuda"))
    expected = STANDARD
    at = expected.index("flatten_tensor_index") + 1
    assert cpu == ["early"] + expected[:at] + ["mid"] + expected[at:] + ["late"]
    assert cuda == ["early"] + expected[:at] + ["mid", "cuda_only"] + expected[at:] + ["late"]


def test_a_pass_with_a_point_attribute_registers_directly(isolated_plugin_host):
    direct = Marker("direct")
    direct.point = "before_codegen"
    with isolated_plugin_host.temporary_plugin(passes_plugin(("direct", direct))):
        assert plugin_passes("before_codegen", "cpu") == [direct]


def test_registration_is_validated():
    with pytest.raises(ValueError):
        PassRegistration(point="nowhere", pass_=Marker("x"))
    with pytest.raises(TypeError):
        PassRegistration(point="before_codegen", pass_=object())
    with pytest.raises(ValueError, match="unknown pipeline point"):
        plugin_passes("nowhere", "cpu")
    assert INSERTION_POINTS == ("before_lowering", "after_lowering", "before_codegen")


def test_lower_runs_the_standard_pipeline(isolated_plugin_host):
    a, i, j = var("a", tensor_type("float32", [4, 4])), var("i"), var("j")
    body = ForStmt(i, 4, ForStmt(j, 4, BufferStoreStmt(a, (i, j), a[j, i])))
    lowered = lower(module("m", [Function("f", (a,), body)]), "cpu", PassContext())
    assert str(lowered.functions["f"].body).splitlines()[-1].strip() == "a[((i * 4) + j)] = a[((j * 4) + i)]"
