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

# Candidates per template at each space level (DESIGN.md section 8).
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

    def space(self, target: Target, level: int) -> list[dict]:
        """Candidate parameter dicts (JSON-serialisable), the default first; at most
        ``SPACE_LIMITS[level]`` of them."""
        raise NotImplementedError

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Target) -> Any:
        """A ``ScheduledTask`` for `task` with these parameters."""
        raise NotImplementedError

    def bounded_space(self, target: Target, level: int) -> list[dict]:
        """The space of `level`, cut to its limit (level 0: the default only); empty
        where the template has nothing for `target` (an arch-specific instruction set)."""
        if level not in SPACE_LIMITS:
            raise ValueError(f"space level must be one of {sorted(SPACE_LIMITS)}, got {level!r}")
        return list(self.space(target, level))[: SPACE_LIMITS[level]]

    def __repr__(self) -> str:
        return f"<template {self.name} v{self.version} ({self.operator} on {self.target})>"
