"""Issue 12 items 7 and 9: a plugin's BaseException is its own error, names are taken
from another plugin only by an explicit, visible priority, and a misspelled name in
HIDET_FRAMEWORK_PLUGINS is reported."""
from __future__ import annotations

import json
import types

import pytest
from click.testing import CliRunner

from hidet_framework.cli import main as cli
from hidet_framework.extension import hookimpl, reset_plugin_host
from hidet_framework.extension.manager import UnknownPluginNameWarning
from hidet_framework.extension.registry import NameCollisionError, RegistrationError


def _module(name: str, **hooks) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(module, hook, hookimpl(fn))
    return module


def _operators(*names, priority=None):
    def register_operators(register):
        for name in names:
            if priority is None:
                register(name, object())
            else:
                register(name, object(), priority=priority)
    return register_operators


def _exiting_module_host(make_host, monkeypatch, fakes, exc: BaseException):
    import importlib.abc
    import importlib.metadata
    import importlib.util
    import sys

    class Loader(importlib.abc.Loader):  # a module whose body raises `exc`
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            raise exc

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname == "_hidet_test_exiting":
                return importlib.util.spec_from_loader(fullname, Loader())
            return None

    finder = Finder()
    sys.meta_path.insert(0, finder)
    monkeypatch.delitem(sys.modules, "_hidet_test_exiting", raising=False)
    host = make_host(good=fakes.backend_plugin(fakes.Backend("cpu")))
    eps = list(host._manager._entry_points())
    eps.append(importlib.metadata.EntryPoint("exiting", "_hidet_test_exiting", "hidet_framework"))
    host._manager._entry_points = lambda: eps
    return host, lambda: sys.meta_path.remove(finder)


@pytest.mark.parametrize("exc", [SystemExit(3), GeneratorExit("odd")])
def test_base_exception_at_import_is_the_plugins_error(make_host, monkeypatch, fakes, exc):
    host, undo = _exiting_module_host(make_host, monkeypatch, fakes, exc)
    try:
        info = {i.name: i for i in host.report()}
    finally:
        undo()
    assert info["exiting"].status == "failed" and info["exiting"].error.phase == "import"
    assert info["exiting"].error.type == type(exc).__name__
    assert info["good"].status == "loaded" and "cpu" in host.backends


def test_keyboard_interrupt_at_import_still_interrupts(make_host, monkeypatch, fakes):
    host, undo = _exiting_module_host(make_host, monkeypatch, fakes, KeyboardInterrupt())
    try:
        with pytest.raises(KeyboardInterrupt):
            host.report()
    finally:
        undo()


def test_sys_exit_in_a_hook_is_contained_and_the_cli_exits_0(make_host, fakes):
    def exits(register):
        register("half", object())
        raise SystemExit("bye")

    host = make_host(quitter=_module("quitter", register_operators=exits),
                     good=fakes.backend_plugin(fakes.Backend("cpu")))
    reset_plugin_host(host)
    try:
        result = CliRunner().invoke(cli, ["plugins", "--json"])
    finally:
        reset_plugin_host()
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["quitter"]["status"] == "failed"
    assert rows["quitter"]["error"]["type"] == "SystemExit" and "sys.exit('bye')" in rows["quitter"]["error"]["message"]
    assert "half" not in host.operators and "cpu" in host.backends


def test_a_higher_priority_overrides_visibly(make_host):
    host = make_host(base=_module("base", register_operators=_operators("matmul", "conv")),
                     zzz=_module("zzz", register_operators=_operators("matmul", priority=10)))
    assert host.operators.provider("matmul") == "zzz"
    assert host.operators.provider("conv") == "base"  # the overridden plugin keeps the rest
    entry = host.operators.entry("matmul")
    assert entry.priority == 10 and entry.overrides == ("base",)
    info = {i.name: i for i in host.report()}
    assert info["zzz"].overrides == ("operators: matmul (priority 10, over 'base')",)
    assert info["base"].status == info["zzz"].status == "loaded"
    reset_plugin_host(host)
    try:
        table = CliRunner().invoke(cli, ["plugins"], env={"COLUMNS": "250"})
        as_json = CliRunner().invoke(cli, ["plugins", "--json"])
    finally:
        reset_plugin_host()
    assert table.exit_code == 0 and "overrides" in table.output
    rows = {r["name"]: r for r in json.loads(as_json.output)}
    assert rows["zzz"]["overrides"] == ["operators: matmul (priority 10, over 'base')"]


def test_a_lower_priority_loses_whatever_the_load_order(make_host):
    host = make_host(aaa=_module("aaa", register_operators=_operators("matmul", priority=-1)),
                     zzz=_module("zzz", register_operators=_operators("matmul")))
    assert host.operators.provider("matmul") == "zzz"


def test_equal_priorities_collide_and_the_cli_names_both(make_host):
    host = make_host(aaa=_module("aaa", register_operators=_operators("matmul")),
                     hidet_plugin_matmul=_module("m", register_operators=_operators("matmul", "batch_matmul")))
    with pytest.raises(NameCollisionError, match="'aaa' and 'hidet_plugin_matmul'"):
        host.operators["matmul"]
    assert host.operators.provider("batch_matmul") == "hidet_plugin_matmul"
    reset_plugin_host(host)
    try:
        table = CliRunner().invoke(cli, ["plugins"], env={"COLUMNS": "250"})
    finally:
        reset_plugin_host()
    assert table.exit_code == 0 and "conflict" in table.output and "neither gets it" in table.output


@pytest.mark.parametrize("priority", ["10", 1.5, True])
def test_priority_must_be_an_int(make_host, priority):
    host = make_host(p=_module("p", register_operators=_operators("x", priority=priority)))
    (info,) = host.report()
    assert info.status == "failed" and "priority=" in info.error.message
    assert info.error.type == RegistrationError.__name__


def test_misspelled_allow_list_name_is_warned_about(make_host, fakes, monkeypatch):
    host = make_host(hidet_plugin_cpu=fakes.backend_plugin(fakes.Backend("cpu")))
    monkeypatch.setenv("HIDET_FRAMEWORK_PLUGINS", "hidet_plugin_cpuu")
    with pytest.warns(UnknownPluginNameWarning, match="'hidet_plugin_cpuu'.*did you mean 'hidet_plugin_cpu'"):
        host.report()


def test_misspelled_block_list_name_is_warned_about(make_host, fakes, monkeypatch):
    host = make_host(example=fakes.backend_plugin(fakes.Backend("ex")))
    monkeypatch.setenv("HIDET_FRAMEWORK_BLOCK_PLUGINS", "exmaple")
    with pytest.warns(UnknownPluginNameWarning, match="HIDET_FRAMEWORK_BLOCK_PLUGINS names 'exmaple'"):
        host.report()
