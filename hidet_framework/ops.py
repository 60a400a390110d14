"""``hidet_framework.ops.<name>``: the operators plugins register.

Nothing is defined here: each attribute is looked up in the operator registry the
``register_operators`` hooks fill, so installing a plugin adds operators.
"""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from hidet_framework.extension import plugin_host

    host = plugin_host()
    operators = host.operators
    if name in operators:
        return operators[name]
    report = host.report()
    plugins = sorted(info.name for info in report if not info.error)
    # a plugin that failed to load may be the one that registers it: say so first
    failed = [f"{info.name} ({info.distribution or 'no distribution'}): {info.error}"
              for info in report if info.error is not None]
    hint = f"plugins that failed to load, one of which may provide it: {'; '.join(failed)}; " if failed else ""
    raise AttributeError(
        f"no installed plugin registers an operator named {name!r} ({hint}"
        f"installed plugins: {', '.join(plugins) or 'none'}; "
        f"known operators: {', '.join(sorted(operators)) or 'none'})")


def __dir__() -> list[str]:
    from hidet_framework.extension import plugin_host

    return sorted(plugin_host().operators)
