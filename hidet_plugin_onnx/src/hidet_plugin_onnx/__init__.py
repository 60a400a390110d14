"""hidet-plugin-onnx: reads ONNX models into hidet-framework graphs (``hf.load``), and
runs ONNX's backend tests through `backend.HidetBackend`.

ONNX nodes become operators looked up by name in the operator registry (the
``register_operators`` hooks of other plugins fill it); this plugin imports no other
plugin. Importing it is cheap: ``onnx`` is imported when a model is read.
"""
from __future__ import annotations

from hidet_framework.extension import hookimpl

from .frontend import OnnxFrontend


@hookimpl
def register_frontends(register) -> None:
    register("onnx", OnnxFrontend())
