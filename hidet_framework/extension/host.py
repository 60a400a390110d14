"""The plugin host: the one typed facade the rest of hidet-framework uses.

``plugin_host()`` returns the process-wide host. It loads plugins lazily, on the first
question asked, and builds the registries from the registration hooks; registering or
unregistering a plugin rebuilds them on the next question. The core reads backends,
operators, templates, frontends and passes from here and never imports a plugin.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Mapping

import attrs

from .manager import (ENV_ALLOW, ENV_BLOCK, ENV_DISABLE_AUTOLOAD, Collection, ExtensionManager,
                      PluginError)
from .registry import KINDS, BackendRegistry, PassRegistry, Registry, TemplateRegistry

# Target kind -> (distribution, folder in this repository) that serves it, so a missing
# backend can be named precisely.
KNOWN_BACKEND_DISTRIBUTIONS: dict[str, tuple[str, str]] = {
    "cpu": ("hidet-plugin-cpu", "plugins/hidet_plugin_cpu"),
    "cuda": ("hidet-plugin-cuda", "plugins/hidet_plugin_cuda"),
}


class MissingBackendError(LookupError):
    """No registered backend serves the requested target kind."""


@attrs.frozen
class PluginInfo:
    """One plugin as ``hidet-framework plugins`` shows it.

    ``status`` is "loaded", "failed", "blocked" (HIDET_FRAMEWORK_BLOCK_PLUGINS) or
    "not-allowed" (absent from HIDET_FRAMEWORK_PLUGINS), or "conflict" (loaded, but some
    name it registered collides with another plugin's at the same priority: served by
    neither). ``registered`` maps each kind to the names the plugin serves; ``error``
    is why it was skipped, or None; ``overrides`` says which of its names it took from
    which plugins by a higher registration priority; ``conflicts`` describes each
    collision it is part of.
    """

    name: str
    distribution: str | None
    version: str | None
    status: str
    builtin: bool
    hooks: tuple[str, ...]
    registered: Mapping[str, tuple[str, ...]]
    error: PluginError | None
    overrides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        error = None if self.error is None else attrs.asdict(self.error)
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "status": self.status, "builtin": self.builtin, "hooks": list(self.hooks),
                "registered": {k: list(v) for k, v in self.registered.items()}, "error": error,
                "overrides": list(self.overrides), "conflicts": list(self.conflicts)}


class PluginHost:
    """Registries filled by plugins, plugin management, and the load report.

    :param manager: the plugin manager to use (tests pass one with fake entry points);
        by default one that loads the installed ``hidet_framework`` entry points.
    """

    def __init__(self, manager: ExtensionManager | None = None):
        self._manager = manager or ExtensionManager()
        self._lock = threading.RLock()
        self._collection: Collection | None = None
        self._collecting = False

    # -- registries --------------------------------------------------------------------

    def _collected(self) -> Collection:
        with self._lock:
            if self._collecting:
                # A registration hook asked for the registries that it is helping to build.
                raise RuntimeError("plugin_host() registries were read from inside a "
                                   "registration hook; hooks must only call register(name, obj)")
            if self._collection is None:
                self._collecting = True
                try:
                    self._collection = self._manager.collect()
                finally:
                    self._collecting = False
            return self._collection

    @property
    def operators(self) -> Registry:
        return self._collected().registries["operators"]

    @property
    def templates(self) -> TemplateRegistry:
        return self._collected().registries["templates"]  # type: ignore[return-value]

    @property
    def backends(self) -> BackendRegistry:
        return self._collected().registries["backends"]  # type: ignore[return-value]

    @property
    def frontends(self) -> Registry:
        return self._collected().registries["frontends"]

    @property
    def passes(self) -> PassRegistry:
        return self._collected().registries["passes"]  # type: ignore[return-value]

    def backend_for(self, target_kind: Any) -> Any:
        """The backend serving `target_kind` (a kind such as "cuda", or a Target); the
        first registered one when several do. Raises MissingBackendError saying which
        distribution to install, or why the installed one is not serving."""
        kind = getattr(target_kind, "kind", target_kind)
        serving = self.backends.serving(kind)
        if serving:
            return serving[0]
        raise MissingBackendError(self._explain_missing_backend(kind))

    def _explain_missing_backend(self, kind: str) -> str:
        message = f"no backend serves target {kind!r}"
        dist, folder = KNOWN_BACKEND_DISTRIBUTIONS.get(kind, (None, None))
        reasons = []
        for info in self.report():
            if info.name != kind and (dist is None or info.distribution != dist):
                continue
            where = f"plugin {info.name!r}" + (f" ({info.distribution})" if info.distribution else "")
            if info.status == "blocked":
                reasons.append(f"{where} is installed but blocked by {ENV_BLOCK}")
            elif info.status == "not-allowed":
                reasons.append(f"{where} is installed but not listed in {ENV_ALLOW}")
            elif info.error is not None:
                reasons.append(f"{where} is installed but failed ({info.error})")
        if reasons:
            message += ": " + "; ".join(reasons)
        elif dist is not None:
            message += f": install {dist} (pip install -e {folder})"
        else:
            served = sorted({k for b in self.backends.values() for k in b.target_kinds})
            message += f"; registered backends serve: {', '.join(served) or 'nothing'}"
        if self._manager.autoload_disabled:
            message += f" (plugin autoloading is off: {ENV_DISABLE_AUTOLOAD} is set)"
        return message

    # -- report ------------------------------------------------------------------------

    def report(self) -> list[PluginInfo]:
        """Every plugin known to the host, in load order, with what it registered and
        the error that made it be skipped (None when it is working)."""
        collection = self._collected()
        infos = []
        for record in self._manager.records():
            error = record.error or collection.failures.get(record.name)
            registered = {kind: collection.registries[kind].names_from(record.name)
                          for kind in KINDS}
            overrides, conflicts = _precedence_notes(collection, record.name)
            status = "failed" if error is not None else "conflict" if conflicts else record.status
            infos.append(PluginInfo(
                name=record.name, distribution=record.distribution, version=record.version,
                status=status, builtin=record.origin == "builtin", hooks=self._manager.hooks_of(record.name),
                registered={k: v for k, v in registered.items() if v}, error=error,
                overrides=overrides, conflicts=conflicts))
        return infos

    # -- plugin management -------------------------------------------------------------

    def register(self, plugin: Any, name: str | None = None) -> str:
        """Register a plugin object (module, class or instance with hookimpls); return
        its name. Misspelled hooks or a taken name raise here; errors inside its
        registration hooks are recorded in the report like any plugin's."""
        with self._lock:
            name = self._manager.register(plugin, name)
            self._collection = None
            return name

    def unregister(self, name: str) -> Any:
        """Remove plugin `name` (whatever its origin); return the plugin object."""
        with self._lock:
            plugin = self._manager.unregister(name)
            self._collection = None
            return plugin

    @contextlib.contextmanager
    def temporary_plugin(self, plugin: Any, name: str | None = None) -> Iterator[str]:
        """Register `plugin` for the duration of a with-block (tests); yields its name."""
        name = self.register(plugin, name)
        try:
            yield name
        finally:
            self.unregister(name)


