"""Fixtures for the plugin-seam tests: fake plugins served through fake entry points,
so no test here depends on what happens to be installed."""
from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any, Callable

import pytest

from hidet_framework.extension import ExtensionManager, PluginHost, hookimpl
from hidet_framework.backend.contract import Availability


class FakeBackend:
    """The backend contract's shape (what registration checks) for registry and lookup
    tests; it is never usable, so nothing calls the rest."""

    device = None
    preference = 0

    def __init__(self, name: str, *target_kinds: str):
        self.name = name
        self.target_kinds = target_kinds or (name,)

    def availability(self) -> Availability:
        return Availability(False, "fake backend")

    def _unusable(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a fake backend is never usable")

    detect_target = codegen = build = load = auto_schedule_kernel = _unusable


def backend_plugin(*backends: FakeBackend, module_name: str = "fake") -> types.ModuleType:
    """A plugin module whose register_backends registers `backends` by their names."""
    module = types.ModuleType(module_name)

    @hookimpl
    def register_backends(register):
        for backend in backends:
            register(backend.name, backend)

    module.register_backends = register_backends
    return module


@pytest.fixture
def make_host(monkeypatch: pytest.MonkeyPatch) -> Callable[..., PluginHost]:
    """``make_host(name=module_or_None, ...)`` builds a host whose entry points are
    exactly the given ones. A module is served from sys.modules under a unique name;
    None makes an entry point whose module does not exist (an import error)."""
    for var in ("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", "HIDET_FRAMEWORK_PLUGINS",
                "HIDET_FRAMEWORK_BLOCK_PLUGINS"):
        monkeypatch.delenv(var, raising=False)

    def make(**plugins: Any) -> PluginHost:
        entry_points = []
        for name, module in plugins.items():
            module_name = f"_hidet_test_plugin_{name}"
            if module is None:
                module_name = f"_hidet_test_missing_module_{name}"
                monkeypatch.delitem(sys.modules, module_name, raising=False)
            else:
                monkeypatch.setitem(sys.modules, module_name, module)
            entry_points.append(importlib.metadata.EntryPoint(name, module_name, "hidet_framework"))
        return PluginHost(ExtensionManager(entry_points=lambda: list(entry_points)))

    return make


@pytest.fixture
def fakes() -> types.SimpleNamespace:
    """The fake-plugin helpers above (test modules cannot import a conftest)."""
    return types.SimpleNamespace(Backend=FakeBackend, backend_plugin=backend_plugin)
