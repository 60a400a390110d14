"""What a converter sees of one ONNX node: its attributes, its inputs (hidet Tensors
or numpy arrays known at import) and the operators registered by name."""
from __future__ import annotations

from typing import Any

import numpy as np

from hidet_framework.graph import Tensor, constant

from .errors import KnownValueRequiredError, OnnxImportError
from .names import sanitize, shown

# Operator name -> the distribution expected to register it (for "which plugin could
# provide it" in errors); names not listed belong to hidet-plugin-ops.
OPERATOR_PLUGINS = {
    **{name: "hidet-plugin-reduce" for name in (
        "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l2", "reduce_sum_square",
        "argmax", "argmin", "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "instance_norm",
        "group_norm", "cumsum")},
    "matmul": "hidet-plugin-matmul", "batch_matmul": "hidet-plugin-matmul",
}


def operator_plugin(name: str) -> str:
    return OPERATOR_PLUGINS.get(name, "hidet-plugin-ops")


class NodeContext:
    """One node being converted.

    :param node: the NodeProto. :param inputs: per input slot, a Tensor, a numpy
        array (known at import) or None (an omitted optional input).
    :param opset: the model's default-domain opset.
    """

    def __init__(self, node: Any, inputs: list[Any], opset: int) -> None:
        from onnx import helper

        self.node, self.inputs, self.opset = node, inputs, opset
        self.float_dtype: str | None = None  # set when the model is imported to compute in another float type
        self.attrs: dict[str, Any] = {}
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            self.attrs[a.name] = value

    @property
    def where(self) -> str:
        return f"node {shown(self.node.name or self.node.op_type)} ({self.node.op_type})"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has(self, k: int) -> bool:
        return k < len(self.inputs) and self.inputs[k] is not None

    def is_known(self, k: int) -> bool:
        return self.has(k) and isinstance(self.inputs[k], np.ndarray)

    def all_known(self) -> bool:
        return all(v is None or isinstance(v, np.ndarray) for v in self.inputs)

    def known(self, k: int, what: str) -> np.ndarray:
        """Input `k` as a numpy array; it must be known at import (a constant, or
        computed from shapes and constants only)."""
        if not self.has(k):
            raise self.error(f"needs its {what} input")
        value = self.inputs[k]
        if not isinstance(value, np.ndarray):
            graph_input = self.node.input[k] if isinstance(value, Tensor) and value.is_graph_input() else None
            raise KnownValueRequiredError(
                f"{self.where}: its {what} input must be known when the model is imported (a constant or "
                f"computed from shapes); here it depends on graph inputs, which needs dynamic shapes "
                f"(not supported)", graph_input)
        return value

    def ints(self, k: int, what: str) -> list[int]:
        return [int(v) for v in np.asarray(self.known(k, what)).reshape(-1)]

    def tensor(self, k: int) -> Tensor:
        """Input `k` as a Tensor (a known array becomes a constant)."""
        if not self.has(k):
            raise self.error(f"input {k} is missing")
        return self.as_tensor(self.inputs[k], k)

    def as_tensor(self, value: Any, k: int = 0) -> Tensor:
        if isinstance(value, Tensor):
            return value
        name = self.node.input[k] if k < len(self.node.input) else ""
        array = np.asarray(value)
        if array.dtype.name == "bfloat16":  # the framework stores bfloat16 as its uint16 bits
            return constant(array.view(np.uint16), dtype="bfloat16", name=sanitize(name, "const"))
        return constant(array, name=sanitize(name, "const"))

    def op(self, name: str) -> Any:
        from hidet_framework.extension import plugin_host

        operators = plugin_host().operators
        if name not in operators:
            raise self.error(f"needs operator {name!r}, provided by {operator_plugin(name)} (not installed)")
        return operators[name]

    def error(self, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.where}: {message}")
