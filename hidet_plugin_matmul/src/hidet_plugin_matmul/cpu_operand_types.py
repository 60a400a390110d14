"""Element types of the CPU matmul templates' operands.

A, B and C may each be float32, bfloat16 or float16. The kernels compute in float32
whatever they are: the packing loops are A's and B's only readers and copy into float32
panels (the C codegen widens a half value as it reads it: bfloat16 by a shift of its
bits, float16 by a conversion), the micro-kernel is the float32 one, and C is written
once per element by the final store, which rounds to C's type (bfloat16: to nearest
even, ``hidet_f32_to_bf16``). So a half model's matmul costs a float32 matmul plus the
conversions in the packing (O(MK + KN), against O(MNK) FMAs) and accumulates in float32.
"""
from __future__ import annotations

from typing import Any

from hidet_framework.lang import bf16, f16, f32

__all__ = ["OPERAND_DTYPES", "FLOAT32_OPERANDS", "operand_annotations", "task_operand_dtypes"]

_ANNOTATIONS = {"float32": f32, "bfloat16": bf16, "float16": f16}
OPERAND_DTYPES = tuple(_ANNOTATIONS)
FLOAT32_OPERANDS = ("float32", "float32", "float32")


def operand_annotations(dtypes: tuple) -> tuple:
    """The script annotations (``f32``, ``bf16``, ``f16``) of A, B and C's element types."""
    try:
        return tuple(_ANNOTATIONS[str(d)] for d in dtypes)
    except KeyError as e:
        raise ValueError(f"CPU matmul: operand element type {e.args[0]!r} is not one of {OPERAND_DTYPES}") from None


def task_operand_dtypes(task: Any) -> tuple:
    """(A, B, C) element type names of a matmul task (two inputs, one output)."""
    (a, b), (c,) = task.inputs, task.outputs
    return a.dtype.name, b.dtype.name, c.dtype.name
