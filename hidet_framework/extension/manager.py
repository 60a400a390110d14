"""The plugin manager: the only code that talks to pluggy and calls hooks.

It loads plugins (core built-ins, then the ``hidet_framework`` entry points, sorted by
name so the first registration of a name is the same on every machine), honours the
environment's allow-list and block-list, validates every plugin's hook names, and calls
the registration hooks one plugin at a time. A plugin that fails — on import, on
validation, or in a registration hook — is recorded with its error and skipped; the
others are unaffected. Bundled plugins take exactly the same path as external ones.

"Fails" includes ``BaseException``s other than ``KeyboardInterrupt``: a plugin calling
``sys.exit()`` (SystemExit) or raising GeneratorExit at import must not end the host
(``hidet-framework plugins`` included), so it is recorded like any error. Ctrl-C is the
user's, not the plugin's: a KeyboardInterrupt while a plugin imports still interrupts.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import time
import traceback
import types
from typing import Any, Callable, Iterable

import attrs
import pluggy

from . import hookspecs
from .registry import HOOK_FOR_KIND, KINDS, Registry, RegistrationSession

ENTRY_POINT_GROUP = hookspecs.PROJECT_NAME
ENV_DISABLE_AUTOLOAD = "HIDET_FRAMEWORK_DISABLE_AUTOLOAD"
ENV_ALLOW = "HIDET_FRAMEWORK_PLUGINS"
ENV_BLOCK = "HIDET_FRAMEWORK_BLOCK_PLUGINS"

# Modules of the core that implement hooks themselves (e.g. built-in passes). They are
# loaded like any plugin, under the name "core.<last part>", and listed by
# `hidet-framework plugins --all`. Add a module path here to make it a built-in.
BUILTIN_PLUGIN_MODULES: tuple[str, ...] = ()


@attrs.frozen
class PluginError:
    """Why a plugin was skipped: the phase that failed and the exception it raised."""

    phase: str  # "import", "register", "validate", or the hook name, e.g. "register_backends"
    type: str
    message: str
    traceback: str = attrs.field(default="", repr=False)

    @classmethod
    def from_exception(cls, phase: str, exc: BaseException) -> "PluginError":
        message = str(exc)
        if isinstance(exc, SystemExit):
            message = f"the plugin called sys.exit({exc.code!r}); the host keeps running without it"
        return cls(phase, type(exc).__name__, message, "".join(traceback.format_exception(exc)))

    def __str__(self) -> str:
        return f"{self.phase}: {self.type}: {self.message}"


def contained(exc: BaseException) -> bool:
    """Whether an exception raised by plugin code is recorded as the plugin's error
    (everything but KeyboardInterrupt, which is re-raised: see the module docstring)."""
    return not isinstance(exc, KeyboardInterrupt)


@attrs.define
class PluginRecord:
    """What the manager knows about one plugin, loaded or not."""

    name: str
    origin: str  # "builtin", "entry-point" or "manual"
    status: str  # "loaded", "failed", "blocked" or "not-allowed"
    plugin: Any = None
    distribution: str | None = None
    version: str | None = None
    error: PluginError | None = None


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name, "").strip()
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


def _autoload_disabled() -> bool:
    return os.environ.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() in {"1", "true", "yes", "on"}


def _installed_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


@attrs.frozen
class Collection:
    """The result of calling every registration hook: registries, and the plugins whose
    registration failed (plugin name → error)."""

    registries: dict[str, Registry]
    failures: dict[str, PluginError]


class ExtensionManager:
    """Wraps ``pluggy.PluginManager`` with isolation, provenance and env filtering.

    :param entry_points: where entry points come from (tests pass fakes); by default
        the installed distributions' ``hidet_framework`` group.
    """

    def __init__(self, entry_points: Callable[[], Iterable[Any]] | None = None):
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._entry_points = entry_points or _installed_entry_points
        self._records: dict[str, PluginRecord] = {}
        self.autoload_disabled = False
        self.loaded = False

    # -- loading -------------------------------------------------------------------

    def load(self) -> None:
        """Load built-ins and (unless disabled) entry points; idempotent."""
        if self.loaded:
            return
        self.loaded = True
        for module_name in BUILTIN_PLUGIN_MODULES:
            self._load_one(f"core.{module_name.rsplit('.', 1)[-1]}", "builtin",
                           lambda m=module_name: importlib.import_module(m), "hidet-framework")
        self.autoload_disabled = _autoload_disabled()
        if self.autoload_disabled:
            return
        allow, block = _env_list(ENV_ALLOW), _env_list(ENV_BLOCK) or []
        entry_points = sorted(self._entry_points(), key=lambda ep: (ep.name, _dist_of(ep)[0] or ""))
        for ep in entry_points:
            dist, version = _dist_of(ep)
            name = ep.name if ep.name not in self._records else f"{ep.name}@{dist}"
            if ep.name in block:
                self._records[name] = PluginRecord(name, "entry-point", "blocked", None, dist, version)
            elif allow is not None and ep.name not in allow:
                self._records[name] = PluginRecord(name, "entry-point", "not-allowed", None, dist, version)
            else:
                self._load_one(name, "entry-point", ep.load, dist, version)
        _warn_unknown_names(entry_points, allow, block)

    def _load_one(self, name: str, origin: str, importer: Callable[[], Any],
                  dist: str | None = None, version: str | None = None) -> None:
        record = PluginRecord(name, origin, "failed", None, dist, version)
        self._records[name] = record
        try:
            plugin = importer()
        except BaseException as exc:  # any import-time failure is the plugin's, not ours
            if not contained(exc):
                raise
            record.error = PluginError.from_exception("import", exc)
            return
        try:
            self._register_validated(plugin, name)
        except BaseException as exc:
            if not contained(exc):
                raise
            record.error = PluginError.from_exception("validate", exc)
            return
        record.plugin, record.status = plugin, "loaded"

    def _register_validated(self, plugin: Any, name: str) -> None:
        # pluggy rejects wrong argument names on register; check_pending rejects hook
        # names with no spec (a misspelled hook), which we pin on the plugin just added.
        self._pm.register(plugin, name=name)
        try:
            self._pm.check_pending()
        except Exception:
            self._pm.unregister(name=name)
            raise

    # -- explicit registration (tests, embedding applications) -----------------------

    def register(self, plugin: Any, name: str | None = None) -> str:
        """Register a plugin object; invalid hooks or a taken name raise here."""
        self.load()
        name = name or self._pm.get_canonical_name(plugin)
        if name in self._records:
            raise ValueError(f"a plugin named {name!r} is already registered; "
                             f"pass another name= or unregister it first")
        self._register_validated(plugin, name)
        dist = _dist_of_module(plugin.__name__) if isinstance(plugin, types.ModuleType) else None
        self._records[name] = PluginRecord(name, "manual", "loaded", plugin, *(dist or (None, None)))
        return name

    def unregister(self, name: str) -> Any:
        """Remove a plugin (loaded or only recorded) by name; return its object."""
        record = self._records.pop(name, None)
        if record is None:
            raise KeyError(f"no plugin named {name!r} (plugins: {', '.join(self._records) or 'none'})")
        if record.status == "loaded":
            self._pm.unregister(name=name)
        return record.plugin

    # -- inspection ------------------------------------------------------------------

    def records(self) -> list[PluginRecord]:
        self.load()
        return list(self._records.values())

    def hooks_of(self, name: str) -> tuple[str, ...]:
        """Names of the hooks plugin `name` implements."""
        plugin = self._pm.get_plugin(name)
        if plugin is None:
            return ()
        return tuple(sorted(caller.name for caller in self._pm.get_hookcallers(plugin) or ()))

    # -- calling the registration hooks ---------------------------------------------

    def collect(self) -> Collection:
        """Call every registration hook, one plugin at a time, and build the registries.

        A plugin whose hook raises contributes nothing (its staged registrations are
        dropped) and is reported in ``failures``; the others are unaffected.
        """
        self.load()
        session = RegistrationSession()
        failures: dict[str, PluginError] = {}
        for record in self._records.values():
            if record.status != "loaded":
                continue
            implemented = self.hooks_of(record.name)
            stage = session.stage(record.name)
            others = [p for n, p in self._pm.list_name_plugin() if n != record.name]
            phase = "register"
            try:
                for kind in KINDS:
                    hook = HOOK_FOR_KIND[kind]
                    if hook not in implemented:
                        continue
                    phase = hook
                    self._pm.subset_hook_caller(hook, remove_plugins=others)(
                        register=stage.registrar(kind))
                phase = "register"
                session.commit(stage)
            except BaseException as exc:
                if not contained(exc):
                    raise
                failures[record.name] = PluginError.from_exception(phase, exc)
        return Collection(session.registries(), failures)


def _warn_unknown_names(entry_points: list, allow: list[str] | None, block: list[str]) -> None:
    """A name in the allow- or block-list that no installed plugin has is a typo or a
    plugin that is not installed: say so instead of silently loading less (or more)."""
    import difflib
    import warnings

    installed = sorted({ep.name for ep in entry_points})
    for variable, names in ((ENV_ALLOW, allow or []), (ENV_BLOCK, block)):
        for name in names:
            if name in installed:
                continue
            close = difflib.get_close_matches(name, installed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            warnings.warn(f"{variable} names {name!r}, but no installed plugin has that name{hint} "
                          f"(installed: {', '.join(installed) or 'none'})", UnknownPluginNameWarning, stacklevel=3)


class UnknownPluginNameWarning(UserWarning):
    """HIDET_FRAMEWORK_PLUGINS or HIDET_FRAMEWORK_BLOCK_PLUGINS names no installed plugin."""


def _dist_of(ep: Any) -> tuple[str | None, str | None]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return None, None
    return dist.metadata["Name"] or dist.name, dist.version


def _dist_of_module(module_name: str) -> tuple[str, str] | None:
    # For a manually registered module, name the distribution that installs it, if any.
    top = module_name.split(".", 1)[0]
    dists = _packages_distributions().get(top)
    if not dists:
        return None
    try:
        return dists[0], importlib.metadata.version(dists[0])
    except importlib.metadata.PackageNotFoundError:
        return None


_PACKAGES: list = [None, None]  # [path state, mapping] of the last packages_distributions() read
_SETTLED_NS = 2_000_000_000  # a directory changed this recently may change again within its mtime's tick


def _path_state() -> tuple:
    """What importlib.metadata's answer depends on: sys.path, the finders, the working
    directory ('' on sys.path) and each path entry's modification time (installing or
    removing a distribution adds or removes a ``*.dist-info`` / ``*.egg-info`` there)."""
    def mtime(entry: str) -> int | None:
        try:
            return os.stat(entry or ".").st_mtime_ns
        except OSError:
            return None

    return tuple(sys.path), tuple(map(id, sys.meta_path)), os.getcwd(), tuple(mtime(e) for e in sys.path)


def _packages_distributions() -> dict:
    """``importlib.metadata.packages_distributions()`` (top-level package -> the
    distributions that install it; do not modify it), remembered while
    :func:`_path_state` stays the same: it reads every installed distribution's file
    list (~30 ms), and a plugin registered by hand asks it each time (the ops and reduce
    test fixtures, three times a test). Not remembered while a path entry changed in
    the last two seconds (a second change within the mtime's tick would go unseen)."""
    state = _path_state()
    if _PACKAGES[0] == state:
        return _PACKAGES[1]
    mapping = importlib.metadata.packages_distributions()
    now = time.time_ns()
    settled = all(m is None or now - m >= _SETTLED_NS for m in state[-1])
    _PACKAGES[:] = [state if settled else None, mapping]
    return mapping
