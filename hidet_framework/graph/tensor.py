"""Symbolic tensors and operators: what tracing builds.

A `Tensor` is a value of a graph: a graph input (``hf.symbol``), a constant (holds a
numpy array), or the output of an `Operator`. An `Operator` holds the `Task` that
defines its math and the attributes it was made with; plugins create them through the
operator functions they register (``hf.ops.relu(x)``).
"""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from hidet_framework.compute.task import Task
from hidet_framework.ir.dtypes import DataType, data_type

_ids = itertools.count()


class ShapeError(ValueError):
    """An operator was applied to tensors whose shapes or dtypes do not fit."""


class Tensor:
    """A symbolic tensor.

    :param shape: static extents.
    :param dtype: element type.
    :param producer: the operator computing it (``None`` for inputs and constants).
    :param index: which output of `producer` it is.
    :param storage: the value of a constant tensor (a numpy array).
    :param name: a readable name (not unique).
    """

    __slots__ = ("shape", "dtype", "producer", "index", "storage", "name", "uid")

    def __init__(self, shape: Sequence[int], dtype: Any, producer: "Operator | None" = None,
                 index: int = 0, storage: Optional[np.ndarray] = None, name: str = "") -> None:
        self.shape = tuple(_extent(s, shape) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ShapeError(f"negative extent in shape {self.shape}")
        self.dtype: DataType = data_type(dtype)
        self.producer = producer
        self.index = index
        self.storage = storage
        self.uid = next(_ids)
        self.name = name or f"t{self.uid}"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def is_constant(self) -> bool:
        return self.storage is not None

    def is_graph_input(self) -> bool:
        return self.producer is None and self.storage is None

    def computed_from_constants(self, max_depth: int = 65) -> bool:
        """Whether this tensor is a constant or computed from constants only (constant
        folding will make it one), looking at most `max_depth` producers up."""
        if self.is_constant():
            return True
        if self.producer is None or max_depth < 1:
            return False
        return all(t.computed_from_constants(max_depth - 1) for t in self.producer.inputs)

    def __repr__(self) -> str:
        kind = "const" if self.is_constant() else ("input" if self.producer is None else self.producer.name)
        return f"Tensor({self.name}: {self.dtype.short}{list(self.shape)}, {kind})"

    # Python operators resolve the registered elementwise operators by name, so they
    # work whenever a plugin provides them.
    def _op(self, name: str, *args: Any) -> "Tensor":
        from hidet_framework import ops

        return getattr(ops, name)(*args)

    def __add__(self, other): return self._op("add", self, other)
    def __radd__(self, other): return self._op("add", other, self)
    def __sub__(self, other): return self._op("sub", self, other)
    def __rsub__(self, other): return self._op("sub", other, self)
    def __mul__(self, other): return self._op("mul", self, other)
    def __rmul__(self, other): return self._op("mul", other, self)
    def __truediv__(self, other): return self._op("div", self, other)
    def __rtruediv__(self, other): return self._op("div", other, self)
    def __neg__(self): return self._op("neg", self)
    def __matmul__(self, other): return self._op("matmul", self, other)


class Operator:
    """One operator application in a graph.

    :param name: the registered operator name (e.g. ``"relu"``).
    :param inputs: input tensors, matching ``task.inputs`` in order, shape and dtype.
    :param task: the compute definition.
    :param attributes: the attributes the operator was made with.
    """

    def __init__(self, name: str, inputs: Sequence[Tensor], task: Task,
                 attributes: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.inputs = tuple(inputs)
        self.task = task
        self.attributes = dict(attributes or {})
        if len(self.inputs) != len(task.inputs):
            raise ShapeError(f"{name}: the task takes {len(task.inputs)} inputs, got {len(self.inputs)}")
        for k, (t, node) in enumerate(zip(self.inputs, task.inputs)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name}: input {k} must be a Tensor, got {type(t).__name__}")
            if tuple(t.shape) != tuple(node.shape) or t.dtype is not node.dtype:
                raise ShapeError(f"{name}: input {k} is {t.dtype.short}{list(t.shape)}, "
                                 f"the task expects {node.dtype.short}{list(node.shape)}")
        self.outputs = tuple(Tensor(out.shape, out.dtype, producer=self, index=k, name=f"{name}_out{k}")
                             for k, out in enumerate(task.outputs))

    def __repr__(self) -> str:
        ins = ", ".join(t.name for t in self.inputs)
        return f"{self.name}({ins})"


def _extent(value: Any, shape: Any) -> int:
    """An extent as an int: Python and numpy integers only (``int(2.7)`` would quietly
    make a (2.7, 3) shape (2, 3))."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ShapeError(f"shape {tuple(shape)!r}: extent {value!r} is not an integer")
    return int(value)


def symbol(shape: Sequence[int], dtype: Any = "float32", name: str = "") -> Tensor:
    """A graph input of the given shape and dtype."""
    return Tensor(shape, dtype, name=name)


def constant(value: Any, dtype: Any = None, name: str = "") -> Tensor:
    """A constant tensor (weights); its array is copied."""
    array = np.array(value, dtype=None if dtype is None else data_type(dtype).numpy_name)
    if array.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)
    # np.array, not np.ascontiguousarray, which turns a 0-d array into a 1-d one; the
    # given dtype wins over the storage's (bfloat16 is stored as uint16 bits)
    return Tensor(array.shape, array.dtype if dtype is None else data_type(dtype),
                  storage=np.array(array, order="C", copy=True), name=name)
