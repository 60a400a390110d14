"""CUDA reductions over non-innermost axes (``inner > 1``: x viewed as [outer,
extent, inner], reduced over the middle axis).

Block of ``tile * split`` threads; the task mapping ``spatial(split, tile)`` puts
thread (ty, tx) on columns ``i0 + tx*vec .. + vec`` (a warp reads
``32 * vec`` consecutive elements of one row of x: coalesced, and with ``vec > 1`` one
128-bit load each) and on reduced positions ty, ty + split, ... of its block's part of
the reduced axis. The ``split`` partial results of a column combine through shared
memory. Blocks: (column tile, outer row) pairs times ``parts`` of the reduced axis,
where ``parts`` is chosen at build time so the grid holds about ``waves`` waves of
blocks on the target's SMs (a reduction over the first axis of an 8192 x 8192 tensor
has only 64 column tiles); with more than one part each block writes its partial
results to a workspace and a second kernel (one thread per output element) combines
them, finishes (mean, l2) and writes y.
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir import dtypes
from hidet_framework.ir.expr import cast, logical_and
from hidet_framework.ir.mapping import spatial
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.lang import (
    address_of, attrs, deref, register_tensor, script, script_module, shared_tensor, static_range, tensor_pointer,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_plugin_cuda.lang import blockIdx, syncthreads, threadIdx

from .cpu_rows import CORE, combine, finish, init_value, transform
from .cuda_space import cuda_facts
from .row_access import RowAccess, accumulator_dtype

RAW16 = PointerType(dtypes.vector_type(dtypes.uint32, 4))


def build_columns(operator: str, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any,
                  graft: bool, source: str) -> ScheduledTask:
    acc = RowAccess(operator, attributes)
    x, y = task.inputs[0], task.outputs[0]
    xt, yt = TensorType(x.dtype, x.shape), TensorType(y.dtype, y.shape)
    xdt, adt = x.dtype, accumulator_dtype(x.dtype)
    kind, core = acc.kind, CORE[acc.kind]
    outer, extent, inner = acc.outer, acc.extent, acc.inner
    f = cuda_facts(target)
    tile, split = int(params["tile"]), int(params["split"])
    vec = max(1, int(params["vector_bytes"]) // x.dtype.nbytes) if params["vector_bytes"] and not graft else 1
    if inner % vec or len(acc.inner_shape) != 1 and vec > 1:
        vec = 1
    threads = tile * split
    width = tile * vec
    tiles = -(-inner // width)
    base_blocks = tiles * outer
    want = int(params["waves"]) * f["sm_count"] * max(1, f["threads_per_sm"] // threads)
    parts = max(1, min(-(-want // base_blocks), -(-extent // (4 * split))))
    per_part = -(-extent // parts)
    parts = -(-extent // per_part)
    steps = -(-per_part // split)
    name = f"{operator}_cuda_columns_t{tile}x{split}_v{vec}_p{parts}"
    thread_map = spatial(split, tile)
    ot = TensorType(adt, (parts * outer * inner,)) if parts > 1 else yt

    @script
    def columns_partial(x: xt, out: ot):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (base_blocks, parts)
        attrs.cuda.block_dim = threads
        red = shared_tensor(adt, [split, width])
        if vec > 1:
            raw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [1])
            xv = tensor_pointer(xdt, [vec], init=cast(address_of(raw[0]), PointerType(xdt)))
        part = register_tensor(adt, [vec])
        tid = threadIdx.x
        o = blockIdx.x / tiles
        i0 = (blockIdx.x % tiles) * width
        r0 = blockIdx.y * per_part
        for ty, tx in thread_map.on(tid):
            c0 = i0 + tx * vec
            for v in static_range(vec):
                part[v] = init_value(core, adt)
            for s in range(steps):
                r = r0 + ty + s * split
                if logical_and(logical_and(r < extent, r < r0 + per_part), c0 < inner):
                    if vec > 1:
                        raw[0] = deref(cast(address_of(x[acc.x_index(o, r, c0)]), RAW16))
                        for v in static_range(vec):
                            part[v] = combine(core, part[v], transform(kind, cast(xv[v], adt)))
                    else:
                        part[0] = combine(core, part[0], transform(kind, cast(x[acc.x_index(o, r, c0)], adt)))
            for v in static_range(vec):
                red[ty, tx * vec + v] = part[v]
        syncthreads()
        for ty, tx in thread_map.on(tid):
            if ty == 0:
                for v in static_range(vec):
                    total = red[0, tx * vec + v]
                    for k in range(1, split):
                        total = combine(core, total, red[k, tx * vec + v])
                    if i0 + tx * vec + v < inner:
                        if parts > 1:
                            out[(blockIdx.y * outer + o) * inner + i0 + tx * vec + v] = total
                        else:
                            acc.store_row(out, finish(kind, total, extent), o, i0 + tx * vec + v)

    functions = [columns_partial]
    launches = [Launch(name, (BufferRef("input", 0), BufferRef("output", 0) if parts == 1 else BufferRef("workspace", 0)))]
    workspace: tuple = ()
    if parts > 1:
        total_out = outer * inner
        block2 = 256
        name2 = name + "_combine"
        wt = TensorType(adt, (parts * outer * inner,))

        @script
        def columns_combine(partial: wt, y: yt):
            attrs.func_kind = "cuda_kernel"
            attrs.func_name = name2
            attrs.cuda.grid_dim = -(-total_out // block2)
            attrs.cuda.block_dim = block2
            e = blockIdx.x * block2 + threadIdx.x
            if e < total_out:
                total = partial[e]
                for p in range(1, parts):
                    total = combine(core, total, partial[p * total_out + e])
                acc.store_row(y, finish(kind, total, extent), e / inner, e % inner)

        functions.append(columns_combine)
        workspace = (WorkspaceSpec("column_parts", adt, (parts * outer * inner,)),)
        launches.append(Launch(name2, (BufferRef("workspace", 0), BufferRef("output", 0))))
    plan = {"vec": vec, "parts": parts, "per_part": per_part, "tiles": tiles}
    return ScheduledTask(script_module(*functions, name=name), tuple(launches), workspace, source=source,
                         params={**dict(params), "plan": plan})
