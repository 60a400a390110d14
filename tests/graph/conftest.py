"""Dummy operators for graph tests, built from tiny Tasks: the graph layer is tested
without the ops plugin. Tests get them through the `dummy` fixture (test modules
cannot import a conftest under importlib mode)."""
from __future__ import annotations

import types

import numpy as np
import pytest

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.graph import Operator, Tensor


def scale(x: Tensor, factor: float = 2.0) -> Tensor:
    """y = x * factor."""
    a = tensor_input("a", x.dtype, x.shape)
    y = compute("y", x.shape, lambda *i: a[i] * factor)
    return Operator("scale", [x], Task("scale", [a], [y], attributes={"factor": factor}),
                    {"factor": factor}).outputs[0]


def add(x: Tensor, z: Tensor) -> Tensor:
    """Elementwise sum of two same-shape tensors."""
    a, b = tensor_input("a", x.dtype, x.shape), tensor_input("b", z.dtype, z.shape)
    y = compute("y", x.shape, lambda *i: a[i] + b[i])
    return Operator("add", [x, z], Task("add", [a, b], [y])).outputs[0]


def mix(x: Tensor, z: Tensor, n: int) -> Tensor:
    """1-D tensors of any lengths -> length n: y[i] = x[i % len(x)] + 0.5 * z[i % len(z)]
    (lets random DAGs have buffers of many sizes)."""
    a, b = tensor_input("a", x.dtype, x.shape), tensor_input("b", z.dtype, z.shape)
    y = compute("y", [n], lambda i: a[i % x.shape[0]] + b[i % z.shape[0]] * 0.5)
    return Operator("mix", [x, z], Task("mix", [a, b], [y], attributes={"n": n}), {"n": n}).outputs[0]


def rowsum(x: Tensor) -> Tensor:
    """A 2-D tensor's row sums (a reduction)."""
    a = tensor_input("a", x.dtype, x.shape)
    y = compute("y", x.shape[:1], lambda i: reduce([x.shape[1]], lambda k: a[i, k], "sum"))
    return Operator("rowsum", [x], Task("rowsum", [a], [y])).outputs[0]


def softmax_rows(x: Tensor) -> Tensor:
    """A two-stage task: the row maxima are an intermediate the auto-scheduler keeps in a
    task workspace."""
    a = tensor_input("a", x.dtype, x.shape)
    n = x.shape[1]
    mx = compute("mx", x.shape[:1], lambda i: reduce([n], lambda k: a[i, k], "max"))
    y = compute("y", x.shape, lambda i, j: a[i, j] - mx[i])
    return Operator("center", [x], Task("center", [a], [y])).outputs[0]


@pytest.fixture
def dummy() -> types.SimpleNamespace:
    return types.SimpleNamespace(scale=scale, add=add, mix=mix, rowsum=rowsum, center=softmax_rows)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()
