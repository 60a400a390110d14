"""``hidet_framework.ops``: the operators plugins register, by name.

Nothing is defined here: each lookup reads the operator registry the
``register_operators`` hooks fill, so installing a plugin adds operators.

- ``hf.ops.relu``: an operator whose name is an identifier;
- ``hf.ops["mine.rowsum"]`` or ``hf.ops.mine.rowsum``: a prefixed name (third-party
  plugins prefix theirs with the plugin's name). ``hf.ops.mine`` is the namespace of
  every operator named ``mine.<something>``; where an operator is itself named
  ``mine``, ``hf.ops.mine`` is that operator and the subscript reaches the others.
"""
from __future__ import annotations

import sys
import types
from typing import Any


def _operators() -> Any:
    from hidet_framework.extension import plugin_host

    return plugin_host().operators


def _unknown(name: str) -> AttributeError:
    from hidet_framework.extension import plugin_host

    host = plugin_host()
    report = host.report()
    plugins = sorted(info.name for info in report if not info.error)
    # a plugin that failed to load may be the one that registers it: say so first
    failed = [f"{info.name} ({info.distribution or 'no distribution'}): {info.error}"
              for info in report if info.error is not None]
    hint = f"plugins that failed to load, one of which may provide it: {'; '.join(failed)}; " if failed else ""
    return AttributeError(
        f"no installed plugin registers an operator named {name!r} ({hint}"
        f"installed plugins: {', '.join(plugins) or 'none'}; "
        f"known operators: {', '.join(sorted(host.operators)) or 'none'})")


def lookup(name: str) -> Any:
    """The operator registered as `name` (prefixed names included): an operator, a
    namespace of the operators named ``<name>.<...>``, or AttributeError."""
    operators = _operators()
    if name in operators:
        return operators[name]
    if any(op.startswith(name + ".") for op in operators):
        return OperatorNamespace(name)
    raise _unknown(name)


class OperatorNamespace:
    """The operators named ``<prefix>.<...>``: ``hf.ops.mine.rowsum``."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lookup(f"{self._prefix}.{name}")

    def __getitem__(self, name: str) -> Any:
        return lookup(f"{self._prefix}.{name}")

    def __dir__(self) -> list[str]:
        start = len(self._prefix) + 1
        return sorted({op[start:].split(".")[0] for op in _operators() if op.startswith(self._prefix + ".")})

    def __repr__(self) -> str:
        return f"<operators {self._prefix}.*>"


class _OpsModule(types.ModuleType):
    """This module, subscriptable: ``hf.ops["mine.rowsum"]``."""

    def __getitem__(self, name: str) -> Any:
        if not isinstance(name, str):
            raise TypeError(f"operator names are str, got {type(name).__name__}")
        try:
            return lookup(name)
        except AttributeError as exc:
            raise KeyError(str(exc)) from None


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return lookup(name)


def __dir__() -> list[str]:
    return sorted({op.split(".")[0] for op in _operators()})


sys.modules[__name__].__class__ = _OpsModule
