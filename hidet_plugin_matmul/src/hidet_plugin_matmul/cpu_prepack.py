"""Short-M matmul with a constant B: pack the weights once, at compile time.

With M of 1 to 32 rows (a decoder's token, a small batch), packing B inside the kernel
costs as much as the multiplication: every call would read the K x N weights, write a
packed copy and read it again; up to a few hundred rows (a sequence of 128 tokens) it
still costs a large share (see MAX_ROWS). Weights are constants, so the graph rewrite rule
`prepack_constant_b` (CPU only: the layout follows the CPU's SIMD width) replaces

    matmul(a, B)            a: [rows, K] (rows <= MAX_ROWS), B [K, N] computed from constants
                            only, K * N >= MIN_WEIGHT_ELEMENTS
by
    matmul_prepacked(a, matmul_pack_b(B))

``matmul_pack_b`` is an injective operator over constants, so constant folding
evaluates it once while compiling: the graph keeps B as ``[ceil(N / nr), K, nr]``
panels (zero past N) and the kernel (`cpu_gemv.py`) streams each panel contiguously.
``nr`` comes from the machine's vector width and register count (`panel_width`).
A bfloat16/float16 matmul is rewritten too: its panels keep the weights' 2 bytes where
the kernel can widen them as it loads them (`cpu_half_panels.py`: bfloat16 always,
float16 with vcvtph2ps), else they are float32 (`pack_b`).
"""
from __future__ import annotations

from typing import Any, Callable

from hidet_framework.compute import Task, compute, reduce, tensor_input
from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, const, if_then_else

from hidet_plugin_matmul import cpu_half_panels
from hidet_plugin_matmul.cpu_space import target_facts

__all__ = ["MAX_ROWS", "PACK_OPERATOR", "PREPACKED_OPERATOR", "panel_width", "pack_b", "matmul_prepacked",
           "prepack_constant_b", "PREPACK_RULE"]

PACK_OPERATOR = "matmul_pack_b"
PREPACKED_OPERATOR = "matmul_prepacked"
# Up to this many rows the prepacked kernel wins. At 32 rows packing B per call costs
# as much as the product; at BERT's 128 rows (768x768, 768x3072, 3072x768 weights) the
# prepacked kernel still measured 1.2-2x the packed template's speed (medians, 2
# threads, loaded box; the packed one writes and re-reads a K x nsub copy of B per
# call). The bound keeps the kernel's per-task partial sums (rows x nr floats, on the
# stack) at 128 KiB.
MAX_ROWS = 512
# Below this many weight elements (128 KiB of float32) packing per call costs a few
# microseconds and stays in cache; the general template's own packing is then fine.
MIN_WEIGHT_ELEMENTS = 1 << 15
# Operand types the GEMV template serves (half A and C converted in its kernels, half
# B kept in 2-byte panels or widened to float32 ones by `pack_b`).
PREPACK_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)


