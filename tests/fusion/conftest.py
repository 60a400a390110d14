"""Shared pieces of the fusion tests: the two targets, a row-sum reduction operator
(no plugin registers reductions yet), and `check`, which compiles a graph fused and
unfused, runs both on fresh random inputs and compares them with a float64 reference.
Tests get them through fixtures (test modules cannot import a conftest under
importlib mode)."""
from __future__ import annotations

import os
import types
from typing import Callable, Sequence

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.extension import plugin_host
from hidet_framework.graph import Operator, Tensor


def _need_target(target: str) -> None:
    if target == "cpu" and not driver.host_target() is not None:
        pytest.skip("the CPU backend (gcc) or the lowering pipeline is not usable here")
    if target == driver.EVALUATOR_TARGET:
        # the evaluator runs erf/tanh/exp through the math primitives a backend registers
        pytest.importorskip("hidet_plugin_cpu.primitives")


def _need_ops(*names: str) -> None:
    missing = [n for n in names if n not in plugin_host().operators]
    if missing:
        pytest.skip(f"no installed plugin registers {', '.join(missing)}")


def row_sum(x: Tensor) -> Tensor:
    """Sums over the last axis of a 2-D tensor: a reduction anchor."""
    a = tensor_input("a", x.dtype, x.shape)
    y = compute("y", x.shape[:1], lambda i: reduce([x.shape[1]], lambda k: a[i, k], "sum"))
    return Operator("row_sum", [x], Task("row_sum", [a], [y])).outputs[0]


def check(target: str, outputs: Sequence[Tensor], inputs: Sequence[Tensor],
          reference: Callable[..., Sequence[np.ndarray]], rng: np.random.Generator,
          rtol: float = 1e-4, atol: float = 1e-5) -> tuple:
    """Compile fused and unfused on `target`, run both on fresh random inputs, compare
    with `reference` (float64 in, arrays out). Returns (fused, unfused) compiled graphs."""
    _need_target(target)
    graph = hf.trace(list(outputs), inputs=list(inputs))
    fused = hf.compile(graph, target=target)
    unfused = hf.compile(graph, target=target, fusion=False)
    for _ in range(2):  # fresh inputs twice: nothing may depend on a previous call
        arrays = [rng.standard_normal(t.shape).astype(t.dtype.numpy_name) for t in inputs]
        want = reference(*[a.astype(np.float64) for a in arrays])
        for fn in (fused, unfused):
            got = fn(*arrays)
            got = [got] if len(outputs) == 1 else list(got)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fused, unfused


@pytest.fixture
def fx() -> types.SimpleNamespace:
    return types.SimpleNamespace(check=check, row_sum=row_sum, need_ops=_need_ops, need_target=_need_target)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random inputs every run; the seed is printed (shown when the test fails)."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed} for {request.node.name}")
    return np.random.default_rng(seed)
