"""The flat form of ``ops.conv2d_cpu_direct`` (1x1, stride 1, no padding, where the
pointwise form does not pay): the output pixels of an image are one flat row.

A 1x1 stride-1 convolution without padding reads input pixel p for output pixel p,
so the direct form's register tile (pixels x output-channel vectors) need not stop at
the end of an image row: on a 7x7 image a row gives a tile of 7 pixels (half the
register tile: 14 FMAs per pair of weight vectors loaded, the weight block streamed
once per row), the flat row of 49 pixels gives 4 tiles of 12-13 pixels. The tiles
are placed over the flat pixels with `column_tiles`; an item is (image, channel block,
tile), the micro-kernel and the element stores are the direct form's with the pixel
index unravelled (``p / W``, ``p % W``: constants, hoisted out of the reduction)::

    parallel over items (n, channel block, flat tile), handed out dynamically:
        micro-kernel: width x nv accumulators over c
        chan[o, j] = tile[j, o]                   (channel-major, in L1)
        y[n, o, p / OW, p % OW] = chan + bias     (element stores: epilogues graft)

The stores go through a channel-major buffer: from the register tile (pixels x
channel vectors) each channel's ``width`` pixels would be scalar stores, a piece of a
cache line in each of ob planes; in a model y is cold (its buffer was last used
several kernels earlier) and those stores wait on their lines. From ``chan`` a
channel's pixels are one run, stored as vectors (gcc vectorizes the loop and a
grafted epilogue with it). MobileNet-V2's 160->960 1x1 on 7x7, in a model pass, one
thread, AVX-512 Zen 4: 366 -> 187 us; 320->1280: 760 -> 457 us (docs/perf_notes.md).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.lang import attrs, f32, local_tensor, parallel, script

__all__ = ["flat_applies", "build_flat"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def flat_applies(x_shape: tuple, wp_shape: tuple, y_shape: tuple, attributes: Mapping[str, Any], owb: int,
                 blocked: bool = False) -> bool:
    """1x1, stride 1, no padding, and fewer register tiles over the flat pixels than
    over the rows (7x7: 4 against 7; 56x56 with 14-pixel tiles: the same, not flat),
    or x or y in the channel-blocked layout (`blocked`: the pointwise form cannot read
    or write it, and the flat tiles are the fewest)."""
    _, _, kh, kw, _ = wp_shape
    oh, ow = y_shape[2], y_shape[3]
    if (kh, kw) != (1, 1) or tuple(attributes["stride"]) != (1, 1) or tuple(attributes["padding"]) != (0,) * 4:
        return False
    return blocked or _ceil_div(oh * ow, owb) < oh * _ceil_div(ow, owb)


def build_flat(name: str, x_shape: tuple, wp_shape: tuple, y_shape: tuple, has_bias: bool, params: Mapping[str, Any],
               owb: int, tiles: list, kernels: list, out_channels: int = 0, last: list | None = None):
    """The kernel function: `tiles` are `column_tiles(OH * OW, owb)` (at most two widths,
    wider first), `kernels[k]` the micro-kernel of the k-th width (flat reads); `last`,
    where given, those of the last channel block (a ragged O: fewer vectors).
    A rank-5 `y_shape` (`out_channels` channels, blocked): the tile is stored pixel by
    pixel, each pixel's channels one contiguous run (whole vectors), no channel-major
    buffer; a rank-5 `x_shape` with NCHW y: element stores straight from the tile."""
    n = x_shape[0]
    blocks, _, _, _, ob = wp_shape
    yl = y_shape[4] if len(y_shape) == 5 else 0      # y channel-blocked (cpu_blocked.py)
    xl = len(x_shape) == 5                           # x channel-blocked
    o, ow = (out_channels if yl else y_shape[1]), y_shape[3]
    ragged = o % ob != 0
    ycb = y_shape[1] if yl else 0      # channel vectors of blocked y (zeros past O)
    b_shape = (o,) if has_bias else (1,)
    count = len(tiles)
    wide = tiles[0][1]
    extra = sum(1 for _, width in tiles if width == wide) if tiles[-1][1] != wide else count
    narrow = tiles[-1][1]
    row_inner = params.get("order", "row") == "row"
    item_map = spatial(n, blocks, count) if row_inner else spatial(n, count, blocks)
    schedule = params.get("schedule", "dynamic")
    kernel_wide, kernel_narrow = kernels[0], kernels[-1]
    last_wide, last_narrow = (last[0], last[-1]) if last else (None, None)
    has_last = bool(last)  # a host condition: where False, only the plain kernels are traced

    @script
    def conv2d_cpu_flat(x: f32[x_shape], wp: f32[wp_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * blocks * count, schedule=schedule):
            tile = local_tensor(f32, [owb * ob])
            chan = local_tensor(f32, [ob * wide])
            for ni, u, v in item_map.on(item):
                blk = u if row_inner else v
                t = v if row_inner else u
                width = wide
                col0 = t * wide
                if t < extra:
                    if has_last and blk == blocks - 1:
                        last_wide(x, wp, tile, ni, blk, 0, col0, 0, 1)
                    else:
                        kernel_wide(x, wp, tile, ni, blk, 0, col0, 0, 1)
                else:
                    width = narrow
                    col0 = extra * wide + (t - extra) * narrow
                    if has_last and blk == blocks - 1:
                        last_narrow(x, wp, tile, ni, blk, 0, col0, 0, 1)
                    else:
                        kernel_narrow(x, wp, tile, ni, blk, 0, col0, 0, 1)
                if yl:
                    for j in range(width):
                        p = col0 + j
                        for v in range(ob // yl):
                            cv = blk * (ob // yl) + v
                            if cv < ycb:
                                for li in range(yl):
                                    oc = cv * yl + li
                                    if o % yl == 0:
                                        bias = b[oc] if has_bias else 0.0
                                        y[ni, cv, p / ow, p % ow, li] = tile[j * ob + v * yl + li] + bias
                                    elif oc < o:
                                        bias = b[oc] if has_bias else 0.0
                                        y[ni, cv, p / ow, p % ow, li] = tile[j * ob + v * yl + li] + bias
                                    else:    # lanes past O: zero weights, no bias
                                        y[ni, cv, p / ow, p % ow, li] = tile[j * ob + v * yl + li]
                elif xl:
                    # x blocked (a projection of a blocked block): stored from the tile
                    # directly; through `chan` these measured slower in a model pass
                    # (96->24@56: 334 -> 205 us, 32->16@112: 257 -> 194 us)
                    for k in range(ob):
                        oc = blk * ob + k
                        if not ragged or oc < o:
                            bias = b[oc] if has_bias else 0.0
                            for j in range(width):
                                p = col0 + j
                                y[ni, oc, p / ow, p % ow] = tile[j * ob + k] + bias
                else:
                    # channel-major through a second L1 buffer: each channel's pixels are
                    # then one contiguous run of y, stored as vectors (module docstring)
                    for k in range(ob):
                        for j in range(width):
                            chan[k * wide + j] = tile[j * ob + k]
                    for k in range(ob):
                        oc = blk * ob + k
                        if not ragged or oc < o:
                            bias = b[oc] if has_bias else 0.0
                            for j in range(width):
                                p = col0 + j
                                y[ni, oc, p / ow, p % ow] = chan[k * wide + j] + bias

    return conv2d_cpu_flat
