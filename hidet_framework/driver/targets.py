"""Resolving the `target` argument once: a string becomes one `CompileTarget`.

"auto" is the usable backend with the highest ``preference`` (ties: the first
registered); the IR evaluator is chosen only by name. No target kind is named here:
backends declare what they serve (``target_kinds``) and how much they are preferred.
"""
from __future__ import annotations

import threading
from typing import Any

from hidet_framework.extension import MissingBackendError, plugin_host
from hidet_framework.runtime.compile_target import CompileTarget, TargetUnavailableError
from hidet_framework.runtime.evaluate_task import EVALUATOR, EVALUATOR_TARGET

_lock = threading.RLock()
_resolved: dict[tuple[int, str], tuple[Any, CompileTarget]] = {}


def usable_backend(kind: str) -> Any:
    """The backend serving `kind`; MissingBackendError (naming what to install) or
    TargetUnavailableError (saying why it cannot run here)."""
    backend = plugin_host().backend_for(kind)
    availability = backend.availability()
    if not availability:
        raise TargetUnavailableError(f"target {kind!r} is not usable here: {availability.reason}")
    return backend


def auto_kind() -> str:
    """The target kind "auto" means here: that of the most preferred usable backend."""
    ranked = sorted(plugin_host().backends.values(), key=lambda b: -b.preference)  # stable: ties keep order
    reasons = []
    for backend in ranked:
        availability = backend.availability()
        if availability:
            return backend.target_kinds[0]
        reasons.append(f"{backend.name or backend!r}: {availability.reason}")
    if not reasons:
        raise MissingBackendError("target 'auto': no backend is installed (install a backend plugin, "
                                  "e.g. pip install -e plugins/hidet_plugin_cpu)")
    raise TargetUnavailableError("target 'auto': no installed backend is usable here (" + "; ".join(reasons) + ")")


def resolve_target(target: str) -> str:
    """The target kind to compile for: `target` itself, or what "auto" means here."""
    if not isinstance(target, str) or not target:
        raise TypeError(f"target must be a target kind such as 'cpu', 'cuda' or 'auto', got {target!r}")
    return auto_kind() if target == "auto" else target


def resolve_compile_target(target: Any) -> CompileTarget:
    """`target` (a kind, "auto", "evaluator", or a CompileTarget) as a CompileTarget:
    the usable backend and the hardware it detected (detected once per backend)."""
    if isinstance(target, CompileTarget):
        return target
    kind = resolve_target(target)
    if kind == EVALUATOR_TARGET:
        return EVALUATOR
    backend = usable_backend(kind)
    with _lock:
        key = (id(backend), kind)
        if key not in _resolved:  # the backend is kept alive with it, so ids stay unique
            _resolved[key] = (backend, CompileTarget(kind, backend, backend.detect_target()))
        return _resolved[key][1]
