"""`HidetBackend`: ONNX's backend interface (``onnx.backend.base.Backend``) on top of
``hf.load`` + ``hf.compile``, so ONNX's own node tests run through this frontend.

Shapes are static here. When a node needs the value of a graph input at import (a
Reshape's shape, a Slice's starts...), the prepared rep compiles at the first `run`
with that input's value bound as a constant, once per distinct value (shape
specialization); everything else is compiled at `prepare`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

from .errors import KnownValueRequiredError

TARGET = "cpu"


def _compile(model: onnx.ModelProto, target: str, space: int) -> Any:
    import hidet_framework as hf

    return hf.compile(hf.load(model), target=target, space=space)


def _bind_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs named in `values` are initializers."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    keep = [i for i in bound.graph.input if i.name not in values]
    del bound.graph.input[:]
    bound.graph.input.extend(keep)
    for name, value in values.items():
        bound.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return bound


def _array(value: Any) -> np.ndarray:
    """A numpy array from an array or a TensorProto (some node tests feed those)."""
    if isinstance(value, onnx.TensorProto):
        from .dtypes import to_array

        return to_array(value)
    return np.asarray(value)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint16) if array.dtype.name == "bfloat16" else array


def _as_bfloat16(array: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return np.asarray(array).view(ml_dtypes.bfloat16)


class HidetRep(BackendRep):
    """A prepared model: compiled now, or per distinct value of the graph inputs that
    must be known at import."""

    def __init__(self, model: onnx.ModelProto, target: str, space: int) -> None:
        self.model, self.target, self.space = model, target, space
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self.bound_names: list[str] = []
        self._compiled: dict[bytes, Any] = {}
        try:
            self._compiled[b""] = _compile(model, target, space)
        except KnownValueRequiredError as exc:
            if exc.graph_input is None and not self._small_integer_inputs():
                raise
            self.pending = exc

    def _small_integer_inputs(self) -> list[str]:
        """Graph inputs that look like shapes, axes or pads: integer, at most 64 values."""
        out = []
        for i in self.model.graph.input:
            t = i.type.tensor_type
            dims = [d.dim_value for d in t.shape.dim]
            if i.name in self.input_names and t.elem_type in (6, 7, 9) and all(dims) and int(np.prod(dims)) <= 64:
                out.append(i.name)
        return out

    def _to_bind(self, exc: KnownValueRequiredError, feed: dict) -> list[str]:
        """The inputs to bind next: the one named, else every small integer input (a
        value computed from them is needed)."""
        if exc.graph_input is not None and exc.graph_input not in self.bound_names:
            return [exc.graph_input]
        return [n for n in self._small_integer_inputs() if n not in self.bound_names and n in feed]

    def _for(self, feed: dict[str, np.ndarray]) -> Any:
        if not self._compiled and not self.bound_names:
            self.bound_names = self._to_bind(self.pending, feed)
        while True:
            key = b"".join(np.ascontiguousarray(feed[n]).tobytes() + str(feed[n].shape).encode()
                           for n in self.bound_names)
            if key in self._compiled:
                return self._compiled[key]
            try:
                compiled = _compile(_bind_inputs(self.model, {n: feed[n] for n in self.bound_names}),
                                    self.target, self.space)
            except KnownValueRequiredError as exc:
                more = self._to_bind(exc, feed)
                if not more:
                    raise
                self.bound_names += more
                continue
            self._compiled[key] = compiled
            return compiled

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feed = {k: _array(v) for k, v in inputs.items()}
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feed = {n: _array(v) for n, v in zip(self.input_names, inputs)}
        compiled = self._for(feed)
        # bfloat16 travels as its uint16 bit pattern (numpy has no bfloat16)
        args = [_bits(feed[n]) for n in self.input_names if n not in self.bound_names]
        out = compiled(*args)
        out = out if isinstance(out, tuple) else (out,)
        kinds = [t.dtype.name for t in compiled.graph.outputs]
        return tuple(_as_bfloat16(o) if kind == "bfloat16" else o for o, kind in zip(out, kinds))


class HidetBackend(Backend):
    """``onnx.backend`` entry points: ``prepare``, ``run_model``, ``run_node``,
    ``supports_device`` (the CPU; CUDA where its backend is usable)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> HidetRep:
        super().prepare(model, device, **kwargs)
        return HidetRep(model, "cuda" if str(device).upper().startswith("CUDA") else TARGET,
                        int(kwargs.get("space", 0)))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        name = str(device).upper()
        if name.startswith("CPU"):
            return True
        if name.startswith("CUDA"):
            from hidet_framework.extension import plugin_host

            try:
                return bool(plugin_host().backend_for("cuda").availability())
            except LookupError:
                return False
        return False


prepare = HidetBackend.prepare
run_model = HidetBackend.run_model
supports_device = HidetBackend.supports_device