def _precedence_notes(collection: Collection, plugin: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what `plugin` overrides by priority, the collisions it is part of), as text."""
    overrides, conflicts = [], []
    for kind in KINDS:
        registry = collection.registries[kind]
        for name in registry.names_from(plugin):
            entry = registry.entry(name)
            if entry.overrides:
                others = ", ".join(repr(p) for p in entry.overrides)
                overrides.append(f"{kind}: {name} (priority {entry.priority}, over {others})")
        conflicts += [c.message() for c in registry.collisions() if plugin in c.providers]
    return tuple(overrides), tuple(conflicts)


_host: PluginHost | None = None
_host_lock = threading.Lock()


def plugin_host() -> PluginHost:
    """The process-wide plugin host, created (not yet loaded) on first call."""
    global _host
    with _host_lock:
        if _host is None:
            _host = PluginHost()
        return _host


def reset_plugin_host(host: PluginHost | None = None) -> None:
    """Forget the process-wide host (tests): the next ``plugin_host()`` builds a fresh
    one from the current environment, or returns `host` when one is given."""
    global _host
    with _host_lock:
        _host = host


@contextlib.contextmanager
def temporary_plugin(plugin: Any, name: str | None = None) -> Iterator[str]:
    """Register `plugin` with the process-wide host for a with-block; yields its name."""
    with plugin_host().temporary_plugin(plugin, name) as registered_name:
        yield registered_name
