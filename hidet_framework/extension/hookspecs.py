"""The one hookspecs module of hidet-framework: every hook a plugin may implement.

Hooks are grouped by the phase in which the core calls them. Each is documented with
``:param:`` lines; docs/plugins.md describes every hook with an example, and a test
keeps the two in step. Plugins implement hooks with::

    from hidet_framework.extension import hookimpl

    @hookimpl
    def register_backends(register):
        register("cpu", CpuBackend())

Registration hooks receive a registrar owned by the core and return nothing. A
registrar is called as ``register(name, obj)``; it records which plugin registered
what and rejects duplicate or invalid names (see ``registry.py``). Each plugin's hooks
are called separately, so one plugin raising does not lose the others' registrations.
"""
from __future__ import annotations

import pluggy

from .registry import Register

PROJECT_NAME = "hidet_framework"
"""The pluggy project name; also the entry-point group plugins declare themselves in."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# ---------------------------------------------------------------------------
# Phase 1 — registration. Called once per plugin when the plugin host first builds
# its registries, and again whenever plugins are registered or unregistered.
# ---------------------------------------------------------------------------


@hookspec
def register_backends(register: Register) -> None:
    """Register codegen backends (``hidet_framework.backend.contract.Backend`` instances).

    A backend serves the target kinds listed in its ``target_kinds`` attribute; the core
    finds it with ``plugin_host().backend_for(kind)``. Register an instance, not the class.

    :param register: the registrar; call ``register(name, backend)`` once per backend,
        ``name`` unique among all backends (usually the backend's ``name``).
    """


@hookspec
def register_operators(register: Register) -> None:
    """Register operators (their compute definitions), by operator name.

    Other plugins and rewrite rules name an operator through this registry instead of
    importing the plugin that defines it.

    :param register: the registrar; call ``register(name, operator)`` once per operator,
        ``name`` unique among all operators (e.g. ``"matmul"``).
    """


@hookspec
def register_templates(register: Register) -> None:
    """Register schedule templates.

    A template is a ``hidet_framework.schedule.Template`` (or has what it has):
    ``name``, ``operator`` (the operator name it schedules), ``target`` (the target kind
    it generates code for), ``version``, ``priority``, ``space(target, level)`` and
    ``build(task, attributes, params, target)``; one lacking any is refused at
    registration. Several templates may serve the same (operator, target): all of them
    contribute candidates to the tuner.

    :param register: the registrar; call ``register(name, template)`` once per template,
        ``name`` unique among all templates (prefix it with your plugin, e.g.
        ``"example.matmul_simt"``).
    """


@hookspec
def register_frontends(register: Register) -> None:
    """Register frontends that turn a foreign model format into a graph.

    :param register: the registrar; call ``register(name, frontend)`` once per frontend,
        ``name`` unique among all frontends (e.g. ``"onnx"``).
    """


@hookspec
def register_passes(register: Register) -> None:
    """Register graph rewrite rules and IR passes.

    A pass carries a ``point`` attribute, one of ``hidet_framework.extension.points``
    (``GRAPH_REWRITE`` for a rewrite rule; ``BEFORE_LOWERING``, ``AFTER_LOWERING`` or
    ``BEFORE_CODEGEN`` for an IR pass); another point is refused at registration.
    ``plugin_host().passes.passes_at(point)`` lists a point's passes in registration order.

    :param register: the registrar; call ``register(name, pass_)`` once per pass,
        ``name`` unique among all passes.
    """
