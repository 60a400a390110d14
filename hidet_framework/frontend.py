"""``hf.load``: a model file (or an in-memory model) to a graph ready for ``hf.compile``.

The core knows no model format. Frontends come from plugins through
``register_frontends``; a frontend is an object with

- ``suffixes``: the file suffixes it reads (``(".onnx",)``),
- ``accepts(obj) -> bool``: whether it reads this in-memory object (a ModelProto...),
- ``load(source, input_shapes, dtype=...) -> FlowGraph`` (``dtype`` passed only when given).

`load` picks the frontend by ``format=`` (its registered name), else by the file
suffix, else by asking each frontend whether it accepts the object.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from hidet_framework.extension import plugin_host
from hidet_framework.graph.flow_graph import FlowGraph

__all__ = ["load", "FrontendNotFoundError"]


class FrontendNotFoundError(LookupError):
    """No installed frontend reads the given model."""


def _installed() -> str:
    frontends = plugin_host().frontends
    if not frontends:
        return ("no frontend is installed (install one, e.g. hidet-plugin-onnx: "
                "pip install -e hidet_plugin_onnx)")
    return "installed frontends: " + ", ".join(
        f"{name} ({', '.join(getattr(f, 'suffixes', ())) or 'no suffix'})" for name, f in sorted(frontends.items()))


def _failed_frontend_plugins() -> str:
    failed = [info for info in plugin_host().report() if info.error is not None]
    if not failed:
        return ""
    return "; plugins that failed to load: " + ", ".join(f"{i.name} ({i.error})" for i in failed)


def _pick(source: Any, format: str | None) -> Any:  # noqa: A002 - the user-facing name
    frontends = plugin_host().frontends
    if format is not None:
        if format not in frontends:
            raise FrontendNotFoundError(f"format {format!r}: {_installed()}{_failed_frontend_plugins()}")
        return frontends[format]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        suffix = os.path.splitext(path)[1].lower()
        for frontend in frontends.values():
            if suffix in tuple(s.lower() for s in getattr(frontend, "suffixes", ())):
                return frontend
        raise FrontendNotFoundError(f"no frontend reads {path!r} (suffix {suffix or 'none'!r}); pass format= to "
                                    f"choose one; {_installed()}{_failed_frontend_plugins()}")
    for frontend in frontends.values():
        accepts = getattr(frontend, "accepts", None)
        if accepts is not None and accepts(source):
            return frontend
    raise FrontendNotFoundError(f"no frontend reads a {type(source).__name__} object; {_installed()}"
                                f"{_failed_frontend_plugins()}")


def load(source: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
         format: str | None = None, dtype: str | None = None) -> FlowGraph:  # noqa: A002
    """Read a model into a FlowGraph.

    :param source: a file path, or an in-memory model a frontend accepts (an
        ``onnx.ModelProto``).
    :param input_shapes: graph input name -> static shape, for inputs whose shape has
        symbolic dimensions (or to override a static one).
    :param format: the frontend's registered name (``"onnx"``); by default the file
        suffix or the object's type decides.
    :param dtype: the float type the model computes in (``"float16"``...): float32
        weights, inputs and casts become this type. None keeps the model's types.
    """
    if input_shapes is not None and not isinstance(input_shapes, Mapping):
        raise TypeError(f"input_shapes must be a mapping input name -> shape, got {type(input_shapes).__name__}")
    frontend = _pick(source, format)
    options = {} if dtype is None else {"dtype": dtype}
    graph = frontend.load(source, dict(input_shapes or {}), **options)
    if not isinstance(graph, FlowGraph):
        raise TypeError(f"frontend {type(frontend).__name__}.load returned {type(graph).__name__}, not a FlowGraph")
    return graph
