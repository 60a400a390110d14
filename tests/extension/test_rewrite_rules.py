"""`RewriteRule` (hidet_framework/extension/rules.py), the one descriptor of a graph
rewrite rule: its fields and defaults, what it refuses when built, and that one
registered by a plugin passes the pass contract and reaches the rewrite engine."""
from __future__ import annotations

import attrs
import pytest

from hidet_framework.extension import RewriteRule, hookimpl, points


def _none(op):
    return None


def test_fields_and_defaults():
    rule = RewriteRule("mine.rule", ["add", "mul"], _none)
    assert (rule.name, rule.op_names, rule.rewrite) == ("mine.rule", ("add", "mul"), _none)
    assert rule.point == points.GRAPH_REWRITE and rule.phase == 1 and rule.needs_uses is False
    assert rule.targets is None and rule.description == ""
    assert rule.rewrite("op") is None  # a function field, not a bound method
    full = RewriteRule("r", ("add",), _none, phase=0, needs_uses=True, targets=["cpu"], description="d")
    assert (full.phase, full.needs_uses, full.targets, full.description) == (0, True, ("cpu",), "d")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        rule.phase = 0  # type: ignore[misc]


def test_only_name_op_names_and_rewrite_are_positional():
    with pytest.raises(TypeError):
        RewriteRule("r", ("add",), _none, points.GRAPH_REWRITE)  # type: ignore[misc]


@pytest.mark.parametrize("field", ["op_names", "targets"])
def test_a_string_where_a_tuple_of_names_belongs_is_refused(field):
    kwargs = {"op_names": ("add",), "targets": None, field: "matmul"}
    with pytest.raises(TypeError, match=f"{field} is a tuple .* not the string 'matmul'"):
        RewriteRule("r", kwargs["op_names"], _none, targets=kwargs["targets"])


def test_a_registered_rule_reaches_the_engine(isolated_plugin_host):
    from hidet_framework.graph.passes.rewrite_patterns import registered_rules

    rule = RewriteRule("mine.rule", ("add",), _none)

    class Plugin:
        @staticmethod
        @hookimpl
        def register_passes(register):
            register(rule.name, rule)

    with isolated_plugin_host.temporary_plugin(Plugin, name="mine"):
        (info,) = isolated_plugin_host.report()
        assert info.status == "loaded", info.error
        assert registered_rules() == [rule]
