"""Run graphs built from hidet_plugin_ops operators, for the tests of this folder.

`run_with_evaluator` schedules each operator's Task with the rule-based
auto-scheduler and executes the ScheduledTask's launches with the pure-Python IR
evaluator: slow, so keep shapes small. `run_compiled` goes through ``hf.compile``
once the driver exists. Both take the graph outputs and a ``{symbol: array}`` feed
and return numpy arrays.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from hidet_framework.graph import FlowGraph, Tensor
from hidet_framework.analysis.evaluator import Evaluator
from hidet_framework.ir.primitives import lookup_primitive
from hidet_framework.schedule import auto_schedule

# The math primitives the ops reference by name (registered by the backends, e.g.
# hidet_plugin_cpu.primitives). Used only where no backend registered them in this
# process, so the evaluator can still run; a registered one always wins.
_NUMPY_MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1.0 / np.sqrt(v),
    "tanh": np.tanh, "erf": lambda v: math.erf(float(v)), "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "pow": np.power, "min": np.fmin, "max": np.fmax,
}


def _fallback_primitives() -> dict[str, Any]:
    out = {}
    for name, fn in _NUMPY_MATH.items():
        for suffix, np_type in (("f32", np.float32), ("f64", np.float64)):
            full = f"{name}_{suffix}"
            if lookup_primitive(full) is None:
                def impl(*args, fn=fn, np_type=np_type):
                    with np.errstate(all="ignore"):
                        return np_type(fn(*(np_type(a) for a in args)))
                out[full] = impl
    return out


def _contiguous(array: Any) -> np.ndarray:
    # np.ascontiguousarray turns a 0-d array into a 1-d one; this keeps the shape.
    return np.array(array, order="C", copy=True)


def poisoned(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An output buffer whose unwritten elements show: NaN, an odd integer pattern,
    or alternating booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    if dtype.kind == "b":
        return (np.arange(int(np.prod(shape, dtype=np.int64))) % 2 == 0).reshape(shape)
    return np.full(shape, 0x5A, dtype)


def _graph(outputs: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray]) -> tuple[FlowGraph, list]:
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    return FlowGraph(list(feed), outs), outs


def _check_feed(feed: Mapping[Tensor, np.ndarray]) -> dict[int, np.ndarray]:
    values = {}
    for t, array in feed.items():
        array = _contiguous(array)
        if tuple(array.shape) != tuple(t.shape) or array.dtype != np.dtype(t.dtype.numpy_name):
            raise ValueError(f"feed for {t!r} is {array.dtype}{list(array.shape)}")
        values[t.uid] = array
    return values


def run_with_evaluator(outputs: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray],
                       target: str = "cpu") -> list[np.ndarray]:
    """Evaluate the graph: every operator's auto-scheduled launches, in order."""
    graph, outs = _graph(outputs, feed)
    values = _check_feed(feed)
    for t in graph.constants():
        values[t.uid] = _contiguous(t.storage)
    primitives = _fallback_primitives()
    for op in graph.nodes:
        scheduled = auto_schedule(op.task, target)
        buffers = {
            "input": [values[t.uid] for t in op.inputs],
            "output": [poisoned(t.shape, t.dtype.numpy_name) for t in op.outputs],
            "workspace": [poisoned(w.shape, w.dtype.numpy_name) for w in scheduled.workspace],
        }
        evaluator = Evaluator(scheduled.module, primitives)
        for name, args, scalars in scheduled.bind(buffers["input"], buffers["output"], buffers["workspace"]):
            evaluator.call_function(scheduled.module.functions[name], list(args + scalars))
        for t, array in zip(op.outputs, buffers["output"]):
            values[t.uid] = array
    return [values[t.uid] for t in outs]


def compile_available() -> bool:
    """Whether the driver (``hf.compile``) exists in this checkout."""
    try:
        import hidet_framework.driver as driver
    except ImportError:
        return False
    return hasattr(driver, "compile")


_COMPILED_PATH: dict[str, str | None] = {}


def compiled_path_problem(target: str = "cpu") -> str | None:
    """Why the compiled path cannot run an elementwise graph on `target` (None when it
    can). Probed once per process with the plugins registered at that moment; while
    the driver is being written the tests run on the evaluator instead."""
    if target not in _COMPILED_PATH:
        if not compile_available():
            _COMPILED_PATH[target] = "hidet_framework.driver has no compile() yet"
        else:
            try:
                from hidet_framework.graph import symbol
                import hidet_framework.ops as ops

                x = symbol((3, 5))
                out, = run_compiled(ops.add(ops.relu(x), 1.0), {x: np.arange(15, dtype=np.float32).reshape(3, 5) - 7},
                                    target)
                ok = np.array_equal(out, np.maximum(np.arange(15).reshape(3, 5) - 7, 0) + 1.0)
                _COMPILED_PATH[target] = None if ok else "hf.compile computed a wrong relu(x) + 1"
            except Exception as exc:  # the driver is another engineer's work in progress
                _COMPILED_PATH[target] = f"hf.compile failed on relu(x) + 1: {type(exc).__name__}: {exc}"
    return _COMPILED_PATH[target]


def run_compiled(outputs: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray],
                 target: str = "cpu") -> list[np.ndarray]:
    """Compile the graph with ``hf.compile`` and run it on the feed."""
    import hidet_framework.driver as driver

    graph, outs = _graph(outputs, feed)
    fn = driver.compile(graph, target=target)
    result = fn(*[_contiguous(a) for a in feed.values()])
    result = list(result) if isinstance(result, (list, tuple)) else [result]
    return [np.asarray(r) for r in result]


# The target `run` uses when a test names none: conftest.py's `op_target` fixture runs
# every operator test once per target (the cuda pass is marked `cuda`).
DEFAULT_TARGET = "cpu"


def run(outputs: Tensor | Sequence[Tensor], feed: Mapping[Tensor, np.ndarray],
        target: str | None = None) -> list[np.ndarray]:
    """The compiled path where the driver works, the evaluator otherwise."""
    target = target or DEFAULT_TARGET
    if target != "cpu":  # the evaluator stands in for the CPU compiler only
        return run_compiled(outputs, feed, target)
    if compiled_path_problem(target) is None:
        return run_compiled(outputs, feed, target)
    return run_with_evaluator(outputs, feed, target)


# ------------------------------------------------------------------ comparing

TOLERANCES = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 2e-5, "float64": 1e-12}


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any = None, tol: float | None = None) -> None:
    """`actual` against a (float64) reference: exact for bool/integers, by relative
    error with a per-dtype tolerance for floats; NaN/inf must match in place."""
    actual = np.asarray(actual)
    dtype = np.dtype(dtype or actual.dtype)
    assert actual.shape == np.shape(expected), f"shape {actual.shape} != expected {np.shape(expected)}"
    assert actual.dtype == dtype, f"dtype {actual.dtype} != expected {dtype}"
    if dtype.kind != "f":
        np.testing.assert_array_equal(actual, np.asarray(expected).astype(dtype))
        return
    tol = tol if tol is not None else TOLERANCES[dtype.name]
    np.testing.assert_allclose(actual.astype(np.float64), np.asarray(expected, np.float64), rtol=tol, atol=tol,
                               equal_nan=True)
