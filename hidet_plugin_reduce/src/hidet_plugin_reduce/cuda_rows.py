"""The CUDA row kernel of the reduce plugin: every family (reductions, argmax/argmin,
softmax, the norms) over rows whose reduced axes are innermost.

Schedule (all from `cuda_space.row_plan`): a block of ``block`` threads holds
``rows_per_block`` rows of ``threads`` threads each; thread ``lane`` of a row owns the
positions of the task mapping ``repeat(chunks) * spatial(threads) * repeat(vec)``:
chunk k, lane, element v is position ``(k * threads + lane) * vec + v``, so one access
of a warp covers ``32 * vec`` consecutive elements (coalesced; with ``vec > 1`` each
thread's ``vec`` elements are one 128-bit load or store). Cached rows are loaded into
registers once; statistics come from the registers and the output is written from
them: x is read once and y written once. Partial results combine with butterfly
shuffles inside a warp and, when a row spans several warps, through shared memory.
Rows too long for a block's registers are streamed: every pass reads x again, and
softmax keeps a running (max, sum) pair per thread (online softmax) so it needs only
two passes.

Fusion: with ``graft=True`` (the anchor of a fusion group) every access is an element
access ``x[...]`` / ``y[...] = v``, which the fusion engine rewrites; vector accesses
take element addresses, so they are used only for a lone operator.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import vector_type
from hidet_framework.ir.expr import (
    cast, const, equal, if_then_else, logical_and, logical_or, maximum, not_equal,
)
from hidet_framework.ir.func import Function, module
from hidet_framework.ir.math_functions import exp, log, rsqrt
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.lang import (
    address_of, attrs, deref, register_tensor, script, shared_tensor, static_range, tensor_pointer,
)
from hidet_framework.mapping.task_mapping import spatial
from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

from .cpu_rows import CORE, combine, finish, init_value, transform
from .row_access import RowAccess

RAW16 = PointerType(vector_type(dtypes.uint32, 4))


def _levels(n: int) -> list[int]:
    """Butterfly distances of an n-lane shuffle reduction (n a power of two <= 32)."""
    return [n >> (s + 1) for s in range(int(math.log2(n)))]


def build_rows_kernel(acc: RowAccess, task: Any, plan: Mapping[str, Any], name: str, graft: bool,
                      attributes: Mapping[str, Any]) -> Any:
    x, y = task.inputs[0], task.outputs[0]
    xt, yt = TensorType(x.dtype, x.shape), TensorType(y.dtype, y.shape)
    has_scale = acc.family == "norm"
    has_bias = has_scale and len(task.inputs) == 3
    s_node = task.inputs[1] if has_scale else x
    b_node = task.inputs[2] if has_bias else s_node
    st, bt = TensorType(s_node.dtype, s_node.shape), TensorType(b_node.dtype, b_node.shape)
    family, kind = acc.family, acc.kind
    T, rpb, block, vec, chunks, cached = (plan[k] for k in ("threads", "rows_per_block", "block", "vec", "chunks", "cached"))
    wpr = plan["warps_per_row"]
    outer, extent = acc.outer, acc.extent
    f32 = dtypes.float32
    adt = f32 if x.dtype.is_float() and x.dtype is not dtypes.float64 else x.dtype
    xdt, ydt = x.dtype, y.dtype
    core = CORE.get(kind, "sum")
    lanes_in_warp = min(T, 32)
    vector_io = vec > 1 and not graft
    grid = -(-outer // rpb)
    last_partial = extent % (T * vec) != 0
    epsilon = float(attributes.get("epsilon", 1.0))
    count = float(extent)
    is_max = kind == "argmax"
    select_last = bool(attributes.get("select_last_index", False))
    held = chunks * vec if cached else 1
    row_map = spatial(rpb, T)
    # layer/rms norm whose scale and bias are one row of x's dtype: read them as vectors too
    vector_params = (vector_io and cached and family == "norm" and not acc.grouped
                     and all(tuple(int(d) for d in t.shape) == (extent,) and t.dtype is xdt
                             for t in task.inputs[1:]))

    def pos(k, lane, v):
        return (k * T + lane) * vec + v

    def in_row(k, lane, v):
        """Host True where the plan guarantees position < extent, else the IR test."""
        if cached and (k < chunks - 1 or not last_partial):
            return True
        return pos(k, lane, v) < extent

    def guard(live, k, lane, v):
        """The load guard: the row is live and the position inside it."""
        inside = in_row(k, lane, v)
        return live if inside is True else logical_and(live, inside)

    def fill(k: int) -> Any:
        """Value for positions past the row end: neutral for the family's first pass."""
        if family == "softmax" or (family == "reduce" and core == "max"):
            return const(float("-inf"), xdt) if xdt.is_float() else const(xdt.min_value(), xdt)
        if family == "reduce" and core == "min":
            return const(float("inf"), xdt) if xdt.is_float() else const(xdt.max_value(), xdt)
        if family == "reduce" and core == "prod":
            return const(1, xdt)
        return const(0, xdt)

    def better(v, i, best, besti):
        """Whether candidate (v, i) beats (best, besti): a larger (smaller) value, or
        the same value at an earlier (later, with select_last_index) position."""
        tie = (i > besti) if select_last else (i < besti)
        wins = (v > best) if is_max else (v < best)
        plain = if_then_else(equal(v, best), tie, wins)
        if not adt.is_float():
            return plain
        # a NaN is the extreme (numpy's argmax): it beats a number, two NaNs tie
        nan_v, nan_best = not_equal(v, v), not_equal(best, best)
        return if_then_else(logical_or(nan_v, nan_best), logical_and(nan_v, logical_or(equal(best, best), tie)),
                            plain)

    @script
    def reduce_rows_cuda(x: xt, scale: st, bias: bt, y: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = grid
        attrs.cuda.block_dim = block
        red = shared_tensor(adt, [4, rpb, wpr])
        redi = shared_tensor(dtypes.int32, [1, rpb, wpr])
        if vector_io:
            raw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [chunks if cached else 1])
            xr = tensor_pointer(xdt, [held], init=cast(address_of(raw[0]), PointerType(xdt)))
            yraw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [1])
            yr = tensor_pointer(ydt, [vec], init=cast(address_of(yraw[0]), PointerType(ydt)))
            if vector_params:
                sraw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [2])
                sv = tensor_pointer(s_node.dtype, [2 * vec], init=cast(address_of(sraw[0]), PointerType(s_node.dtype)))
        else:
            xr = register_tensor(xdt, [held])
        # thread -> (row of the block, lane of the row); the block is exactly rpb * T threads
        for sub, lane in row_map.on(threadIdx.x):
            row = blockIdx.x * rpb + sub
            live = row < outer
            wid = lane / 32
            # ---------------------------------------------------------------- load the row
            if cached:
                for k in static_range(chunks):
                    if vector_io:
                        if logical_and(live, pos(k, lane, 0) < extent):
                            raw[k] = deref(cast(address_of(x[acc.x_index(row, pos(k, lane, 0))]), RAW16))
                        else:
                            for v in static_range(vec):
                                xr[k * vec + v] = fill(k)
                    else:
                        for v in static_range(vec):
                            xr[k * vec + v] = x[acc.x_index(row, pos(k, lane, v))] if guard(live, k, lane, v) else fill(k)
            # ---------------------------------------------------------------- first statistic
            if family == "arg":
                best = cast(x[acc.x_index(row, 0)], adt) if live else cast(0, adt)
                besti = 0
                for kk in range(chunks):
                    for v in static_range(vec):
                        r = pos(kk, lane, v)
                        if logical_and(live, r < extent):
                            val = cast(x[acc.x_index(row, r)], adt)
                            if better(val, r, best, besti):
                                best = val
                                besti = r
                for d in static_range(len(_levels(lanes_in_warp))):
                    ob = shfl_xor_sync(FULL_MASK, best, _levels(lanes_in_warp)[d])
                    oi = shfl_xor_sync(FULL_MASK, besti, _levels(lanes_in_warp)[d])
                    if better(ob, oi, best, besti):
                        best = ob
                        besti = oi
                if wpr > 1:
                    if lane % 32 == 0:
                        red[0, sub, wid] = best
                        redi[0, sub, wid] = besti
                    syncthreads()
                    best = red[0, sub, 0]
                    besti = redi[0, sub, 0]
                    for wj in static_range(1, wpr):
                        if better(red[0, sub, wj], redi[0, sub, wj], best, besti):
                            best = red[0, sub, wj]
                            besti = redi[0, sub, wj]
                if logical_and(live, lane == 0):
                    acc.store_row(y, cast(besti, dtypes.int64), row)
            else:
                # reduction-like first pass: sum / max / ... ; softmax: max (cached) or (max, sum) online
                part = init_value(core if family == "reduce" else ("max" if family == "softmax" else "sum"), adt)
                run_sum = cast(0.0, adt)
                pivot = cast(0.0, adt)
                if family == "norm" and kind != "rms_norm":
                    pivot = cast(x[acc.x_index(row, 0)], adt) if live else cast(0.0, adt)
                if cached:
                    for k in static_range(chunks):
                        for v in static_range(vec):
                            if in_row(k, lane, v):
                                if family == "reduce":
                                    part = combine(core, part, transform(kind, cast(xr[k * vec + v], adt)))
                                elif family == "softmax":
                                    part = maximum(part, cast(xr[k * vec + v], adt))
                                elif kind == "rms_norm":
                                    part = part + cast(xr[k * vec + v], adt) * cast(xr[k * vec + v], adt)
                                else:
                                    part = part + (cast(xr[k * vec + v], adt) - pivot)
                else:
                    for kk in range(chunks):
                        for v in static_range(vec):
                            if logical_and(live, pos(kk, lane, v) < extent):
                                xv = cast(x[acc.x_index(row, pos(kk, lane, v))], adt)
                                if family == "reduce":
                                    part = combine(core, part, transform(kind, xv))
                                elif family == "softmax":
                                    top_new = maximum(part, xv)
                                    run_sum = run_sum * exp(part - top_new) + exp(xv - top_new)
                                    part = top_new
                                elif kind == "rms_norm":
                                    part = part + xv * xv
                                else:
                                    part = part + (xv - pivot)
                # combine across the row's threads
                for d in static_range(len(_levels(lanes_in_warp))):
                    other = shfl_xor_sync(FULL_MASK, part, _levels(lanes_in_warp)[d])
                    if family == "softmax" and not cached:
                        other_sum = shfl_xor_sync(FULL_MASK, run_sum, _levels(lanes_in_warp)[d])
                        top_new = maximum(part, other)
                        run_sum = (if_then_else(run_sum == 0.0, cast(0.0, adt), run_sum * exp(part - top_new))
                                   + if_then_else(other_sum == 0.0, cast(0.0, adt), other_sum * exp(other - top_new)))
                        part = top_new
                    elif family == "reduce":
                        part = combine(core, part, other)
                    elif family == "softmax":
                        part = maximum(part, other)
                    else:
                        part = part + other
                if wpr > 1:
                    if lane % 32 == 0:
                        red[0, sub, wid] = part
                        red[1, sub, wid] = run_sum
                    syncthreads()
                    part = red[0, sub, 0]
                    run_sum = red[1, sub, 0]
                    for wj in static_range(1, wpr):
                        if family == "softmax" and not cached:
                            top_new = maximum(part, red[0, sub, wj])
                            run_sum = (if_then_else(run_sum == 0.0, cast(0.0, adt), run_sum * exp(part - top_new))
                                       + if_then_else(red[1, sub, wj] == 0.0, cast(0.0, adt),
                                                      red[1, sub, wj] * exp(red[0, sub, wj] - top_new)))
                            part = top_new
                        elif family == "reduce":
                            part = combine(core, part, red[0, sub, wj])
                        elif family == "softmax":
                            part = maximum(part, red[0, sub, wj])
                        else:
                            part = part + red[0, sub, wj]
                if family == "reduce":
                    if logical_and(live, lane == 0):
                        acc.store_row(y, finish(kind, part, extent), row)
                else:
                    # ------------------------------------------------------ second statistic
                    top = part
                    mean = pivot + part / count
                    if kind == "rms_norm":
                        mean = cast(0.0, adt)
                    second = cast(0.0, adt)
                    if family == "softmax" and not cached:
                        second = run_sum
                    if (family == "softmax" and cached) or (family == "norm" and kind != "rms_norm"):
                        if cached:
                            for k in static_range(chunks):
                                for v in static_range(vec):
                                    if in_row(k, lane, v):
                                        if family == "softmax":
                                            second = second + exp(cast(xr[k * vec + v], adt) - top)
                                        else:
                                            second = second + (cast(xr[k * vec + v], adt) - mean) * (cast(xr[k * vec + v], adt) - mean)
                        else:
                            for kk in range(chunks):
                                for v in static_range(vec):
                                    if logical_and(live, pos(kk, lane, v) < extent):
                                        xv = cast(x[acc.x_index(row, pos(kk, lane, v))], adt)
                                        second = second + (xv - mean) * (xv - mean)
                        for d in static_range(len(_levels(lanes_in_warp))):
                            second = second + shfl_xor_sync(FULL_MASK, second, _levels(lanes_in_warp)[d])
                        if wpr > 1:
                            if lane % 32 == 0:
                                red[2, sub, wid] = second
                            syncthreads()
                            second = red[2, sub, 0]
                            for wj in static_range(1, wpr):
                                second = second + red[2, sub, wj]
                    if kind == "rms_norm":
                        second = part
                    # -------------------------------------------------------- write the row
                    shift = top + log(second)
                    inv = 1.0 / second
                    rstd = rsqrt(second / count + epsilon)
                    if cached and vector_io:
                        for k in static_range(chunks):
                            if logical_and(live, pos(k, lane, 0) < extent):
                                if vector_params:  # scale (and bias) as 128-bit loads too
                                    sraw[0] = deref(cast(address_of(scale[pos(k, lane, 0)]), RAW16))
                                    if has_bias:
                                        sraw[1] = deref(cast(address_of(bias[pos(k, lane, 0)]), RAW16))
                                for v in static_range(vec):
                                    if vector_params:
                                        yr[v] = affine((cast(xr[k * vec + v], adt) - mean) * rstd, sv[v],
                                                       sv[vec + v] if has_bias else None)
                                    else:
                                        yr[v] = value_of(acc, scale, bias, family, kind, has_bias, row, pos(k, lane, v),
                                                         cast(xr[k * vec + v], adt), top, shift, inv, mean, rstd)
                                ydst = cast(address_of(y[acc.x_index(row, pos(k, lane, 0))]), RAW16)
                                ydst[0] = yraw[0]
                    elif cached:
                        for k in static_range(chunks):
                            for v in static_range(vec):
                                if guard(live, k, lane, v):
                                    emit(acc, y, scale, bias, family, kind, has_bias, row, pos(k, lane, v),
                                         cast(xr[k * vec + v], adt), top, shift, inv, mean, rstd)
                    else:
                        for kk in range(chunks):
                            for v in static_range(vec):
                                if logical_and(live, pos(kk, lane, v) < extent):
                                    emit(acc, y, scale, bias, family, kind, has_bias, row, pos(kk, lane, v),
                                         cast(x[acc.x_index(row, pos(kk, lane, v))], adt), top, shift, inv, mean, rstd)

    ir = reduce_rows_cuda.ir
    keep = [0] + ([1] if has_scale else []) + ([2] if has_bias else []) + [3]
    return module(name, [Function(ir.name, [ir.params[k] for k in keep], ir.body, ir.kind, ir.ret_type, ir.attrs)])


def affine(normalized, scale_value, bias_value):
    """``normalized * scale + bias`` in float32 (bias None: none)."""
    out = normalized * cast(scale_value, dtypes.float32)
    return out + cast(bias_value, dtypes.float32) if bias_value is not None else out


def value_of(acc: RowAccess, scale, bias, family, kind, has_bias, row, r, xv, top, shift, inv, mean, rstd):
    """The value of one output element (float32)."""
    if family == "softmax":
        return exp(xv - top) * inv if kind == "softmax" else xv - shift
    value = (xv - mean) * rstd * acc.load_param(scale, dtypes.float32, row, r)
    if has_bias:
        value = value + acc.load_param(bias, dtypes.float32, row, r)
    return value


def emit(acc: RowAccess, y, scale, bias, family, kind, has_bias, row, r, xv, top, shift, inv, mean, rstd):
    """The store of one output element (a host helper: returns the statement)."""
    return acc.store(y, value_of(acc, scale, bias, family, kind, has_bias, row, r, xv, top, shift, inv, mean, rstd), row, r)
