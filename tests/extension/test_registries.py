"""Registrar semantics: provenance, duplicate and invalid names, attribute checks, the
typed lookups (templates_for, passes_at, backend_for), and rebuild on plugin change."""
from __future__ import annotations

import types

import attrs
import pytest

from hidet_framework.extension import MissingBackendError, hookimpl, points
from hidet_framework.extension.registry import NameCollisionError


@attrs.frozen
class Template:
    """What registration checks of a template (the tuner is not run here)."""

    operator: str
    target: str
    name: str = "test.template"
    version: str = "1"
    priority: int = 0

    def space(self, target, level):
        return [{}]

    def build(self, task, attributes, params, target):
        raise AssertionError("not built in registry tests")


@attrs.frozen
class Rule:
    """A graph rewrite rule's shape."""

    point: str = points.GRAPH_REWRITE
    op_names: tuple = ("scale",)

    def rewrite(self, op):
        return None


@attrs.frozen
class IRPass:
    """A lowering pass's shape."""

    point: str
    name: str = "test.pass"

    def run(self, module, ctx):
        return module


def plugin(**hooks) -> object:
    """A plugin object whose hooks are the given functions of `register`. (A class
    instance: pluggy keeps plugins in hashed containers, so no SimpleNamespace.)"""
    namespace = {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()}
    return type("TestPlugin", (), namespace)()


def test_registrations_record_their_provider(isolated_plugin_host, fakes):
    host = isolated_plugin_host
    with host.temporary_plugin(fakes.backend_plugin(fakes.Backend("alpha")), name="p1"):
        assert list(host.backends) == ["alpha"]
        assert host.backends.provider("alpha") == "p1"
        assert host.backends["alpha"].name == "alpha"
    assert "alpha" not in host.backends  # unregistering rebuilt the registries


def test_duplicate_name_names_both_plugins_and_neither_takes_it(isolated_plugin_host, fakes):
    """Issue 12 item 7: the order plugins load in never decides who serves a name."""
    host = isolated_plugin_host
    first, second = fakes.Backend("same"), fakes.Backend("same")
    with host.temporary_plugin(fakes.backend_plugin(first), name="first"), \
            host.temporary_plugin(fakes.backend_plugin(second, fakes.Backend("extra")), name="second"):
        with pytest.raises(NameCollisionError, match="'first' and 'second'.*priority=1"):
            host.backends["same"]
        assert "same" not in host.backends and list(host.backends) == ["extra"]
        assert host.backends.provider("extra") == "second"  # the rest of each plugin still works
        info = {i.name: i for i in host.report()}
        for name in ("first", "second"):
            assert info[name].status == "conflict" and info[name].error is None
            assert "'first' and 'second'" in info[name].conflicts[0]


def test_same_plugin_registering_a_name_twice_is_rejected(isolated_plugin_host):
    def twice(register):
        register("x", object())
        register("x", object())

    with isolated_plugin_host.temporary_plugin(plugin(register_operators=twice), name="twice"):
        (info,) = isolated_plugin_host.report()
        assert "plugin 'twice' registered it twice" in info.error.message
        assert len(isolated_plugin_host.operators) == 0


@pytest.mark.parametrize("bad_name", ["", "   ", None, 42, b"bytes"])
def test_non_str_or_empty_names_are_rejected(isolated_plugin_host, bad_name):
    with isolated_plugin_host.temporary_plugin(
            plugin(register_frontends=lambda register: register(bad_name, object())), name="bad"):
        (info,) = isolated_plugin_host.report()
        assert info.error.type == "RegistrationError"
        assert "non-empty str" in info.error.message and "'bad'" in info.error.message


@pytest.mark.parametrize("hook, obj, complaint", [
    ("register_backends", object(), "target_kinds"),
    ("register_backends", types.SimpleNamespace(target_kinds="cpu"), "tuple"),
    ("register_templates", types.SimpleNamespace(target="cpu"), "operator (the name"),
    ("register_templates", types.SimpleNamespace(operator="matmul"), "target (the target kind"),
    ("register_passes", object(), "point (one of graph_rewrite, before_lowering"),
])
def test_objects_missing_what_the_core_reads_are_rejected(isolated_plugin_host, hook, obj, complaint):
    with isolated_plugin_host.temporary_plugin(plugin(**{hook: lambda register: register("n", obj)})):
        (info,) = isolated_plugin_host.report()
        assert complaint in info.error.message


