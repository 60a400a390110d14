"""The implicit-GEMM convolution's gather: which image element each A-tile copy of the
kernel (`cuda_conv_kernel`) reads, and where each output goes.

Host code over ints or IR alike (Python operators, `select`, `guard`): the kernel calls
it while tracing with registers and thread indices; the tests call it with ints and
check, thread by thread, that the copies of every tile reproduce the im2col matrix
(zero in the padding, past M and past K) without forming an address outside x.

- Rows: before the k-loop each thread decomposes the few output pixels its copies
  touch (its A deltas' rows) into window origin (``oh*sh - top``, ``ow*sw - left``)
  and, on the cp.async path, the flat NHWC offset of that origin (else the batch
  index), kept in registers; a pixel past M gets origin row `FAR`, which the ``ih >=
  0`` check refuses.
- Columns: per k-tile, column k = (kh, kw, c) once per distinct column delta. On the
  cp.async path (`column_state`) the kernel keeps (kh*dh, kw*dw, flat offset of the
  tap) in registers, so a copy is three adds, the bound checks the static shape
  leaves (none inside the image of an unpadded convolution) and one select: the
  window's divisions and the 4-D index products are not repeated per 16-byte chunk
  (H200, batch 8: they made the 3x3 stride-1 kernels issue-bound, ~740 instructions
  a 128x64x64 k-tile against 64 mma).
- Staging (`conv_staging`): "cp" (x NHWC, C/G % 8 == 0: 16-byte chunks of 8
  channels), "nhwc" (x NCHW, C/G % 8 == 0: the template copies x to NHWC first and
  runs "cp" on the copy), "reg" (anything else: element reads, pixel-major threads).
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from hidet_framework.mapping.task_mapping import repeat, spatial

from hidet_plugin_matmul.cuda_conv_op import ConvGeometry
from hidet_plugin_matmul.cuda_ir_builders import guard, select
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, static_tasks
from hidet_plugin_matmul.cuda_smem_offsets import OffsetPlan, TileCopy, plan_offsets, tile_copy
from hidet_plugin_matmul.cuda_tensor_core_kernel import smem_swizzle, tc_config

FAR = -(1 << 24)  # window origin row of a pixel past M: outside every image


def channels_first(geo: ConvGeometry) -> int:
    """For a pointwise, stride-1, unpadded, ungrouped conv of NCHW x, A[m, k] = x[n, k, p]
    is a k-major matrix per image, read as it lies with no NHWC copy, in chunks of 8
    pixels of one channel (16 bytes) where H*W % 8 == 0, else of 4 (8-byte cp.async)
    where H*W % 4 == 0 (14x14 planes); the chunk's pixel count, 0 where neither holds."""
    if not (geo.kernel == (1, 1) and geo.stride == (1, 1) and not any(geo.pads) and geo.groups == 1
            and geo.x_layout == "nchw"):
        return 0
    plane = geo.height * geo.width
    return 8 if plane % 8 == 0 else 4 if plane % 4 == 0 else 0


def conv_staging(geo: ConvGeometry, params: Mapping[str, Any]) -> str:
    if params.get("reg_stage"):
        return "reg"
    # channels-first (params["channels_first"]): set on the space-0 pick where it applies
    # (cuda_conv.CF_ENV; measured on the H200 in session 9), in no tuning space
    if params.get("channels_first") and channels_first(geo):
        return "cf"
    if geo.cg % 8:
        return "reg"
    return "cp" if geo.x_layout == "nhwc" else "nhwc"


