"""Registrars and registries: what the registration hooks fill and the core reads.

A registration hook receives a registrar and calls ``register(name, obj)``. The
registrar validates the name (a non-empty str, unique per kind) and the object (the
attributes the core will read), and remembers which plugin registered it (provenance).

Registrations are *staged* per plugin and committed only when every hook of that
plugin returned normally: a plugin that raises midway contributes nothing rather than
half of its objects, so what the core sees never depends on where a plugin failed.

Two plugins registering the same name of one kind never silently take it from each
other (nor does the order plugins load in decide): the registration with the higher
``priority`` (``register(name, obj, priority=10)``; default 0) wins and is recorded as
overriding the others; at equal priority the name is a *collision*, served by nobody:
looking it up raises NameCollisionError naming both plugins, and ``hidet-framework
plugins`` shows it. Each plugin's other registrations are unaffected.
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

    def __call__(self, name: str, obj: Any, *, priority: int = 0) -> None: ...


class RegistrationError(ValueError):
    """A plugin registered something the core cannot accept."""


class DuplicateRegistrationError(RegistrationError):
    """One plugin registered the same name twice in one registry."""


class NameCollisionError(KeyError):
    """Plugins registered one name at the same priority: none of them gets it."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@attrs.frozen
class Entry:
    """One registered object, the plugin that registered it, the registration's
    priority and the plugins whose registrations of the name it overrides."""

    name: str
    obj: Any
    provider: str
    priority: int = 0
    overrides: tuple[str, ...] = ()


@attrs.frozen
class NameCollision:
    """Plugins `providers` all registered `name` (a `kind`) at the same top `priority`."""

    kind: str
    name: str
    providers: tuple[str, ...]
    priority: int

    def message(self) -> str:
        plugins = " and ".join(repr(p) for p in self.providers)
        return (f"{_SINGULAR[self.kind]} name {self.name!r} is registered by plugins {plugins} at the same "
                f"priority {self.priority}, so neither gets it. Rename one (prefix it with the plugin's name), "
                f"block one (HIDET_FRAMEWORK_BLOCK_PLUGINS), or let the plugin meant to replace the other "
                f"register it with a higher priority: register({self.name!r}, obj, priority={self.priority + 1}).")


def _target_kind(value: Any) -> Any:
    # A Target (or anything with a .kind) stands for its kind.
    return getattr(value, "kind", value)


def _operator_name(value: Any) -> Any:
    # An operator object stands for its name, so callers may pass either.
    return value if isinstance(value, str) else getattr(value, "name", value)


class Registry(Mapping[str, Any]):
    """A read-only mapping name → registered object, in registration order."""

    def __init__(self, kind: str, entries: Sequence[Entry] = (), collisions: Sequence[NameCollision] = ()):
        self._kind = kind
        self._entries: dict[str, Entry] = {e.name: e for e in entries}
        self._collisions: dict[str, NameCollision] = {c.name: c for c in collisions}

    @property
    def kind(self) -> str:
        return self._kind

    def __getitem__(self, name: str) -> Any:
        entry = self._entries.get(name)
        if entry is None and name in self._collisions:
            raise NameCollisionError(self._collisions[name].message())
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

    def entry(self, name: str) -> Entry:
        """The registration of `name`: provider, priority and what it overrides."""
        self[name]
        return self._entries[name]

    def collisions(self) -> tuple[NameCollision, ...]:
        """Names registered by several plugins at the same top priority (served by none)."""
        return tuple(self._collisions.values())

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
        # Every committed registration of each name, in commit order (claims).
        self._claims: dict[str, dict[str, list[Entry]]] = {kind: {} for kind in KINDS}

    def stage(self, plugin: str) -> "PluginStage":
        return PluginStage(self, plugin)

    def commit(self, stage: "PluginStage") -> None:
        for kind, entries in stage.entries.items():
            for entry in entries.values():
                self._claims[kind].setdefault(entry.name, []).append(entry)

    def registries(self) -> dict[str, Registry]:
        out = {}
        for kind in KINDS:
            entries, collisions = resolve_claims(kind, self._claims[kind])
            out[kind] = REGISTRY_TYPES[kind](kind, entries, collisions)
        return out

    def _check_free(self, kind: str, name: str, plugin: str,
                    staged: Mapping[str, Entry] | None = None) -> None:
        # Across plugins a repeated name is resolved by priority (resolve_claims); only a
        # plugin registering one name twice is its own error.
        owner = (staged or {}).get(name)
        if owner is not None:
            raise DuplicateRegistrationError(
                f"duplicate {_SINGULAR[kind]} name {name!r}: plugin {plugin!r} registered it twice")


def resolve_claims(kind: str, claims: Mapping[str, Sequence[Entry]]) -> tuple[list[Entry], list[NameCollision]]:
    """Who serves each name: the claim of highest priority (recorded as overriding the
    others); a tie at the top is a NameCollision and nobody serves the name. Names keep
    the order of their first claim, so registries list in load order."""
    entries: list[Entry] = []
    collisions: list[NameCollision] = []
    for name, claimed in claims.items():
        top = max(e.priority for e in claimed)
        best = [e for e in claimed if e.priority == top]
        if len(best) > 1:
            collisions.append(NameCollision(kind, name, tuple(e.provider for e in best), top))
            continue
        others = tuple(e.provider for e in claimed if e is not best[0])
        entries.append(attrs.evolve(best[0], overrides=others))
    return entries, collisions


def _registration_priority(what: str, priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise RegistrationError(f"{what}: priority={priority!r}; expected an int (default 0; higher wins)")
    return priority


class PluginStage:
    """The registrations of one plugin, pending until the session commits them."""

    def __init__(self, session: RegistrationSession, plugin: str):
        self.session = session
        self.plugin = plugin
        self.entries: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}

    def registrar(self, kind: str) -> Register:
        def register(name: str, obj: Any, *, priority: int = 0) -> None:
            if not isinstance(name, str) or not name.strip():
                raise RegistrationError(
                    f"plugin {self.plugin!r} called register(name, obj) for a "
                    f"{_SINGULAR[kind]} with name={name!r} ({type(name).__name__}); "
                    f"the name must be a non-empty str")
            what = f"{_SINGULAR[kind]} {name!r} from plugin {self.plugin!r}"
            validate = _VALIDATORS.get(kind)
            if validate is not None:
                validate(what, obj)
            priority = _registration_priority(what, priority)
            self.session._check_free(kind, name, self.plugin, self.entries[kind])
            self.entries[kind][name] = Entry(name, obj, self.plugin, priority)

        register.__qualname__ = f"register_{kind}[{self.plugin}]"
        return register
