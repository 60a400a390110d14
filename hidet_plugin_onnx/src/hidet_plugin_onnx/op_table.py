"""The ONNX op types this frontend converts: op type -> `Converter`.

A converter names the operators it needs (looked up by name in the operator registry,
so a missing plugin is reported before anything is converted) and may fold the node
with numpy when all its inputs are known at import (shape subgraphs: Shape, Gather,
Concat, Unsqueeze, Range, ConstantOfShape...).
"""
from __future__ import annotations

from typing import Any, Callable

import attrs
import numpy as np

from .node_context import NodeContext, operator_plugin

# Folding is for shape arithmetic and layout of constants; larger results stay
# operators (the graph's constant folding runs them compiled).
FOLD_LIMIT = 1 << 22


@attrs.frozen
class Converter:
    op_type: str
    convert_fn: Callable[[NodeContext], Any]
    needs: tuple = ()
    fold: Callable[[NodeContext], Any] | None = None
    # (node, {name: array known at import}) -> the operators a special-case path needs
    # for this node, or None when it has none (e.g. ReduceMean over H, W of an NCHW
    # tensor is global average pooling)
    alternative: Callable[[Any, dict], tuple | None] | None = None

    def convert(self, ctx: NodeContext) -> Any:
        if self.fold is not None and ctx.all_known():
            sizes = [v.size for v in ctx.inputs if v is not None]
            if max(sizes, default=0) <= FOLD_LIMIT:
                outputs = self.fold(ctx)
                outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
                return [np.asarray(o) for o in outputs]
        return self.convert_fn(ctx)


CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, needs: tuple = (), fold: Callable | None = None,
              alternative: Callable | None = None) -> Callable:
    def decorate(fn: Callable) -> Callable:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise RuntimeError(f"ONNX op {op_type} has two converters")
            CONVERTERS[op_type] = Converter(op_type, fn, tuple(needs), fold, alternative)
        return fn
    return decorate


def missing_requirements(op_type: str, node: Any = None, known: dict | None = None) -> str | None:
    """Why `op_type` (node `node`) cannot be converted with the installed plugins
    (None when it can)."""
    from hidet_framework.extension import plugin_host

    host = plugin_host()
    entry = CONVERTERS[op_type]
    missing = [name for name in entry.needs if name not in host.operators]
    if not missing:
        return None
    if entry.alternative is not None and node is not None:
        other = entry.alternative(node, known or {})
        if other is not None and all(name in host.operators for name in other):
            return None
    plugins = sorted({operator_plugin(n) for n in missing})
    failed = {info.distribution: info for info in host.report() if info.error is not None}
    states = []
    for plugin in plugins:
        info = failed.get(plugin)
        states.append(f"{plugin} (installed but failed to load: {info.error})" if info else f"{plugin} (not installed)")
    return f"needs operator{'s' if len(missing) > 1 else ''} {', '.join(repr(n) for n in missing)}, provided by " \
           + ", ".join(states)


def claimed_op_types() -> list[str]:
    return sorted(CONVERTERS)


# the converter modules fill CONVERTERS when imported
from . import convert_einsum, convert_elementwise, convert_nn, convert_tensor  # noqa: E402,F401
