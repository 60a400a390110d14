"""hidet-framework: a deep-learning compiler in which the schedule is part of the program.

The top-level namespace stays cheap to import: public names are resolved on first use
from the module that defines them (see ``_LAZY_EXPORTS``). To export a new name, add
one line there — nothing is imported until somebody asks for it.
"""
from __future__ import annotations

import importlib
from typing import Any

from hidet_framework import _moved_modules

__version__ = "0.1.0"
_moved_modules.install()  # old import paths of moved modules keep working

# public name -> "module" (the attribute of the same name) or "module:attribute".
_LAZY_EXPORTS: dict[str, str] = {
    "plugin_host": "hidet_framework.extension",
    "hookimpl": "hidet_framework.extension",
    "symbol": "hidet_framework.graph",
    "constant": "hidet_framework.graph",
    "trace": "hidet_framework.graph",
    "compile": "hidet_framework.driver",
    "ops": "hidet_framework.driver",  # the hidet_framework.ops module, which the driver imports
    "load": "hidet_framework.frontend",
    "load_compiled": "hidet_framework.runtime.saved_graph",
}

__all__ = ["__version__", *_LAZY_EXPORTS]


def __getattr__(name: str) -> Any:
    target = _LAZY_EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'hidet_framework' has no attribute {name!r}")
    module_name, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module_name), attribute or name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