def pixel_major_copy(layout: Any, rows: int, cols: int, threads: int) -> TileCopy:
    """The register path's A copy: consecutive threads take consecutive rows (output
    pixels: neighbouring image columns in NCHW, so a warp's reads coalesce), each a run
    of columns; a thread then holds the window origin of one or two pixels only
    (``auto_map`` would give it many rows, whose origins would fill the registers)."""
    across = min(rows, threads)
    mapping = spatial(across, threads // across, ranks=[1, 0]) * repeat(rows // across, cols * across // threads)
    deltas = tuple(static_tasks(mapping))
    partial = TileCopy(mapping, 1, deltas, OffsetPlan((), ()))
    return attrs.evolve(partial, plan=plan_offsets(layout, partial.origin, deltas, threads))


class ConvGather:
    """The A-operand gather and the output index of one candidate on one shape.
    `geo` is the convolution as the main kernel reads it (x NHWC under "nhwc")."""

    def __init__(self, geo: ConvGeometry, params: Mapping[str, Any]):
        cfg = tc_config(params)
        path = conv_staging(geo, params)
        if path == "nhwc":
            geo, path = attrs.evolve(geo, x_layout="nhwc"), "cp"
        self.geo, self.async_copy, self.k_major = geo, path in ("cp", "cf"), path == "cf"
        self.bm, self.bk, self.split = cfg["bm"], cfg["bk"], cfg["split"]
        self.vec = (channels_first(geo) if self.k_major else 8) if self.async_copy else 1  # elements a copy
        if self.k_major:  # the A tile is stored [BK, BM]: chunks of 8 (or 4) pixels, copy deltas (k, m)
            self.copy = tile_copy(smem_swizzle(self.bk, self.bm), self.bk, self.bm, cfg["threads"], self.vec)
        else:
            layout = smem_swizzle(self.bm, self.bk)
            self.copy = (tile_copy(layout, self.bm, self.bk, cfg["threads"], 8) if self.async_copy
                         else pixel_major_copy(layout, self.bm, self.bk, cfg["threads"]))
        # row registers: one per distinct pixel delta; column state: one per distinct k delta
        pixel_axis = 1 if self.k_major else 0
        self.rows = sorted({d[pixel_axis] for d in self.copy.deltas})
        self.cols = sorted({d[1 - pixel_axis] for d in self.copy.deltas})
        self.tiles_all = max(1, ceil_div(geo.k, self.bk))
        self.tiles = ceil_div(self.tiles_all, self.split)  # k-tiles per split slice
        self.m_whole = geo.m % self.bm == 0
        self.k_whole = geo.k % self.bk == 0 and self.tiles * self.split == self.tiles_all
        (oh, ow), (kh, kw) = geo.out_hw, geo.kernel
        # which of ih >= 0, ih < H, iw >= 0, iw < W every tap satisfies
        self.known = (geo.pads[0] == 0 and self.m_whole,
                      (oh - 1) * geo.stride[0] - geo.pads[0] + (kh - 1) * geo.dilation[0] <= geo.height - 1,
                      geo.pads[1] == 0,
                      (ow - 1) * geo.stride[1] - geo.pads[1] + (kw - 1) * geo.dilation[1] <= geo.width - 1)

    def pixel(self, p: Any) -> tuple:
        (oh, ow) = self.geo.out_hw
        return p // (oh * ow), p // ow % oh, p % ow

    def row_pixel(self, m0: Any, ai: Any, aj: Any, d: int) -> Any:
        """The output pixel of row register d (`rows`) of the thread at (ai, aj)."""
        return m0 + (aj if self.k_major else ai) + d

    def window_origin(self, p: Any) -> tuple:
        """Pixel p's row registers: (flat offset of its window origin in x on the cp.async
        paths, else its batch index; first image row, FAR past M; first image column)."""
        g = self.geo
        n, oy, ox = self.pixel(p)
        h0, w0 = oy * g.stride[0] - g.pads[0], ox * g.stride[1] - g.pads[1]
        if self.k_major:  # x[n, 0, oy, ox] (NCHW): channel k is k*H*W further
            first = (n * g.channels * g.height + oy) * g.width + ox
        else:
            first = ((n * g.height + h0) * g.width + w0) * g.channels if self.async_copy else n
        return first, (h0 if self.m_whole else select(p < g.m, h0, FAR)), w0

    def column_state(self, kbase: Any, ai: Any, aj: Any, gz: Any) -> list:
        """cp.async paths: per distinct k delta (`cols`) of the thread at (ai, aj), the
        tap's (row shift, column shift, flat offset in x) for the k-tile at kbase."""
        g = self.geo
        out = []
        for dk in self.cols:
            if self.k_major:
                out.append((0, 0, (kbase + ai + dk) * (g.height * g.width)))
                continue
            r, q, c = g.tap(kbase + aj + dk)
            dh, dw = r * g.dilation[0], q * g.dilation[1]
            out.append((dh, dw, (dh * g.width + dw) * g.channels + (gz * g.cg + c if g.groups > 1 else c)))
        return out

    def taps(self, x: Any, rn: Any, rh: Any, rw: Any, gz: Any, kbase: Any, ai: Any, aj: Any,
             cols: Any = None) -> list:
        """For each A delta of the thread at (ai, aj) (rn/rh/rw[r]: the row registers of
        its pixel r, `window_origin`): (x element read, whether it is in the image and k <
        K); outside, the read is clamped to element 0 (the copy reads nothing there).
        cp.async paths: `cols[j]` is `column_state`'s entry of k delta j (registers in
        the kernel) and the read is a flat offset into x."""
        g = self.geo
        h_lo, h_hi, w_lo, w_hi = self.known
        out = []
        if self.k_major:
            for dk, dm in self.copy.deltas:
                r, off = self.rows.index(dm), cols[self.cols.index(dk)][2]
                ok = guard([(self.m_whole, rh[r] >= 0), (self.k_whole, kbase + ai + dk < g.k)])
                out.append((x[select(ok, rn[r] + off, 0)], ok))
            return out
        if self.async_copy:
            for di, dj in self.copy.deltas:
                j, r = self.cols.index(dj), self.rows.index(di)
                dh, dw, off = cols[j]
                ih, iw = rh[r] + dh, rw[r] + dw
                ok = guard([(h_lo, ih >= 0), (h_hi, ih < g.height), (w_lo, iw >= 0), (w_hi, iw < g.width),
                            (self.k_whole, kbase + aj + dj < g.k)])
                out.append((x[select(ok, rn[r] + off, 0)], ok))
            return out
        taps = {}
        for dj in self.cols:
            kk = kbase + aj + dj
            r, q, c = g.tap(kk)
            taps[dj] = (kk, r * g.dilation[0], q * g.dilation[1], gz * g.cg + c if g.groups > 1 else c)
        for di, dj in self.copy.deltas:
            kk, dh, dw, ch = taps[dj]
            r = self.rows.index(di)
            ih, iw = rh[r] + dh, rw[r] + dw
            ok = guard([(h_lo, ih >= 0), (h_hi, ih < g.height), (w_lo, iw >= 0), (w_hi, iw < g.width),
                        (self.k_whole, kk < g.k)])
            index = g.x_index(select(ok, rn[r], 0), select(ok, ih, 0), select(ok, iw, 0), select(ok, ch, 0))
            out.append((x[index], ok))
        return out

    def out_index(self, zs: Any, gz: Any, row: Any, col: Any) -> tuple:
        """Where GEMM element (row, col) of group gz goes: the fp32 partials under
        split-K, else y (NCHW or NHWC)."""
        if self.split > 1:
            return zs, gz, row, col
        n, oy, ox = self.pixel(row)
        return self.geo.y_index(n, gz * self.geo.cog + col if self.geo.groups > 1 else col, oy, ox)
