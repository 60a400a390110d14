"""Issue 12 item 1, at the source level (no run): a function that can address more
than 2^30 elements computes its indices in int64; every smaller one is untouched, so
its generated source stays byte-identical."""
from __future__ import annotations

import re

import pytest

import hidet_framework as hf
from hidet_framework.extension import plugin_host
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import TensorElement, var
from hidet_framework.schedule import auto_schedule
from hidet_framework.lowering.pipeline import lower, lowering_pipeline, run_pipeline
from hidet_framework.lowering.widen_index_arithmetic import (
    WIDE_THRESHOLD, WidenIndexArithmetic, _is_index_arithmetic, max_elements,
)


def _relu_task(shape, dtype="int8"):
    return hf.ops.relu(hf.symbol(shape, dtype)).producer.task


def _sources(module, kind="cpu"):
    backend = plugin_host().backend_for(kind)
    target = backend.detect_target()
    widened = backend.codegen(lower(module, kind), target)
    passes = [p for p in lowering_pipeline(kind) if not isinstance(p, WidenIndexArithmetic)]
    plain = backend.codegen(run_pipeline(module, passes), target)
    return widened, plain


def _body(source: str) -> str:
    return source[source.index("/* hidet function"):]


@pytest.mark.parametrize("shape", [(3, 5), (1, WIDE_THRESHOLD), (WIDE_THRESHOLD // 2, 2), (7,)])
def test_small_kernels_are_byte_identical(shape):
    widened, plain = _sources(auto_schedule(_relu_task(shape), "cpu").module)
    assert widened == plain
    assert "int64_t i" not in _body(widened)


@pytest.mark.parametrize("shape", [(1, WIDE_THRESHOLD + 1), (2**31 + 8,), (3, 2**30), (1, 2**31 + 8)])
def test_large_kernels_index_in_int64(shape):
    widened, plain = _sources(auto_schedule(_relu_task(shape), "cpu").module)
    body = _body(widened)
    assert "int32_t" not in body, body
    assert re.search(r"const int64_t i\d+ = ", body), body
    if max(shape) >= 2**31:  # what the issue saw: the axis let-bound in int32 from an int64 loop
        assert re.search(r"const int32_t i\d+ = ", _body(plain))


def test_threshold_counts_elements_of_every_tensor_parameter():
    task = _relu_task((1, WIDE_THRESHOLD + 1))
    fn = next(iter(auto_schedule(task, "cpu").module.functions.values()))
    assert max_elements(fn) == WIDE_THRESHOLD + 1
    small = next(iter(auto_schedule(_relu_task((1, WIDE_THRESHOLD)), "cpu").module.functions.values()))
    assert max_elements(small) == WIDE_THRESHOLD


def test_reduction_over_a_huge_input_widens_its_reduction_axes():
    x = hf.symbol((1, 1, 2**15, 2**15 + 1), "float32")  # output of 1 element, input over 2^30
    body = _body(_sources(auto_schedule(hf.ops.global_avg_pool2d(x).producer.task, "cpu").module)[0])
    assert "int32_t" not in body, body


def test_matmul_template_with_a_huge_operand_indexes_in_int64():
    a, b = hf.symbol((3, 8), "float32"), hf.symbol((8, 2**27 + 1), "float32")  # b: 2^30 + 8 elements
    op = hf.ops.matmul(a, b).producer
    backend = plugin_host().backend_for("cpu")
    target = backend.detect_target()
    templates = plugin_host().templates.templates_for("matmul", "cpu")
    assert templates
    for template in templates:
        params = template.bounded_space(target, 0)
        if not params or not template.applies(op.task, op.attributes):
            continue
        scheduled = template.build(op.task, op.attributes, params[0], target)
        source = backend.codegen(lower(scheduled.module, "cpu"), target)
        loops = re.findall(r"for \((\w+) \w+ = ", _body(source))
        lets = re.findall(r"const (\w+) \w+ = ", _body(source))
        assert loops and set(loops) == {"int64_t"}, (template.name, set(loops))
        assert "int32_t" not in lets, (template.name, lets)


def test_symbolic_extents_count_with_their_type_range():
    from hidet_framework.ir.func import Function
    from hidet_framework.ir.stmt import SeqStmt
    from hidet_framework.ir.types import TensorType

    n, m = var("n", dtypes.int32), var("m", dtypes.int32)
    one_d = Function("f", [n, var("a", TensorType(dtypes.float32, (n,)))], SeqStmt(()), kind="cpu_kernel")
    two_d = Function("g", [n, m, var("a", TensorType(dtypes.float32, (m, n)))], SeqStmt(()), kind="cpu_kernel")
    assert max_elements(one_d) == 2**31 - 1 and max_elements(two_d) == (2**31 - 1) ** 2


def test_values_loaded_from_memory_are_not_index_arithmetic():
    i = var("i", dtypes.int32)
    t = var("t", dtypes.int32)
    assert _is_index_arithmetic(i * 4 + 3)
    assert not _is_index_arithmetic(TensorElement(var("x", __import__("hidet_framework").ir.types.PointerType(dtypes.int32)), (i,)) + 1)
    assert not _is_index_arithmetic(var("f", dtypes.float32) + t)
