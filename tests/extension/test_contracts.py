"""What registration checks: pass points from one list (both pass runners read it),
the template and backend contracts (a malformed one is refused when its plugin loads,
naming the plugin and what is missing), and prefixed operator names in ``hf.ops``."""
from __future__ import annotations

import types

import pytest

import hidet_framework as hf
from hidet_framework.extension import hookimpl, points
from hidet_framework.schedule import Template


def plugin(**hooks) -> object:
    namespace = {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()}
    return type("TestPlugin", (), namespace)()


def refusal(host, **hooks) -> str:
    """The error message of a plugin made of `hooks`, registered as ``mine``."""
    with host.temporary_plugin(plugin(**hooks), name="mine"):
        (info,) = host.report()
        assert info.status == "failed" and info.error.type == "RegistrationError"
        assert sum(len(v) for v in info.registered.values()) == 0  # it contributes nothing
        return info.error.message


class Rule:
    point, op_names = points.GRAPH_REWRITE, ("add",)

    def rewrite(self, op):
        return None


# ------------------------------------------------------------------ pass points
def test_both_pass_runners_read_the_points_module():
    from hidet_framework.graph.passes.rewrite_patterns import REWRITE_POINT
    from hidet_framework.lowering.pipeline import INSERTION_POINTS

    assert REWRITE_POINT == points.GRAPH_REWRITE
    assert INSERTION_POINTS == points.IR_POINTS
    assert points.PASS_POINTS == (points.GRAPH_REWRITE, points.BEFORE_LOWERING, points.AFTER_LOWERING,
                                  points.BEFORE_CODEGEN)


@pytest.mark.parametrize("point", ["graph.before_fusion", "graph_rewrites", "", None])
def test_a_pass_at_an_unknown_point_is_refused_naming_plugin_and_points(isolated_plugin_host, point):
    rule = Rule()
    rule.point = point
    message = refusal(isolated_plugin_host, register_passes=lambda register: register("mine.rule", rule))
    assert "'mine'" in message and "'mine.rule'" in message
    assert all(p in message for p in points.PASS_POINTS)


def test_a_rule_at_the_graph_point_reaches_the_rewrite_engine(isolated_plugin_host):
    from hidet_framework.graph.passes.rewrite_patterns import registered_rules

    rule = Rule()
    with isolated_plugin_host.temporary_plugin(plugin(register_passes=lambda register: register("mine.rule", rule))):
        assert registered_rules() == [rule]


def test_point_and_object_must_agree(isolated_plugin_host):
    class NotAPass:
        point = points.AFTER_LOWERING

    message = refusal(isolated_plugin_host, register_passes=lambda register: register("mine.p", NotAPass()))
    assert "run()" in message and "name" in message
    no_rewrite = types.SimpleNamespace(point=points.GRAPH_REWRITE, op_names="add")
    message = refusal(isolated_plugin_host, register_passes=lambda register: register("mine.r", no_rewrite))
    assert "rewrite()" in message and "op_names" in message


# ------------------------------------------------------------------ templates
def test_a_template_written_without_the_base_class_fields_is_refused(isolated_plugin_host):
    class PageTemplate:  # operator, target and build, as the old plugin guide showed
        operator, target = "matmul", "cpu"

        def build(self, task, attributes, params, target):
            raise AssertionError("never built")

    message = refusal(isolated_plugin_host, register_templates=lambda register: register("mine.mm", PageTemplate()))
    assert "'mine'" in message and "'mine.mm'" in message
    for missing in ("name (", "version (", "priority (", "space()"):
        assert missing in message
    assert "build()" not in message and "operator (" not in message


def test_a_template_subclass_must_name_itself_and_a_complete_one_registers(isolated_plugin_host):
    class Unnamed(Template):
        operator, target = "matmul", "cpu"

        def space(self, target, level):
            return [{}]

        def build(self, task, attributes, params, target):
            raise AssertionError("never built")

    message = refusal(isolated_plugin_host, register_templates=lambda register: register("mine.mm", Unnamed()))
    assert "name (" in message and "space()" not in message
    named = type("Named", (Unnamed,), {"name": "mine.mm"})()
    with isolated_plugin_host.temporary_plugin(plugin(register_templates=lambda register: register("mine.mm", named))):
        assert isolated_plugin_host.templates.templates_for("matmul", "cpu") == [named]
    message = refusal(isolated_plugin_host, register_templates=lambda register: register("mine.mm", Unnamed))
    assert "an instance" in message


# ------------------------------------------------------------------ backends
def test_a_backend_missing_methods_is_refused_listing_them(isolated_plugin_host):
    half = types.SimpleNamespace(name="half", target_kinds=("half",), availability=lambda: True)
    message = refusal(isolated_plugin_host, register_backends=lambda register: register("half", half))
    assert "'mine'" in message
    for missing in ("detect_target()", "codegen()", "build()", "load()", "auto_schedule_kernel()", "device (",
                    "preference ("):
        assert missing in message


# ------------------------------------------------------------------ prefixed operator names
def test_prefixed_operator_names_are_reachable_from_hf_ops(isolated_plugin_host):
    def rowsum(x):
        return x

    def register_operators(register):
        register("mine.rowsum", rowsum)
        register("mine.deep.colsum", rowsum)

    with isolated_plugin_host.temporary_plugin(plugin(register_operators=register_operators)):
        assert hf.ops["mine.rowsum"] is rowsum
        assert hf.ops.mine.rowsum is rowsum and hf.ops.mine["rowsum"] is rowsum
        assert hf.ops.mine.deep.colsum is rowsum
        assert "mine" in dir(hf.ops) and dir(hf.ops.mine) == ["deep", "rowsum"]
        with pytest.raises(AttributeError, match="'mine.nope'"):
            hf.ops.mine.nope
        with pytest.raises(KeyError, match="'mine.none'"):
            hf.ops["mine.none"]
        with pytest.raises(AttributeError, match="known operators: mine.deep.colsum, mine.rowsum"):
            hf.ops.theirs
