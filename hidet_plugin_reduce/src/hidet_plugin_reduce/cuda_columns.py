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
from hidet_framework.mapping.task_mapping import spatial
from hidet_framework.ir.types import PointerType, TensorType
from hidet_framework.lang import (
    address_of, attrs, deref, register_tensor, script, script_module, shared_tensor, static_range, tensor_pointer,
)
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_plugin_cuda.lang import FULL_MASK, blockIdx, shfl_xor_sync, syncthreads, threadIdx

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


def build_scan(task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], source: str) -> ScheduledTask:
    """cumsum on CUDA: thread e of the grid scans column e (``e = o * inner + i``)."""
    acc = RowAccess("cumsum", attributes)
    x, y = task.inputs[0], task.outputs[0]
    xt, yt = TensorType(x.dtype, x.shape), TensorType(y.dtype, y.shape)
    adt = accumulator_dtype(x.dtype)
    outer, extent, inner = acc.outer, acc.extent, acc.inner
    exclusive, reverse = bool(attributes.get("exclusive")), bool(attributes.get("reverse"))
    block = int(params["block"])
    columns = outer * inner
    name = f"cumsum_cuda_scan_b{block}"

    @script
    def cumsum_scan(x: xt, y: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = -(-columns // block)
        attrs.cuda.block_dim = block
        e = blockIdx.x * block + threadIdx.x
        if e < columns:
            o = e / inner
            i = e % inner
            run = cast(0, adt)
            for t in range(extent):
                r = extent - 1 - t if reverse else t
                if exclusive:
                    acc.store(y, run, o, r, i)
                    run = run + cast(x[acc.x_index(o, r, i)], adt)
                else:
                    run = run + cast(x[acc.x_index(o, r, i)], adt)
                    acc.store(y, run, o, r, i)

    launch = Launch(name, (BufferRef("input", 0), BufferRef("output", 0)))
    return ScheduledTask(script_module(cumsum_scan, name=name), (launch,), (), source=source,
                         params={**dict(params), "plan": {"block": block}})


def split_rows_parts(outer: int, extent: int, vec: int, block: int, target: Any) -> int:
    """Blocks per row for a reduction whose rows are few and long: enough blocks for
    about two waves on the target's SMs, each block at least 4 strides of the row."""
    f = cuda_facts(target)
    want = 2 * f["sm_count"] * max(1, f["threads_per_sm"] // block)
    return max(1, min(-(-want // max(outer, 1)), extent // (4 * block * vec)))


def build_split_rows(operator: str, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any],
                     target: Any, graft: bool, source: str, parts: int, vec: int) -> ScheduledTask:
    """A reduction over the innermost axes with few, long rows: row o is cut into
    `parts` contiguous slices, block (o, p) reduces slice p (its threads stride through
    it ``block * vec`` elements at a time, 128-bit loads when alone, then shuffles and
    shared memory), writes one partial result, and a second kernel combines the parts."""
    acc = RowAccess(operator, attributes)
    x, y = task.inputs[0], task.outputs[0]
    xt = TensorType(x.dtype, x.shape)
    xdt, adt = x.dtype, accumulator_dtype(x.dtype)
    kind, core = acc.kind, CORE[acc.kind]
    outer, extent = acc.outer, acc.extent
    block = 256
    warps = block // 32
    per_part = -(-extent // parts)
    per_part = -(-per_part // vec) * vec  # slices start on vector boundaries
    parts = -(-extent // per_part)
    steps = -(-per_part // (block * vec))
    name = f"{operator}_cuda_split_rows_p{parts}_v{vec}"
    wt = TensorType(adt, (parts * outer,))

    @script
    def split_rows_partial(x: xt, partial: wt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name
        attrs.cuda.grid_dim = (outer, parts)
        attrs.cuda.block_dim = block
        red = shared_tensor(adt, [warps])
        if vec > 1:
            raw = register_tensor(dtypes.vector_type(dtypes.uint32, 4), [1])
            xv = tensor_pointer(xdt, [vec], init=cast(address_of(raw[0]), PointerType(xdt)))
        tid = threadIdx.x
        o = blockIdx.x
        begin = blockIdx.y * per_part
        end = min(extent, begin + per_part)
        part = init_value(core, adt)
        for s in range(steps):
            r0 = begin + (s * block + tid) * vec
            if r0 < end:
                if vec > 1:
                    raw[0] = deref(cast(address_of(x[acc.x_index(o, r0)]), RAW16))
                    for v in static_range(vec):
                        part = combine(core, part, transform(kind, cast(xv[v], adt)))
                else:
                    part = combine(core, part, transform(kind, cast(x[acc.x_index(o, r0)], adt)))
        for d in static_range(5):
            part = combine(core, part, shfl_xor_sync(FULL_MASK, part, 16 >> d))
        if tid % 32 == 0:
            red[tid / 32] = part
        syncthreads()
        if tid == 0:
            total = red[0]
            for k in static_range(1, warps):
                total = combine(core, total, red[k])
            partial[blockIdx.y * outer + o] = total

    yt = TensorType(y.dtype, y.shape)
    name2 = name + "_combine"

    @script
    def split_rows_combine(partial: wt, y: yt):
        attrs.func_kind = "cuda_kernel"
        attrs.func_name = name2
        attrs.cuda.grid_dim = -(-outer // 256)
        attrs.cuda.block_dim = 256
        o = blockIdx.x * 256 + threadIdx.x
        if o < outer:
            total = partial[o]
            for p in range(1, parts):
                total = combine(core, total, partial[p * outer + o])
            acc.store_row(y, finish(kind, total, extent), o)

    launches = (Launch(name, (BufferRef("input", 0), BufferRef("workspace", 0))),
                Launch(name2, (BufferRef("workspace", 0), BufferRef("output", 0))))
    workspace = (WorkspaceSpec("row_parts", adt, (parts * outer,)),)
    return ScheduledTask(script_module(split_rows_partial, split_rows_combine, name=name), launches, workspace,
                         source=source, params={**dict(params), "plan": {"parts": parts, "vec": vec, "split_rows": True}})
