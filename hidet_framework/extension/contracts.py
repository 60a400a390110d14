"""What the core reads from each kind of registered object, checked at registration.

A plugin's template, backend or pass that lacks something the core will use is refused
when the plugin loads (the registrar raises ``RegistrationError`` naming the plugin
and everything missing; the plugin then contributes nothing and ``hidet-framework
plugins`` shows why), instead of loading and failing later inside the tuner or the
pass manager. The checks are structural: a template need not subclass
``hidet_framework.schedule.Template`` (though that base class supplies ``applies``,
``version``, ``priority`` and ``bounded_space``), a backend need not subclass
``hidet_framework.backend.contract.Backend``. docs/plugins.md describes each contract.

Each function returns the list of problems (empty when the object is acceptable).
"""
from __future__ import annotations

from typing import Any

from .points import GRAPH_POINTS, IR_POINTS, PASS_POINTS


def _missing_str(obj: Any, attribute: str, meaning: str) -> list[str]:
    value = getattr(obj, attribute, None)
    if not isinstance(value, str) or not value:
        return [f"{attribute} ({meaning}; got {value!r})"]
    return []


def _missing_methods(obj: Any, methods: tuple[str, ...]) -> list[str]:
    return [f"{m}()" for m in methods if not callable(getattr(obj, m, None))]


def template_problems(obj: Any) -> list[str]:
    """A template: ``name``, ``operator``, ``target``, ``version``, ``priority``,
    ``space(target, level)`` and ``build(task, attributes, params, target)``."""
    if isinstance(obj, type):
        return [f"an instance (got the class {obj.__name__})"]
    problems = _missing_str(obj, "name", "a non-empty str, prefixed with the plugin's name")
    operator = getattr(obj, "operator", None)
    operator = operator if isinstance(operator, str) else getattr(operator, "name", None)
    if not isinstance(operator, str) or not operator:
        problems.append(f"operator (the name of the operator it schedules; got {getattr(obj, 'operator', None)!r})")
    problems += _missing_str(obj, "target", "the target kind it generates code for, e.g. 'cpu'")
    version = getattr(obj, "version", None)
    if not isinstance(version, (str, int)) or isinstance(version, bool) or version == "":
        problems.append(f"version (a str or int, bumped when generated code changes; got {version!r})")
    priority = getattr(obj, "priority", None)
    if not isinstance(priority, int) or isinstance(priority, bool):
        problems.append(f"priority (an int; the highest gives the default candidate; got {priority!r})")
    problems += _missing_methods(obj, ("space", "build"))
    return problems


BACKEND_METHODS = ("availability", "detect_target", "codegen", "build", "load", "auto_schedule_kernel")


def backend_problems(obj: Any) -> list[str]:
    """A backend: ``target_kinds``, ``preference``, the methods of
    ``BACKEND_METHODS`` and a ``device`` attribute (looked up on the class: reading it
    may start a device)."""
    if isinstance(obj, type):
        return [f"an instance (got the class {obj.__name__}; register an instance)"]
    problems = []
    kinds = getattr(obj, "target_kinds", None)
    if isinstance(kinds, str) or not isinstance(kinds, (tuple, list)) or not kinds \
            or not all(isinstance(k, str) and k for k in kinds):
        problems.append(f"target_kinds (a non-empty tuple of target-kind strings such as ('cpu',); got {kinds!r})")
    preference = getattr(obj, "preference", None)
    if not isinstance(preference, int) or isinstance(preference, bool):
        problems.append(f"preference (an int; target 'auto' takes the usable backend with the highest; "
                        f"got {preference!r})")
    problems += _missing_methods(obj, BACKEND_METHODS)
    if not hasattr(type(obj), "device") and "device" not in getattr(obj, "__dict__", {}):
        problems.append("device (the DeviceInterface: memory, copies, timing)")
    return problems


def _ir_pass_of(obj: Any) -> Any:
    inner = getattr(obj, "pass_", None)
    return inner if inner is not None else obj


def pass_problems(obj: Any) -> list[str]:
    """A pass: a ``point`` from ``points.PASS_POINTS``; at the graph point a rewrite
    rule (``op_names``, ``rewrite(op)``), at an IR point a lowering pass (``name``,
    ``run(module, ctx)``, itself or as ``pass_``)."""
    point = getattr(obj, "point", None)
    if point not in PASS_POINTS:
        return [f"point (one of {', '.join(PASS_POINTS)}; got {point!r})"]
    if point in GRAPH_POINTS:
        problems = []
        names = getattr(obj, "op_names", None)
        if isinstance(names, str) or not isinstance(names, (tuple, list, frozenset, set)) \
                or not all(isinstance(n, str) and n for n in names):
            problems.append(f"op_names (the operator names the rule looks at, a tuple of str; got {names!r})")
        return problems + _missing_methods(obj, ("rewrite",))
    assert point in IR_POINTS
    inner = _ir_pass_of(obj)
    return _missing_str(inner, "name", "the pass's name") + _missing_methods(inner, ("run",))
