"""CPU templates of the reduce plugin: OpenMP over rows, SIMD lanes inside a row.

One ``cpu_kernel`` per task, one OpenMP parallel region. The task mapping
``spatial(workers) * repeat(q)`` (``"block"``: worker w owns rows w*q .. w*q+q-1) or
``repeat(q) * spatial(workers)`` (``"cyclic"``: rows w, w+workers, ...) deals the rows
to the threads. Inside a row, ``lanes`` independent accumulators (a multiple of the
SIMD width of the target) take positions r, r+1, ..., so the C compiler turns the lane
loop into vector instructions and the adds are not one serial dependency chain; the
lanes are combined once per row. Per family:

- ``reduce`` (sum, mean, max, min, prod, l2, sum_square): one pass. Over
  non-innermost axes (``inner > 1``) the lanes run along the contiguous inner axis
  instead: work items are (row, lanes-wide column tile) pairs.
- ``arg`` (argmax/argmin): one scalar scan per (row, column).
- ``softmax`` / ``log_softmax``: the row's max (pass 1), then ``exp(x - max)`` kept in
  a per-thread row buffer while it is summed (pass 2), then the output from that
  buffer (pass 3): one exp per element, and x is read from memory once (pass 2 reads
  it again from the cache).
- ``norm`` (layer, rms, instance, group): the mean (around the row's first element),
  the variance of deviations, then the output; again x comes from memory once.

Inputs are read only as ``x[full index]`` and outputs written only as
``y[full index] = value``, once per element (fusion grafts onto both).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, const, maximum, minimum
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.ir.math_functions import exp, log, sqrt
from hidet_framework.ir.types import TensorType
from hidet_framework.lang import address_of, attrs, local_tensor, parallel, script

from .common import arg_wins
from .row_access import RowAccess

__all__ = ["cpu_space", "RowDeal", "tasks_for", "CORE", "combine", "finish", "init_value", "transform"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------ reduction algebra

CORE = {"sum": "sum", "mean": "sum", "max": "max", "min": "min", "prod": "prod", "l2": "sum", "sum_square": "sum"}


def init_value(core: str, dtype: Any):
    if core == "sum":
        return const(0, dtype)
    if core == "prod":
        return const(1, dtype)
    return const(dtype.min_value() if core == "max" else dtype.max_value(), dtype)


def combine(core: str, a: Any, b: Any):
    if core == "sum":
        return a + b
    if core == "prod":
        return a * b
    # the new value first: the C helper's NaN test is on its first operand, off the
    # accumulator's dependency chain (codegen.py's _min_max_body)
    return maximum(b, a) if core == "max" else minimum(b, a)


def transform(kind: str, v: Any):
    return v * v if kind in ("l2", "sum_square") else v


def finish(kind: str, acc: Any, count: int):
    if kind == "mean":
        return acc / const(count, acc_type(acc))
    if kind == "l2":
        return sqrt(acc)
    return acc


def acc_type(e: Any):
    from hidet_framework.ir.type_infer import infer_type

    return infer_type(e)


# ------------------------------------------------------------------ space

def cpu_facts(target: Any) -> dict:
    bits = int(target.get("vector_bits", 256))
    return {"cores": max(1, int(target.get("cores", 1))), "lanes": max(1, bits // 32)}


def cpu_space(target: Any, level: int) -> list[dict]:
    """From the target only: threads = cores; accumulators = 1, 2 or 4 SIMD vectors of
    float32; rows dealt in blocks or cyclically. The default first."""
    f = cpu_facts(target)
    out = [{"workers": f["cores"], "lanes": 2 * f["lanes"], "order": "block"}]
    if level == 0:
        return out
    for vectors in (2, 1, 4):
        for order in ("block", "cyclic"):
            c = {"workers": f["cores"], "lanes": vectors * f["lanes"], "order": order}
            if c not in out:
                out.append(c)
    return out


class RowDeal:
    """Which rows (or work items) a worker runs: ``spatial(workers)`` gives each worker
    its slot; ``"block"`` runs rows slot*q .. slot*q+q-1, ``"cyclic"`` rows slot,
    slot+workers, ... (the mappings ``spatial(workers) * repeat(q)`` and
    ``repeat(q) * spatial(workers)``, with the repeat kept as a real loop: q follows the
    row count and must not be unrolled)."""

    def __init__(self, workers: int, count: int, order: str) -> None:
        # `workers` threads, but TASKS_PER_WORKER times as many parallel items: the
        # thread pool hands them out dynamically, so a thread the OS deschedules holds
        # back one small item instead of half of the rows (hidet_plugin_cpu/thread_pool.py).
        workers = tasks_for(workers, count)
        self.workers, self.count, self.order = workers, count, order
        self.per_worker = max(1, _ceil_div(count, workers))
        self.slots = spatial(workers)

    def row(self, slot, k):
        return slot * self.per_worker + k if self.order == "block" else k * self.workers + slot


TASKS_PER_WORKER = 8


def tasks_for(workers: int, count: int) -> int:
    """Parallel items of a row kernel: up to TASKS_PER_WORKER per thread, at most one
    per row."""
    return max(1, min(count, workers * TASKS_PER_WORKER))


def deal_rows(workers: int, count: int, order: str) -> RowDeal:
    return RowDeal(workers, count, order)


def deal_column_tiles(workers: int, outer: int, inner: int, width: int, order: str) -> tuple[int, int, RowDeal]:
    """``(tiles, items, deal)`` of a kernel over columns (the reductions over
    non-innermost axes, cumsum): its work items are (row, `width`-wide tile of the inner
    axis) pairs, `tiles` per row, `items` in all, dealt to the workers as rows are."""
    tiles = _ceil_div(inner, width)
    items = outer * tiles
    return tiles, items, deal_rows(workers, items, order)


def halves(lanes: int) -> list[int]:
    """The steps of a tree combine of `lanes` accumulators (``part[j] op= part[j + h]``
    for h = lanes/2, ..., 1): log2(lanes) dependent vector steps instead of a serial
    chain of lanes - 1 scalar ones (a 31-step chain per row was most of a 128-wide
    softmax row). Lanes that are not a power of two keep the chain: ``[]``."""
    if lanes < 2 or lanes & (lanes - 1):
        return []
    out, h = [], lanes // 2
    while h >= 1:
        out.append(h)
        h //= 2
    return out


# ------------------------------------------------------------------ kernels

def reduce_rows_kernel(acc: RowAccess, xt, yt, adt, p: Mapping[str, Any], name: str):
    workers, lanes, kind = int(p["workers"]), int(p["lanes"]), acc.kind
    core = CORE[kind]
    outer, extent = acc.outer, acc.extent
    blocks = extent // lanes
    rows = deal_rows(workers, outer, p["order"])
    steps = halves(lanes)
    chain = 1 if steps else lanes

    from hidet_plugin_cpu.primitives import ROW_LANES, row_max

    vector_tree = core == "max" and adt is dtypes.float32 and lanes in ROW_LANES

    tail = extent - blocks * lanes
    # max/min: the tail as one more block of lanes, the lanes past the row given the
    # identity (a guarded load: masked on AVX-512); element by element on lane 0 it was a
    # scalar NaN test each (ucomiss, a cmov through a GPR), 10% of a 1000-wide row
    lane_tail = core in ("max", "min") and tail > 0

    @script
    def reduce_rows(x: xt, y: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(rows.workers):
            part = local_tensor(adt, [lanes])
            for slot in rows.slots.on(w):
                for k in range(rows.per_worker):
                    row = rows.row(slot, k)
                    if row < outer:
                        for j in range(lanes):
                            part[j] = init_value(core, adt)
                        for rb in range(blocks):
                            for j in range(lanes):
                                part[j] = combine(core, part[j], transform(kind, acc.load(x, adt, row, rb * lanes + j)))
                        if lane_tail:
                            for j in range(lanes):
                                part[j] = combine(core, part[j], acc.load(x, adt, row, blocks * lanes + j)
                                                  if j < tail else init_value(core, adt))
                        else:
                            for r in range(blocks * lanes, extent):
                                part[0] = combine(core, part[0], transform(kind, acc.load(x, adt, row, r)))
                        if vector_tree:
                            acc.store_row(y, row_max(address_of(part[0]), lanes), row)
                        else:
                            for h in steps:
                                for j in range(h):
                                    part[j] = combine(core, part[j], part[j + h])
                            total = part[0]
                            for j in range(1, chain):
                                total = combine(core, total, part[j])
                            acc.store_row(y, finish(kind, total, extent), row)

    return reduce_rows


def reduce_columns_kernel(acc: RowAccess, xt, yt, adt, p: Mapping[str, Any], name: str):
    workers, lanes, kind = int(p["workers"]), int(p["lanes"]), acc.kind
    core = CORE[kind]
    outer, extent, inner = acc.outer, acc.extent, acc.inner
    tiles, items, work = deal_column_tiles(workers, outer, inner, lanes, p["order"])

    @script
    def reduce_columns(x: xt, y: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(work.workers):
            part = local_tensor(adt, [lanes])
            for slot in work.slots.on(w):
                for k in range(work.per_worker):
                    item = work.row(slot, k)
                    if item < items:
                        o = item / tiles
                        i0 = (item % tiles) * lanes
                        for j in range(lanes):
                            part[j] = init_value(core, adt)
                        if i0 + lanes <= inner:
                            for r in range(extent):
                                for j in range(lanes):
                                    part[j] = combine(core, part[j], transform(kind, acc.load(x, adt, o, r, i0 + j)))
                            for j in range(lanes):
                                acc.store_row(y, finish(kind, part[j], extent), o, i0 + j)
                        else:
                            for r in range(extent):
                                for j in range(inner - i0):
                                    part[j] = combine(core, part[j], transform(kind, acc.load(x, adt, o, r, i0 + j)))
                            for j in range(inner - i0):
                                acc.store_row(y, finish(kind, part[j], extent), o, i0 + j)

    return reduce_columns


def arg_scan_kernel(acc: RowAccess, xt, yt, adt, p: Mapping[str, Any], name: str, last: bool):
    workers = int(p["workers"])
    outer, extent, inner = acc.outer, acc.extent, acc.inner
    items = outer * inner
    work = deal_rows(workers, items, p["order"])
    is_max = acc.kind == "argmax"

    @script
    def arg_scan(x: xt, y: yt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(work.workers):
            for slot in work.slots.on(w):
                for k in range(work.per_worker):
                    item = work.row(slot, k)
                    if item < items:
                        o = item / inner
                        i = item % inner
                        best = acc.load(x, adt, o, 0, i)
                        pos = 0
                        for r in range(1, extent):
                            v = acc.load(x, adt, o, r, i)
                            if arg_wins(v, best, is_max, last, adt.is_float()):
                                best = v
                                pos = r
                        acc.store_row(y, cast(pos, dtypes.int64), o, i)

    return arg_scan


def softmax_rows_kernel(acc: RowAccess, xt, yt, p: Mapping[str, Any], name: str, own_math: bool = False):
    """`own_math` (targets of 512-bit vectors, see build_cpu): the max pass keeps the
    row in the per-worker buffer, ``hidet_exp_sum_f32`` turns it into exp(x - max) and
    sums it, and the lane accumulators combine through ``hidet_row_max_f32``
    (hidet_plugin_cpu/row_math.py). Else: the exp pass of libm/libmvec's ``expf`` over
    x and element-by-element trees (with AVX2 the vector helpers measured slower)."""
    workers, lanes = int(p["workers"]), int(p["lanes"])
    outer, extent = acc.outer, acc.extent
    blocks = extent // lanes
    rows = deal_rows(workers, outer, p["order"])
    steps = halves(lanes)
    chain = 1 if steps else lanes
    f32 = dtypes.float32
    log_form = acc.kind == "log_softmax"
    wt = TensorType(f32, (rows.workers * extent,))
    from hidet_plugin_cpu.primitives import ROW_LANES, exp_sum, row_max

    vector_tree = own_math and lanes in ROW_LANES

    @script
    def softmax_rows(x: xt, y: yt, ebuf: wt):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for w in parallel(rows.workers):
            part = local_tensor(f32, [lanes])
            base = w * extent
            for slot in rows.slots.on(w):
                for k in range(rows.per_worker):
                    row = rows.row(slot, k)
                    if row < outer:
                        for j in range(lanes):
                            part[j] = init_value("max", f32)
                        for rb in range(blocks):
                            for j in range(lanes):
                                if own_math:  # the row is kept for hidet_exp_sum_f32
                                    v = acc.load(x, f32, row, rb * lanes + j)
                                    ebuf[base + rb * lanes + j] = v
                                    part[j] = maximum(v, part[j])
                                else:
                                    part[j] = maximum(acc.load(x, f32, row, rb * lanes + j), part[j])
                        for r in range(blocks * lanes, extent):
                            if own_math:
                                v = acc.load(x, f32, row, r)
                                ebuf[base + r] = v
                                part[0] = maximum(v, part[0])
                            else:
                                part[0] = maximum(acc.load(x, f32, row, r), part[0])
                        if vector_tree:
                            top = row_max(address_of(part[0]), lanes)
                        else:
                            for h in steps:
                                for j in range(h):
                                    part[j] = maximum(part[j], part[j + h])
                            top = part[0]
                            for j in range(1, chain):
                                top = maximum(top, part[j])
                        if own_math:
                            total = exp_sum(address_of(ebuf[base]), top, extent)
                        else:
                            for j in range(lanes):
                                part[j] = 0.0
                            for rb in range(blocks):
                                for j in range(lanes):
                                    e = exp(acc.load(x, f32, row, rb * lanes + j) - top)
                                    ebuf[base + rb * lanes + j] = e
                                    part[j] = part[j] + e
                            for r in range(blocks * lanes, extent):
                                e = exp(acc.load(x, f32, row, r) - top)
                                ebuf[base + r] = e
                                part[0] = part[0] + e
                            for h in steps:
                                for j in range(h):
                                    part[j] = part[j] + part[j + h]
                            total = part[0]
                            for j in range(1, chain):
                                total = total + part[j]
                        if log_form:
                            lse = log(total)  # not max + log(sum): that loses log(sum) next to a huge max
                            for r in range(extent):
                                acc.store(y, (acc.load(x, f32, row, r) - top) - lse, row, r)
                        else:
                            inv = 1.0 / total
                            for r in range(extent):
                                acc.store(y, ebuf[base + r] * inv, row, r)

    return softmax_rows
