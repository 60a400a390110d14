"""Schedule templates: hand-written kernels with a space of parameters.

A template serves one operator on one target kind. Its space comes from the target's
properties (cores, vector width, caches; SM count, shared memory, registers, warp
size), never from the input shape: predicated loads and stores make every candidate
legal for every shape, primes included. Several templates may serve the same
(operator, target); all contribute candidates and the fastest measured one wins.

Plugins register instances through ``register_templates(register)``.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.backend.contract import Target

# Candidates per template at each space level (docs/design.md, Spaces and tuning).
SPACE_LIMITS = {0: 1, 1: 30, 2: 200}


class Template:
    """Base class of templates.

    :cvar name: unique template name (prefix with the plugin's name).
    :cvar operator: the operator it schedules (e.g. ``"matmul"``).
    :cvar target: the target kind it generates code for (``"cpu"``/``"cuda"``).
    :cvar version: bump when generated code changes, so tuned results are redone.
    :cvar priority: templates with higher priority give the level-0 default.
    """

    name: str = ""
    operator: str = ""
    target: str = ""
    version: str = "1"
    priority: int = 0

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        """Whether this template can schedule `task` (e.g. dtype restrictions)."""
        return True

    def applies_on(self, task: Any, attributes: Mapping[str, Any], target: Target) -> bool:
        """`applies` for a build for `target` (the driver asks this one): override it where
        the answer depends on the target's hardware (a vector width), which may not be this
        machine's (a cross-compile target)."""
        return self.applies(task, attributes)

    def space(self, target: Target, level: int) -> list[dict]:
        """Candidate parameter dicts (JSON-serialisable), the default first; at most
        ``SPACE_LIMITS[level]`` of them."""
        raise NotImplementedError

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Target) -> Any:
        """A ``ScheduledTask`` for `task` with these parameters."""
        raise NotImplementedError

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                 target: Target) -> Any:
        """Modelled seconds of candidate `params` on `task`, or None (no cost model). At
        level 0 the tuner compares the defaults of the templates that have one (see
        ``tuner.candidates_of``)."""
        return None

    def bounded_space(self, target: Target, level: int) -> list[dict]:
        """The space of `level`, cut to its limit (level 0: the default only); empty
        where the template has nothing for `target` (an arch-specific instruction set)."""
        if level not in SPACE_LIMITS:
            raise ValueError(f"space level must be one of {sorted(SPACE_LIMITS)}, got {level!r}")
        return list(self.space(target, level))[: SPACE_LIMITS[level]]

    def __repr__(self) -> str:
        return f"<template {self.name} v{self.version} ({self.operator} on {self.target})>"


class TemplateError(RuntimeError):
    """A template's build() failed or returned something that is not a ScheduledTask;
    the message names the template and the plugin that registered it."""


def template_origin(template: Any) -> str:
    """'template NAME (plugin P)': who to blame, the plugin found by identity in the
    template registry (a template built by hand has no plugin)."""
    name = getattr(template, "name", "") or type(template).__name__
    try:
        from hidet_framework.extension import plugin_host

        registry = plugin_host().templates
        for key in registry:
            if registry[key] is template:
                return f"template {name!r} (plugin {registry.provider(key)!r})"
    except Exception:  # the registry itself may be what is broken; the name still helps
        pass
    return f"template {name!r}"


def build_scheduled(template: Any, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                    target: Target) -> Any:
    """``template.build(...)``, checked: an exception or a result that is not a
    ScheduledTask becomes a TemplateError naming the template, its plugin and the
    parameters, instead of an AttributeError deep in lowering."""
    from hidet_framework.schedule.scheduled_task import ScheduledTask

    try:
        result = template.build(task, attributes, params, target)
    except Exception as exc:
        raise TemplateError(f"{template_origin(template)} failed to build with params {dict(params)!r}: "
                            f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(result, ScheduledTask):
        raise TemplateError(f"{template_origin(template)} build() returned {type(result).__name__} "
                            f"{_short(result)} for params {dict(params)!r}; it must return a ScheduledTask")
    return result


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
