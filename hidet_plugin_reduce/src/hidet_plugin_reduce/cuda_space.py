"""Schedule spaces of the CUDA reduce templates, from the target only, and how a
candidate becomes a concrete plan for one shape (the shape only clamps, as the matmul
templates clamp their tiles).

Row kernels (``cuda_rows.py``), a candidate:

- ``cache_bytes``: how much of its row one thread keeps in registers (64, 128 or 256
  bytes: 16 to 64 32-bit registers; the register file per resident thread,
  ``regs_per_sm / max_threads_per_sm``, is the unit);
- ``vector_bytes``: 16 (one 128-bit load or store per access: 4 float32, 8 float16)
  or 0 (element accesses only);
- ``min_threads``: the fewest threads that share a row: 32 (a row per warp, the warp
  combines with shuffles) or 128 and up (a row per block part, warps combine through
  shared memory);
- ``block``: threads per block (several short rows share a block).

At build time the row gets the fewest threads (a power of two from ``min_threads`` to
the block limit) for which its share fits ``cache_bytes``: the kernel then reads x once
and keeps it in registers (one pass). A row too long even for a full block is streamed
(read again per pass, online softmax).

Column kernels (``cuda_columns.py``, reductions over non-innermost axes): ``tile``
columns per block along the contiguous inner axis (coalesced, optionally vectorised),
``split`` rows of the reduced axis per block, and how many waves of blocks to aim
for; when the grid would not fill the GPU, the reduced axis is split across blocks and
a second kernel combines the partial results.
"""
from __future__ import annotations

import itertools
from typing import Any

WARP = 32


def cuda_facts(target: Any) -> dict:
    return {
        "sm_count": int(target.get("sm_count", 132)),
        "warp": int(target.get("warp_size", WARP)),
        "max_block": int(target.get("max_threads_per_block", 1024)),
        "threads_per_sm": int(target.get("max_threads_per_sm", 2048)),
        "regs_per_thread": int(target.get("regs_per_sm", 65536)) // int(target.get("max_threads_per_sm", 2048)),
    }


def rows_space(target: Any, level: int) -> list[dict]:
    f = cuda_facts(target)
    unit = 4 * f["regs_per_thread"]  # bytes of registers per resident thread at full occupancy
    default = {"cache_bytes": unit, "vector_bytes": 16, "min_threads": f["warp"], "block": 256}
    out = [default]
    if level == 0:
        return out
    for cache, vec, mt, block in itertools.product((unit, unit // 2, 2 * unit), (16, 0), (f["warp"], 4 * f["warp"]),
                                                   (256, 512)):
        c = {"cache_bytes": cache, "vector_bytes": vec, "min_threads": mt, "block": min(block, f["max_block"])}
        if c not in out:
            out.append(c)
    return out[:30]


def row_plan(params: dict, extent: int, elem_bytes: int, target: Any, vector_ok: bool) -> dict:
    """Threads per row, rows per block, vector width, chunks per thread, and whether
    the row is cached in registers, for one row length."""
    f = cuda_facts(target)
    vec = max(1, int(params["vector_bytes"]) // elem_bytes) if vector_ok and params["vector_bytes"] else 1
    if extent % vec:
        vec = 1  # rows must start on a vector boundary
    cap = max(1, int(params["cache_bytes"]) // elem_bytes)
    threads = max(f["warp"], int(params["min_threads"]))
    while threads < f["max_block"] and -(-extent // (threads * vec)) * vec > cap:
        threads *= 2
    # never more threads than the row has vector positions (a short row per warp)
    while threads > f["warp"] and (threads // 2) * vec >= extent and threads > int(params["min_threads"]):
        threads //= 2
    chunks = -(-extent // (threads * vec))
    cached = chunks * vec <= cap
    block = max(threads, min(int(params["block"]), f["max_block"]))
    return {"threads": threads, "rows_per_block": block // threads, "block": block, "vec": vec,
            "chunks": chunks, "cached": cached, "warps_per_row": max(1, threads // f["warp"])}


def columns_space(target: Any, level: int) -> list[dict]:
    out = [{"tile": 32, "split": 8, "vector_bytes": 16, "waves": 4}]
    if level == 0:
        return out
    for tile, split, vec, waves in itertools.product((32, 64), (8, 4, 16), (16, 0), (4, 2)):
        if tile * split > 1024:
            continue
        c = {"tile": tile, "split": split, "vector_bytes": vec, "waves": waves}
        if c not in out:
            out.append(c)
    return out[:30]
