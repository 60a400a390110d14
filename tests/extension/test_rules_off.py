"""``extension.rules_off(*names)``: for a with-block, the rewrite rules registered under
those names are left out of the engine's rules (nested blocks add up, leaving a block
restores what was off, also when it raises; another thread is not affected); a name no rule is registered under is a
ValueError naming the registered rules, and switches nothing off. End to end (a
compiled graph with the rule off), see tests/fusion/test_bench_fusion.py and
tests/fusion/test_horizontal_matmul.py."""
from __future__ import annotations

import threading

import pytest

from hidet_framework.extension import (RewriteRule, hookimpl, registered_rule_names, rules_off,
                                       rules_switched_off)

NAMES = ("mine.a", "mine.b", "mine.c")


def _none(op):
    return None


RULES = [RewriteRule(name, ("add",), _none) for name in NAMES]


class Plugin:
    @staticmethod
    @hookimpl
    def register_passes(register):
        for rule in RULES:
            register(rule.name, rule)


@pytest.fixture
def host(isolated_plugin_host):
    with isolated_plugin_host.temporary_plugin(Plugin, name="mine"):
        yield isolated_plugin_host


def _running() -> list[str]:
    from hidet_framework.graph.passes.rewrite_patterns import registered_rules

    return [r.name for r in registered_rules()]


def test_the_named_rules_are_off_in_the_block_and_back_after_it(host):
    assert registered_rule_names() == list(NAMES) and _running() == list(NAMES)
    with rules_off("mine.b"):
        assert _running() == ["mine.a", "mine.c"] and rules_switched_off() == {"mine.b"}
        with rules_off("mine.a"):  # adds to what is off
            assert _running() == ["mine.c"] and rules_switched_off() == {"mine.a", "mine.b"}
        assert _running() == ["mine.a", "mine.c"]
    assert _running() == list(NAMES) and rules_switched_off() == frozenset()
    with pytest.raises(KeyError), rules_off("mine.c"):
        assert _running() == ["mine.a", "mine.b"]
        raise KeyError("inside the block")
    assert _running() == list(NAMES)


def test_an_unknown_name_is_an_error_naming_the_registered_rules(host):
    with pytest.raises(ValueError) as info:
        with rules_off("mine.a", "mine.typo"):
            pytest.fail("the block must not run")
    message = str(info.value)
    assert "'mine.typo'" in message and all(name in message for name in NAMES), message
    assert "'mine.a'" not in message.split(";")[0]  # only the unknown one is called unknown
    assert rules_switched_off() == frozenset() and _running() == list(NAMES)


def test_another_thread_is_not_affected(host):
    seen = []
    with rules_off("mine.a"):
        thread = threading.Thread(target=lambda: seen.append(_running()))
        thread.start()
        thread.join()
        assert _running() == ["mine.b", "mine.c"]
    assert seen == [list(NAMES)]
