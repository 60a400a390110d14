"""The pointwise form of ``ops.conv2d_cpu_direct`` (candidate key ``form="pixels"``):
1x1, stride 1, no padding, where a convolution is the plain GEMM
``y[n, :, p] = W[:, :] @ x[n, :, p]`` over the flat pixels p of an image.

The register tile turns around: ``mr`` output channels times ``nvp`` SIMD vectors of
consecutive pixels (``mr x nvp`` accumulators), each input channel loads ``nvp`` pixel
vectors of x (contiguous) and broadcasts ``mr`` packed weights. The tile is then stored
along pixels, contiguous in NCHW, so the element stores vectorize; the direct form's
tile (pixels x channel vectors) must be stored transposed, one element at a time,
which costs about a quarter of the time where K = C is 64 or 128 (the expansions of
a bottleneck block)::

    parallel over items (n, channel block, pixel tile), handed out dynamically:
        for each sub-block of mr channels of the ob-channel block:
            mr x nvp accumulators over the C input channels
        y[n, o, p / OW, p % OW] = acc + bias    (element stores; the flat index folds)

Pixel tiles are ``nvp * lanes`` wide; a partial last tile has the fewest whole vectors
that cover the rest, is moved back to end at the last pixel and stores only the pixels
the full tiles did not (every element once). Where that computes more than 10% extra
pixels (7x7 images: 64 for 49), the candidate builds the direct form instead.
x is read as vectors through its address, so a producer cannot be grafted onto x (the
fusion engine then keeps it a separate kernel); epilogues graft as in the direct form.
Where x is larger than half of L2 (read from the machine), each tile also prefetches
the next tile's input lines (`prefetch_ahead`).
"""
from __future__ import annotations

from typing import Any, Mapping

from hidet_framework.ir.mapping import spatial
from hidet_framework.ir.primitives import PrimitiveFunction, register_primitive
from hidet_framework.ir.types import PointerType
from hidet_framework.lang import (
    address_of, attrs, cast, deref, f32, i32, local_tensor, parallel, register_tensor, script, static_range,
)

__all__ = ["pointwise_applies", "pointwise_tile", "build_pointwise", "prefetch_ahead"]

PIXEL_VECTORS = 3    # nvp: pixel vectors per register tile
MAX_WASTE = 1.1      # computed pixels / image pixels where the pointwise form is used

# a read prefetch into every cache level (x86 ``prefetcht0``): the next pixel tile's
# input lines, one channel at a time (see `_tile_function`)
prefetch_read = register_primitive(PrimitiveFunction("cpu_prefetch_read", None,
                                                     {"cpu": "__builtin_prefetch({0}, 0, 3)"},
                                                     evaluate=lambda address: None))


def pointwise_tile(registers: int, ob: int) -> tuple[int, int]:
    """(mr, nvp): the most channels per tile that divide ob with mr * nvp accumulators,
    nvp pixel vectors and a broadcast in the register file (8 x 3 with 32, 4 x 3 with 16)."""
    nvp = PIXEL_VECTORS
    fits = [m for m in range(1, ob + 1) if ob % m == 0 and m * nvp + nvp + 1 <= registers]
    return (max(fits) if fits else 1), nvp


