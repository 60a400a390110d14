"""The frontend object ``register_frontends`` registers: what ``hf.load`` calls."""
from __future__ import annotations

from typing import Any, Mapping, Sequence


class OnnxFrontend:
    """Reads ``.onnx`` files and in-memory ``onnx.ModelProto`` objects."""

    name = "onnx"
    suffixes = (".onnx",)

    def accepts(self, obj: Any) -> bool:
        # No onnx import here: the type's module says whether it is a ModelProto.
        return type(obj).__name__ == "ModelProto" and type(obj).__module__.startswith("onnx")

    def load(self, source: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, dtype: str | None = None):
        from .import_graph import import_model
        from .read_model import read_model

        model, _ = read_model(source)
        return import_model(model, input_shapes, float_dtype=dtype)