def test_backend_classes_are_rejected_in_favour_of_instances(isolated_plugin_host, fakes):
    with isolated_plugin_host.temporary_plugin(
            plugin(register_backends=lambda register: register("cls", fakes.Backend))):
        (info,) = isolated_plugin_host.report()
        assert "register an instance" in info.error.message


def test_templates_for_filters_by_operator_and_target_in_registration_order(isolated_plugin_host):
    def templates(register):
        register("mm.cpu", Template("matmul", "cpu"))
        register("mm.cuda.simt", Template("matmul", "cuda"))
        register("mm.cuda.tc", Template("matmul", "cuda"))
        register("sum.cuda", Template("reduce", "cuda"))

    with isolated_plugin_host.temporary_plugin(plugin(register_templates=templates)):
        reg = isolated_plugin_host.templates
        assert [t.target for t in reg.templates_for("matmul", "cpu")] == ["cpu"]
        assert reg.templates_for("matmul", "cuda") == [reg["mm.cuda.simt"], reg["mm.cuda.tc"]]
        target = types.SimpleNamespace(kind="cuda")  # a Target stands for its kind
        operator = types.SimpleNamespace(name="reduce")  # an operator for its name
        assert reg.templates_for(operator, target) == [reg["sum.cuda"]]
        assert reg.templates_for("conv2d", "cuda") == []


def test_passes_at_lists_the_passes_of_one_point(isolated_plugin_host):
    def passes(register):
        register("fold", Rule(op_names=("add",)))
        register("simplify", IRPass(points.AFTER_LOWERING))
        register("cse", Rule(op_names=("mul",)))

    with isolated_plugin_host.temporary_plugin(plugin(register_passes=passes)):
        reg = isolated_plugin_host.passes
        assert reg.passes_at(points.GRAPH_REWRITE) == [reg["fold"], reg["cse"]]
        assert reg.passes_at(points.AFTER_LOWERING) == [reg["simplify"]]
        assert reg.passes_at("nowhere") == []


def test_registries_are_read_only_and_explain_unknown_names(isolated_plugin_host):
    with isolated_plugin_host.temporary_plugin(
            plugin(register_operators=lambda register: register("add", object()))):
        ops = isolated_plugin_host.operators
        with pytest.raises(TypeError):
            ops["sub"] = object()  # type: ignore[index]
        with pytest.raises(KeyError, match="registered: add"):
            ops["sub"]
        with pytest.raises(KeyError):
            ops.provider("sub")


def test_backend_for_serves_a_kind_and_explains_a_missing_one(isolated_plugin_host, fakes):
    host = isolated_plugin_host
    with host.temporary_plugin(fakes.backend_plugin(fakes.Backend("c_backend", "cpu", "cpu-omp"))):
        assert host.backend_for("cpu-omp").name == "c_backend"
        assert host.backend_for(types.SimpleNamespace(kind="cpu")).name == "c_backend"
        with pytest.raises(MissingBackendError) as excinfo:
            host.backend_for("cuda")
    message = str(excinfo.value)
    assert "no backend serves target 'cuda'" in message
    assert "install hidet-plugin-cuda (pip install -e plugins/hidet_plugin_cuda)" in message
    with pytest.raises(MissingBackendError, match="registered backends serve: nothing"):
        host.backend_for("fpga")


def test_a_hook_reading_the_registries_gets_a_clear_error(isolated_plugin_host):
    host = isolated_plugin_host
    with host.temporary_plugin(plugin(register_operators=lambda register: host.operators)):
        (info,) = host.report()
        assert info.error.type == "RuntimeError" and "inside a registration hook" in info.error.message


def test_misspelled_hook_fails_at_registration(isolated_plugin_host):
    misspelled = plugin(register_backend=lambda register: None)
    with pytest.raises(Exception, match="register_backend"):
        isolated_plugin_host.register(misspelled, name="typo")
    assert isolated_plugin_host.report() == []


def test_register_returns_the_name_and_rejects_a_taken_one(isolated_plugin_host, fakes):
    host = isolated_plugin_host
    with host.temporary_plugin(fakes.backend_plugin(fakes.Backend("a")), name="mine") as name:
        assert name == "mine"
        with pytest.raises(ValueError, match="already registered"):
            host.register(fakes.backend_plugin(fakes.Backend("b")), name="mine")
    with pytest.raises(KeyError):
        host.unregister("mine")
