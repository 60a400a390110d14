"""Registrars and registries: what the registration hooks fill and the core reads.

A registration hook receives a registrar and calls ``register(name, obj)``. The
registrar validates the name (a non-empty str, unique per kind) and the object (the
attributes the core will read), and remembers which plugin registered it (provenance).

Registrations are *staged* per plugin and committed only when every hook of that
plugin returned normally: a plugin that raises midway contributes nothing rather than
half of its objects, so what the core sees never depends on where a plugin failed.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import attrs

from .contracts import backend_problems, pass_problems, template_problems

KINDS: tuple[str, ...] = ("operators", "templates", "backends", "frontends", "passes")
"""The registry kinds, in the order the core fills them."""

HOOK_FOR_KIND: dict[str, str] = {kind: f"register_{kind}" for kind in KINDS}

_SINGULAR = {"operators": "operator", "templates": "template", "backends": "backend",
             "frontends": "frontend", "passes": "pass"}


class Register(Protocol):
    """The registrar a registration hook receives."""

    def __call__(self, name: str, obj: Any) -> None: ...


class RegistrationError(ValueError):
    """A plugin registered something the core cannot accept."""


class DuplicateRegistrationError(RegistrationError):
    """A name is already taken in that registry (the first registration keeps it)."""


@attrs.frozen
class Entry:
    """One registered object and the plugin that registered it."""

    name: str
    obj: Any
    provider: str


def _target_kind(value: Any) -> Any:
    # A Target (or anything with a .kind) stands for its kind.
    return getattr(value, "kind", value)


def _operator_name(value: Any) -> Any:
    # An operator object stands for its name, so callers may pass either.
    return value if isinstance(value, str) else getattr(value, "name", value)


class Registry(Mapping[str, Any]):
    """A read-only mapping name → registered object, in registration order."""

    def __init__(self, kind: str, entries: Sequence[Entry] = ()):
        self._kind = kind
        self._entries: dict[str, Entry] = {e.name: e for e in entries}

    @property
    def kind(self) -> str:
        return self._kind

    def __getitem__(self, name: str) -> Any:
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise KeyError(f"no {_SINGULAR[self._kind]} named {name!r} is registered "
                           f"(registered: {known})")
        return entry.obj

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def provider(self, name: str) -> str:
        """The name of the plugin that registered `name`."""
        self[name]  # raises the explanatory KeyError for unknown names
        return self._entries[name].provider

    def names_from(self, provider: str) -> tuple[str, ...]:
        """The names plugin `provider` registered here, in registration order."""
        return tuple(e.name for e in self._entries.values() if e.provider == provider)

    def __repr__(self) -> str:
        items = ", ".join(f"{e.name!r} (from {e.provider!r})" for e in self._entries.values())
        return f"<{type(self).__name__} {self._kind}: {items}>"


class BackendRegistry(Registry):
    def serving(self, target_kind: Any) -> list[Any]:
        """Backends whose ``target_kinds`` include `target_kind`, in registration order."""
        kind = _target_kind(target_kind)
        return [b for b in self.values() if kind in tuple(b.target_kinds)]


class TemplateRegistry(Registry):
    def templates_for(self, operator: Any, target_kind: Any) -> list[Any]:
        """Templates scheduling `operator` (a name or an operator object) for
        `target_kind` (a kind or a Target), in registration order."""
        op, kind = _operator_name(operator), _target_kind(target_kind)
        return [t for t in self.values()
                if _operator_name(t.operator) == op and _target_kind(t.target) == kind]


class PassRegistry(Registry):
    def passes_at(self, point: str) -> list[Any]:
        """Passes inserted at pipeline point `point`, in registration order."""
        return [p for p in self.values() if p.point == point]


REGISTRY_TYPES: dict[str, type[Registry]] = {
    "operators": Registry, "templates": TemplateRegistry, "backends": BackendRegistry,
    "frontends": Registry, "passes": PassRegistry,
}


def _refuse_if(problems: list[str], what: str, contract: str) -> None:
    if problems:
        raise RegistrationError(f"{what} is refused: it needs " + "; ".join(problems)
                                + f" (the {contract} contract: docs/plugins.md)")


def _validate_backend(what: str, obj: Any) -> None:
    _refuse_if(backend_problems(obj), what, "backend")


def _validate_template(what: str, obj: Any) -> None:
    _refuse_if(template_problems(obj), what, "template")


def _validate_pass(what: str, obj: Any) -> None:
    _refuse_if(pass_problems(obj), what, "pass")


_VALIDATORS: dict[str, Callable[[str, Any], None]] = {
    "backends": _validate_backend, "templates": _validate_template, "passes": _validate_pass,
}


class RegistrationSession:
    """Builds the registries for one set of plugins.

    ``stage(plugin)`` opens a staging area whose registrars check names against what is
    already committed; ``commit(stage)`` publishes it, and dropping a stage discards it.
    """

    def __init__(self) -> None:
        self._committed: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}

    def stage(self, plugin: str) -> "PluginStage":
        return PluginStage(self, plugin)

    def commit(self, stage: "PluginStage") -> None:
        for kind, entries in stage.entries.items():
            for entry in entries.values():
                # Re-check: another stage may have been committed since this one began.
                self._check_free(kind, entry.name, entry.provider)
                self._committed[kind][entry.name] = entry

    def registries(self) -> dict[str, Registry]:
        return {kind: REGISTRY_TYPES[kind](kind, list(self._committed[kind].values()))
                for kind in KINDS}

    def _check_free(self, kind: str, name: str, plugin: str,
                    staged: Mapping[str, Entry] | None = None) -> None:
        owner = self._committed[kind].get(name) or (staged or {}).get(name)
        if owner is not None:
            same = " (the same plugin registered it twice)" if owner.provider == plugin else ""
            raise DuplicateRegistrationError(
                f"duplicate {_SINGULAR[kind]} name {name!r}: plugin {plugin!r} tried to "
                f"register it, but plugin {owner.provider!r} already did{same}. Names are "
                f"unique per kind; the first registration keeps the name (prefix yours "
                f"with your plugin name, e.g. {plugin + '.' + name!r}).")


class PluginStage:
    """The registrations of one plugin, pending until the session commits them."""

    def __init__(self, session: RegistrationSession, plugin: str):
        self.session = session
        self.plugin = plugin
        self.entries: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}

    def registrar(self, kind: str) -> Register:
        def register(name: str, obj: Any) -> None:
            if not isinstance(name, str) or not name.strip():
                raise RegistrationError(
                    f"plugin {self.plugin!r} called register(name, obj) for a "
                    f"{_SINGULAR[kind]} with name={name!r} ({type(name).__name__}); "
                    f"the name must be a non-empty str")
            what = f"{_SINGULAR[kind]} {name!r} from plugin {self.plugin!r}"
            validate = _VALIDATORS.get(kind)
            if validate is not None:
                validate(what, obj)
            self.session._check_free(kind, name, self.plugin, self.entries[kind])
            self.entries[kind][name] = Entry(name, obj, self.plugin)

        register.__qualname__ = f"register_{kind}[{self.plugin}]"
        return register
