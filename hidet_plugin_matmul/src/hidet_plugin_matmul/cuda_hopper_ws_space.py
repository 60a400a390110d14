"""The candidate space and the cost-model description of `matmul.cuda_hopper_ws`
(cuda_hopper_ws.py): parameters, what fits the hardware, the level-0 choice.

Parameters: ``consumers`` warpgroups of ``m_tiles`` 64-row wgmma tiles each (BM = 64 *
consumers * m_tiles) by ``block_n`` columns, a ring of ``stages`` shared buffers,
``raster`` (tile order), ``cluster`` (2: pairs of blocks along M share B by TMA
multicast), ``epilogue`` (1: through per-warp shared chunks, coalesced stores; 0:
straight from the wgmma fragments), ``split`` (K slices + a reduce launch),
``persistent`` (1: at most one block a multiprocessor walks the tiles; 0: a block a
tile). Level 0 is ``{"auto": 1}``: the level-2 candidate the model of `cuda_defaults`
prices cheapest for the task's shape.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from hidet_plugin_matmul.cuda_defaults import AUTO, Gemm, Kernel, choose, is_auto, tile_efficiency
from hidet_plugin_matmul.cuda_matmul_common import ceil_div, target_int

BK = 64  # one 128-byte swizzle row of 16-bit elements
DEFAULT = {"consumers": 2, "m_tiles": 1, "block_n": 256, "stages": 4, "raster": 8, "cluster": 1, "epilogue": 1,
           "split": 1, "persistent": 1}
EPI_PITCH = 72  # halves per row of a warp's 16 x 64 staging chunk (64 + 8: conflict-free both ways)
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # with two consumers: 128 * 40 + 256 * 232 <= 65536


def ws_config(params: Mapping[str, Any]) -> dict:
    c, mt, bn = params["consumers"], params["m_tiles"], params["block_n"]
    bm = 64 * c * mt
    ring = params["stages"] * (bm + bn) * BK * 2
    staging = 4 * c * 16 * EPI_PITCH * 2 if params.get("epilogue", 0) and params.get("split", 1) == 1 else 0
    return {"bm": bm, "bn": bn, "threads": 128 * (c + 1), "acc": mt * bn // 2, "ring": ring,
            "smem": ring + staging}


def ws_legal(params: Mapping[str, Any], target: Any) -> bool:
    cfg = ws_config(params)
    # 1 KiB kept for the static shared memory (the mbarriers)
    return (cfg["smem"] + 1024 <= target_int(target, "smem_per_block_optin", 227 * 1024) and cfg["acc"] <= 128
            and cfg["bm"] <= 256 and params["stages"] >= 2 and params.get("cluster", 1) in (1, 2)
            and params["consumers"] in (1, 2) and params.get("split", 1) >= 1
            and (params.get("split", 1) == 1 or params.get("cluster", 1) == 1))  # 3: ptxas wants >= 154 registers under a 128 cap


MODEL_ENV = "HIDET_FRAMEWORK_HOPPER_WS_MODEL"


def model_opted_in() -> bool:
    """Whether the cost-model path is on (``HIDET_FRAMEWORK_HOPPER_WS_MODEL=1``): level 0
    becomes ``{"auto": 1}`` and the template gets an `estimate`, so the tuner's level 0
    can pick it. Off by default: its fused (grafted) form is correct on the H200
    (`test_level0_fused_bias_relu_on_the_gpu` passed in session 8), but the level-0 picks
    it makes (e.g. BN 64, 7 stages for GPT-2 / BERT's 128 x 2304 / 3072 / 768 x 768) have
    not been timed against the default ones on the same machine (docs/perf_notes.md,
    "Session 9 (hopper)")."""
    return os.environ.get(MODEL_ENV) == "1"


def ws_space(target: Any, level: int) -> list[dict]:
    """Tile shapes from the register file (<= 128 accumulators a consumer thread), as
    many stages as shared memory holds (at most 8) and fewer, raster on or off with the
    most stages; empty on anything but sm_90. Level 1 (all run on the H200 in W1 of
    session 6): the staged epilogue, split-K 2 / 4 for the narrow tiles. Level 2 adds
    session 5's direct-epilogue kernels. Not in the space (measured slower, W1):
    two-block clusters (x0.6 at 4096^3, persistent or not) and the non-persistent grid
    (-1.5%); both stay buildable by asking for them."""
    if getattr(target, "arch", None) not in ("sm_90", "sm_90a"):
        return []
    head = [dict(AUTO)] if model_opted_in() else []
    if level == 0:
        return head or [DEFAULT]
    out = head + [DEFAULT]

    def add(p: dict) -> None:
        p = dict(DEFAULT, **p)
        if p not in out and ws_legal(p, target):
            out.append(p)

    # (2, 1, 64): few rows (M <= 128) get N / 64 tiles, enough blocks to stream B at full rate
    shapes = [(2, 1, 256), (2, 1, 128), (2, 2, 128), (2, 1, 64), (1, 2, 256), (1, 2, 128), (2, 1, 192),
              (1, 1, 256), (1, 2, 64)]
    smem = target_int(target, "smem_per_block_optin", 227 * 1024)
    for c, mt, bn in shapes[:4]:  # staged epilogue: the shared chunks come off the ring
        staging = ws_config(dict(DEFAULT, consumers=c, m_tiles=mt, block_n=bn, stages=0))["smem"]
        top = min((smem - 1024 - staging) // ((64 * c * mt + bn) * BK * 2), 8)
        for stages in (top - 1, top):
            for raster in ((0, 8) if stages == top else (0,)):
                add({"consumers": c, "m_tiles": mt, "block_n": bn, "stages": stages, "raster": raster})
            if c == 2 and mt == 1 and bn <= 128 and stages == top:
                # few rows: K slices over the multiprocessors the N tiles leave idle (+ a reduce launch)
                for split in (2, 4):
                    add({"consumers": c, "m_tiles": mt, "block_n": bn, "stages": stages, "split": split})
    if level >= 2:  # session 5's kernels: the accumulators straight from the wgmma fragments
        for c, mt, bn in shapes:
            top = min((smem - 1024) // ((64 * c * mt + bn) * BK * 2), 8)
            for stages in sorted({top, top - 1, top - 2, 4, 3} & set(range(3, top + 1))):
                for raster in ((0, 8) if stages == top else (0,)):
                    add({"consumers": c, "m_tiles": mt, "block_n": bn, "stages": stages, "raster": raster,
                         "epilogue": 0})
    return out


def ws_splits(k: int, split: int) -> int:
    """K slices actually made of `split` asked (every slice gets at least one k-tile)."""
    k_tiles = max(1, ceil_div(k, BK))
    return ceil_div(k_tiles, ceil_div(k_tiles, split))


# The model's view (cuda_defaults): the rate reached at a saturating tile, and what the
# staged epilogue costs an output element against the direct stores' EPILOGUE_CLK.
# Fitted to the H200 kernel times of W1 (docs/perf_notes.md, session 6): the direct
# epilogue cost ~12 us more a 128 x 256 tile than the staged one (~0.7 clk an element,
# the model's EPILOGUE_CLK), so the staged one is priced near free; the producer runs
# ahead across tiles and kernels of 24..64 tiles measured ~2.7 us under the model's
# fixed costs, so no per-round fill.
WS_RATE = 0.85
STAGED_EPILOGUE_CLK = 0.1
DIRECT_EPILOGUE_CLK = 0.8  # this kernel's fragment-order stores (128 x 256 tiles), measured
WS_FILL_S = 0.0
REGS_BESIDE_ACC = 40


def ws_kernel(params: Mapping[str, Any], k: int) -> Kernel:
    """A candidate as the cost model sees it (K decides how many slices `split` makes)."""
    p = dict(DEFAULT, **params)
    cfg = ws_config(p)
    staged = p["epilogue"] and p["split"] == 1
    return Kernel(cfg["bm"], cfg["bn"], BK, cfg["threads"], cfg["smem"], cfg["acc"] + REGS_BESIDE_ACC, p["stages"],
                  split=ws_splits(k, p["split"]), rate=WS_RATE * tile_efficiency(64, cfg["bn"], 8),
                  epilogue_clk=STAGED_EPILOGUE_CLK if staged else DIRECT_EPILOGUE_CLK, fill_s=WS_FILL_S)


def ws_auto(m: int, n: int, k: int, batch: int, elem: int, target: Any) -> tuple[dict, float]:
    """The level-0 candidate's parameters for this shape and their modelled seconds
    (clusters left out: measured slower)."""
    # split-K left out too: every WS split candidate measured slower than the unsplit BN 64
    # tile at 128x4096x4096 (W1), which the model does not see (it prices partials as cheap)
    space = [p for p in ws_space(target, 2) if not is_auto(p) and p["cluster"] == 1 and p["split"] == 1]
    return choose(space, lambda p: ws_kernel(p, k), Gemm(m, n, k, batch, elem), target)
