"""Host-side planning of the direct convolution (`cpu_conv_template.py`): the register
tile's width, the tuning space, column tiles, channel blocks and the weight prefetch,
each derived from the target (vector width, register count, cache sizes) and the
shape. Nothing here traces code."""
from __future__ import annotations

from typing import Any

from .cpu_conv import target_lanes, vector_registers

__all__ = ["LINE_FLOATS", "max_pixels", "conv_space", "column_tiles", "last_block_vectors", "next_block_lines",
           "valid_taps", "tile_runs", "channel_block"]

LINE_FLOATS = 16    # float32 values per 64-byte cache line (x86 and Arm cores alike)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def max_pixels(target: Any, ob: int) -> int:
    """Pixels per register tile: ``pixels * nv`` accumulators plus nv weight vectors and
    a broadcast fit the vector register file (32 registers with AVX-512, 16 below)."""
    lanes = target_lanes(target)
    nv = max(1, ob // lanes) if ob % lanes == 0 else ob
    return max(1, (vector_registers(target) - nv - 1) // nv)


def conv_space(target: Any, level: int, ob: int) -> list[dict]:
    """Candidates for weight blocks `ob` wide, the default first."""
    top = max_pixels(target, ob)
    # form "pixels": the pointwise GEMM form (cpu_conv_pointwise.py) where the shape
    # allows it, the direct form elsewhere (so every candidate builds for every shape)
    pixels = {"owb": top, "order": "row", "schedule": "dynamic", "form": "pixels"}
    # The default: the pointwise form with 32 vector registers (AVX-512: an 8-channel x
    # 3-vector tile), the direct form with 16 (AVX2: the pointwise tile is 4 x 3, each
    # loaded pixel vector feeds half as many FMAs). On an AVX2 EPYC the pointwise form
    # took 1.1-1.8x the direct form's time on ResNet-50's 1x1 shapes (docs/perf_notes.md,
    # "Session 17 (lead): a real AVX2 machine"); it stays in the space for the tuner.
    out = [pixels if vector_registers(target) >= 32 else dict(pixels, form="direct")]
    if level == 0:
        return out
    for owb in sorted({top, max(1, top - 2), max(1, top // 2 + 1), max(1, (2 * top) // 3)}, reverse=True):
        for order in ("row", "block"):
            for schedule in ("dynamic", "static"):
                c = {"owb": owb, "order": order, "schedule": schedule, "form": "direct"}
                if c not in out:
                    out.append(c)
    out += [c for c in (pixels, dict(pixels, order="block"), dict(pixels, schedule="static")) if c not in out]
    return out[:30 if level == 1 else 200]


def column_tiles(ow: int, owb: int) -> list[tuple[int, int]]:
    """(first column, width) of each column tile: ceil(OW / owb) tiles, balanced."""
    count = _ceil_div(ow, max(1, owb))
    base, extra = divmod(ow, count)
    tiles, start = [], 0
    for t in range(count):
        width = base + (1 if t < extra else 0)
        tiles.append((start, width))
        start += width
    return tiles


def last_block_vectors(o: int, ob: int, lanes: int) -> int:
    """SIMD vectors the last block of `ob` output channels needs for the O = `o` channels
    (``ob / lanes`` where O fills it; fewer where O is ragged: 80 = 32 + 32 + 16 needs one
    of two with 16 lanes). Lanes past O inside a needed vector are computed (zero
    weights: the blocked layout stores them as zeros). Scalar tiles (`lanes` 1) keep
    ob."""
    if lanes <= 1:
        return ob
    rest = o - (_ceil_div(o, ob) - 1) * ob
    return min(ob // lanes, _ceil_div(rest, lanes))


def next_block_lines(wp_shape: tuple, parts: int, l2_bytes: int) -> int:
    """Cache lines of the next weight block that each of the `parts` items (output
    rows) of a block prefetches; 0: none. With ``order="row"`` the items of one weight
    block run one after another, so while they compute, the next block (in a model,
    cold: the other layers' weights evicted it) is brought in, one share per row;
    only where two blocks fit the L2 (its size read from the machine)."""
    blocks, c, kh, kw, ob = wp_shape
    block_bytes = c * kh * kw * ob * 4
    if blocks < 2 or 2 * block_bytes > l2_bytes:
        return 0
    return _ceil_div(_ceil_div(block_bytes, LINE_FLOATS * 4), max(1, parts))


def valid_taps(col0: int, width: int, geometry: dict) -> tuple:
    """Per (pixel j, tap kw) of a tile at column col0: whether the input column lies
    inside the image (a host fact, since tiles are placed while building)."""
    sw, dw, left, w, kw = (geometry[k] for k in ("sw", "dw", "left", "w", "kw"))
    return tuple(tuple(0 <= (col0 + j) * sw - left + q * dw < w for q in range(kw)) for j in range(width))


def tile_runs(ow: int, owb: int, geometry: dict, make_kernels: Any) -> list[list]:
    """The column tiles of an output row (`column_tiles`) as runs ``[first column, width,
    tiles, kernels]``: tiles of one width whose taps lie inside alike (`valid_taps`)
    share the kernels ``make_kernels(k, width, valid)`` made for the k-th such kind, and
    neighbouring interior tiles (every tap inside) of one width are one run, a loop in the
    kernel (the code's size does not grow with the image's width)."""
    runs, kernels = [], {}
    for col0, width in column_tiles(ow, owb):
        valid = valid_taps(col0, width, geometry)
        key = (width, valid)
        if key not in kernels:
            kernels[key] = make_kernels(len(kernels), width, valid)
        same = runs and runs[-1][3] is kernels[key] and all(all(v) for v in valid)
        if same and runs[-1][0] + runs[-1][1] * runs[-1][2] == col0:
            runs[-1][2] += 1
        else:
            runs.append([col0, width, 1, kernels[key]])
    return runs


def channel_block(geo: dict, width: int, ob: int) -> int:
    """Input channels per block of the micro-kernel: their input rows (the cache lines a
    tile of `width` pixels reads, kh rows) and their packed weights (kh x kw x ob
    floats) fit in half the L1 data cache (``geo["l1d"]``, read from the machine)."""
    span = (width - 1) * geo["sw"] + (geo["kw"] - 1) * geo["dw"] + 1          # floats of one input row
    row_bytes = (-(-span * 4 // 64) + 1) * 64                                 # its lines, misaligned
    per_channel = geo["kh"] * (row_bytes + geo["kw"] * ob * 4)
    return max(1, min(geo["c"], (geo["l1d"] // 2) // per_channel))