def _pixel_tiles(hw: int, npx: int, lanes: int) -> tuple[int, int]:
    """(full tiles, vectors of the last partial tile or 0)."""
    full, rest = divmod(hw, npx)
    return full, -(-rest // lanes)


def pointwise_applies(x_shape: tuple, wp_shape: tuple, attributes: Mapping[str, Any], lanes: int) -> bool:
    """1x1, stride 1, no padding, whole pixel vectors, and at most MAX_WASTE more pixels
    computed than the image has (7x7 = 49 pixels would compute 64: the direct form)."""
    _, _, h, w = x_shape
    _, _, kh, kw, ob = wp_shape
    if (kh, kw) != (1, 1) or tuple(attributes["stride"]) != (1, 1) or tuple(attributes["padding"]) != (0,) * 4 \
            or lanes <= 1 or ob % lanes or h * w < PIXEL_VECTORS * lanes:
        return False
    full, last = _pixel_tiles(h * w, PIXEL_VECTORS * lanes, lanes)
    return (full * PIXEL_VECTORS + last) * lanes <= MAX_WASTE * h * w


def _tile_function(key: str, vec: Any, lanes: int, mr: int, nvp: int, npx: int, ob: int, c: int, w: int,
                   x_shape: tuple, wp_shape: tuple, ahead: bool = False, subs: int = 0):
    """ob channels x nvp pixel vectors from p0, into tile[channel * npx + pixel];
    `ahead`: prefetch the next tile's pixels of each channel (`prefetch_ahead`);
    `subs` > 0: only the first `subs` sub-blocks of mr channels (the last block of a
    ragged O: the others hold zero weights only)."""
    vec_ptr = PointerType(vec)
    hw = x_shape[2] * x_shape[3]

    @script
    def pixel_tile(x: f32[x_shape], wp: f32[wp_shape], tile: f32[ob * npx], ni: i32, blk: i32, p0: i32):
        attrs.func_kind = "device"
        attrs.func_name = key
        acc = register_tensor(vec, [mr, nvp])
        xv = register_tensor(vec, [nvp])
        for sub in static_range(subs or ob // mr):
            for i in static_range(mr):
                for v in static_range(nvp):
                    acc[i, v] = cast(0.0, vec)
            for ci in range(c):
                if ahead and sub == 0:
                    for v in static_range(nvp):
                        nxt = p0 + npx + v * lanes
                        if nxt < hw:
                            prefetch_read(address_of(x[ni, ci, nxt / w, nxt % w]))
                for v in static_range(nvp):
                    pix = p0 + v * lanes
                    xv[v] = deref(cast(address_of(x[ni, ci, pix / w, pix % w]), vec_ptr))
                for i in static_range(mr):
                    wgt = wp[blk, ci, 0, 0, sub * mr + i]
                    for v in static_range(nvp):
                        acc[i, v] += cast(wgt, vec) * xv[v]
            for i in static_range(mr):
                for v in static_range(nvp):
                    tp = cast(address_of(tile[(sub * mr + i) * npx + v * lanes]), vec_ptr)
                    tp[0] = acc[i, v]

    return pixel_tile


def prefetch_ahead(x_shape: tuple, l2_bytes: int) -> bool:
    """Whether a pixel tile prefetches the next tile's input lines: where x (one image)
    is larger than half the L2 cache read from the machine. A tile reads ``C`` channel
    planes at once, one short run of each: in a model x then comes from L3 or memory
    and ``C`` concurrent streams are more than the hardware prefetcher follows, so the
    loads wait. Items walk the pixel tiles of a channel block in order, so the next
    tile's lines are the next item's. MobileNet-V2 in a model pass, one thread,
    AVX-512 Zen 4: 32->16 at 112x112 186 -> 150 us, 96->24 at 56x56 175 -> 147 us;
    where x stays in L2 (14x14 stages) it measured no gain and is left out."""
    _, c, h, w = x_shape
    return c * h * w * 4 > l2_bytes // 2


def build_pointwise(name: str, x_shape: tuple, wp_shape: tuple, y_shape: tuple, has_bias: bool, vec: Any,
                    lanes: int, registers: int, params: Mapping[str, Any], l2_bytes: int = 1 << 20):
    """The kernel function (to be wrapped in a ScheduledTask by the caller); `l2_bytes`:
    the machine's L2 (`prefetch_ahead`)."""
    n, c, h, w = x_shape
    blocks, _, _, _, ob = wp_shape
    o = y_shape[1]
    hw = h * w
    mr, nvp = pointwise_tile(registers, ob)
    npx = nvp * lanes
    ragged = o % ob != 0
    b_shape = (o,) if has_bias else (1,)
    row_inner = params.get("order", "row") == "row"
    schedule = params.get("schedule", "dynamic")

    full, last = _pixel_tiles(hw, npx, lanes)
    ptiles = full + (1 if last else 0)
    item_map = spatial(n, blocks, ptiles) if row_inner else spatial(n, ptiles, blocks)
    ahead = prefetch_ahead(x_shape, l2_bytes)
    tile_full = _tile_function(name + "_pixels", vec, lanes, mr, nvp, npx, ob, c, w, x_shape, wp_shape, ahead)
    tile_last = _tile_function(name + "_pixels_last", vec, lanes, mr, max(1, last), npx, ob, c, w, x_shape,
                               wp_shape)
    last_px = max(1, last) * lanes
    # the last block of a ragged O (176 = 5 x 32 + 16 with AVX-512): only its sub-blocks
    # of mr channels that hold output channels
    subs = -(-(o - (blocks - 1) * ob) // mr)
    narrow = subs < ob // mr
    if narrow:
        full_nb = _tile_function(name + "_pixels_lastblock", vec, lanes, mr, nvp, npx, ob, c, w, x_shape, wp_shape,
                                 ahead, subs)
        last_nb = _tile_function(name + "_pixels_last_lastblock", vec, lanes, mr, max(1, last), npx, ob, c, w,
                                 x_shape, wp_shape, False, subs)

    @script
    def conv2d_cpu_pointwise(x: f32[x_shape], wp: f32[wp_shape], b: f32[b_shape], y: f32[y_shape]):
        attrs.func_kind = "cpu_kernel"
        attrs.func_name = name
        for item in parallel(n * blocks * ptiles, schedule=schedule):
            tile = local_tensor(f32, [ob * npx])
            for ni, u, v in item_map.on(item):
                blk = u if row_inner else v
                pt = v if row_inner else u
                first = pt * npx
                if pt < full:
                    if narrow and blk == blocks - 1:  # host `narrow` False: only the else is traced
                        full_nb(x, wp, tile, ni, blk, first)
                    else:
                        tile_full(x, wp, tile, ni, blk, first)
                    for t in range(ob):
                        oc = blk * ob + t
                        if not ragged or oc < o:
                            bias = b[oc] if has_bias else 0.0
                            for q in range(npx):
                                p = first + q
                                y[ni, oc, p / w, p % w] = tile[t * npx + q] + bias
                else:
                    # the partial last tile: whole vectors, ending at the last pixel;
                    # only the pixels past the full tiles are stored
                    p0 = hw - last_px
                    if narrow and blk == blocks - 1:  # host `narrow` False: only the else is traced
                        last_nb(x, wp, tile, ni, blk, p0)
                    else:
                        tile_last(x, wp, tile, ni, blk, p0)
                    for t in range(ob):
                        oc = blk * ob + t
                        if not ragged or oc < o:
                            bias = b[oc] if has_bias else 0.0
                            for q in range(first - p0, last_px):
                                p = p0 + q
                                y[ni, oc, p / w, p % w] = tile[t * npx + q] + bias

    return conv2d_cpu_pointwise