def panel_width(target: Any) -> int:
    """Columns of one packed panel: registers // 8 SIMD vectors (4 with AVX-512's 32
    registers, 2 with AVX2's 16), so a few rows of accumulators and the panel's
    vectors fit the register file together."""
    facts = target_facts(target)
    return max(1, facts["registers"] // 8) * facts["lanes"]


def pack_b(b: Tensor, nr: int, half_lanes: int = 0) -> Tensor:
    """``[K, N]`` → ``[ceil(N/nr), K, nr]``: panel p holds columns p*nr .. p*nr+nr-1.
    Half weights keep their type where `half_lanes` (the kernel's float32 lanes) is
    given, their columns placed by `cpu_half_panels.panel_position` (bfloat16: pairs
    of vectors share 32-bit lanes); else the panels are float32: half weights widened
    once here, at compile time, so the kernel's loads are the float32 ones."""
    k, n = b.shape
    panels = -(-n // nr)
    bn = tensor_input("b", b.dtype, b.shape)
    keep = b.dtype is not dtypes.float32 and half_lanes > 0
    widen = b.dtype is not dtypes.float32 and not keep
    out_dtype = b.dtype if keep else dtypes.float32
    group = 2 * half_lanes

    def element(p, kk, slot):
        lane = slot // group * group + slot % 2 * half_lanes + slot % group // 2 \
            if keep and b.dtype is dtypes.bfloat16 else slot
        col = p * nr + lane
        value = cast(bn[kk, col], dtypes.float32) if widen else bn[kk, col]
        return if_then_else(col < n, value, const(0.0, out_dtype))

    packed = compute("bp", [panels, k, nr], element, dtype=out_dtype)
    attributes = {"nr": nr, "k": k, "n": n}
    if keep:
        attributes["half_lanes"] = half_lanes
    return Operator(PACK_OPERATOR, [b], Task(PACK_OPERATOR, [bn], [packed], attributes), attributes).outputs[0]


def matmul_prepacked(a: Tensor, packed: Tensor, n: int, half_lanes: int = 0) -> Tensor:
    """``a @ B`` for ``a: [M, K]`` and B given as its packed panels (`pack_b`, with the
    same `half_lanes`)."""
    m, k = a.shape
    panels, k2, nr = packed.shape
    if k2 != k or panels != -(-n // nr):
        raise ValueError(f"matmul_prepacked: panels {list(packed.shape)} do not hold a [{k}, {n}] matrix")
    an = tensor_input("a", a.dtype, a.shape)
    bn = tensor_input("bp", packed.dtype, packed.shape)
    if half_lanes:
        def b_value(j, r):
            slot = cpu_half_panels.panel_position(packed.dtype.name, j % nr, half_lanes)
            return cast(bn[j // nr, r, slot], dtypes.float32)
    else:
        def b_value(j, r):
            return bn[j // nr, r, j % nr]
    c = compute("c", [m, n], lambda i, j: reduce([k], lambda r: an[i, r] * b_value(j, r), "sum",
                                                 dtypes.float32), dtype=a.dtype)
    attributes = {"m": m, "n": n, "k": k, "nr": nr}
    if half_lanes:
        attributes["half_lanes"] = half_lanes
    task = Task(PREPACKED_OPERATOR, [an, bn], [c], attributes)
    return Operator(PREPACKED_OPERATOR, [a, packed], task, attributes).outputs[0]


def _cpu_target() -> Any:
    from hidet_framework.extension import plugin_host

    return plugin_host().backend_for("cpu").detect_target()


def _registry_op(name: str) -> Callable | None:
    from hidet_framework.extension import plugin_host

    operators = plugin_host().operators
    return operators[name] if name in operators else None


def prepack_constant_b(op: Operator) -> list[Tensor] | None:
    """The rewrite (see the module docstring); None where it does not apply: operands
    not float32/bfloat16/float16, B batched, small or not from constants, more than
    MAX_ROWS rows."""
    if op.name != "matmul":
        return None
    at = op.attributes
    a, b = op.inputs
    if any(t.dtype not in PREPACK_DTYPES for t in (a, b, op.outputs[0])) or at.get("b_batched"):
        return None
    rows = int(at["m"]) * (int(at["batch"]) if at.get("a_batched") else 1)
    if rows > MAX_ROWS or rows < 1 or int(at["k"]) * int(at["n"]) < MIN_WEIGHT_ELEMENTS \
            or not b.computed_from_constants():
        return None
    reshape = _registry_op("reshape")
    m, n, k = int(at["m"]), int(at["n"]), int(at["k"])
    if a.rank != 2 or b.rank != 2:
        if reshape is None:
            return None
        a = reshape(a, (rows, k)) if a.rank != 2 else a
        b = reshape(b, (k, n)) if b.rank != 2 else b
    target = _cpu_target()
    nr, lanes = panel_width(target), target_facts(target)["lanes"]
    half_lanes = lanes if cpu_half_panels.half_panels_apply(b.dtype.name, target, nr, lanes) else 0
    out = matmul_prepacked(a, pack_b(b, nr, half_lanes), n, half_lanes)
    expected = op.outputs[0]
    if tuple(out.shape) != tuple(expected.shape):
        if reshape is None:
            return None
        out = reshape(out, tuple(expected.shape))
    return [out]


PREPACK_RULE = RewriteRule(
    "prepack_constant_b", ("matmul",), prepack_constant_b, targets=("cpu",),
    description=f"matmul with <= {MAX_ROWS} rows and constant B: B packed once at compile time (CPU)")
