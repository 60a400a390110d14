"""The schedule space of the CPU matmul template, derived from the target only.

A candidate is a dict of ints/strings (JSON-serialisable, so the tuning cache keeps it):

- ``mr``, ``nr``: the register tile of the micro-kernel. ``nr`` is ``nv`` SIMD vectors
  of B along N, ``mr`` rows of A broadcast one at a time; ``mr * nv`` accumulators plus
  ``nv`` B vectors plus one broadcast must fit the vector register file (32 registers
  with AVX-512, 16 below), and there must be enough independent accumulators to hide
  the FMA latency.
- ``kc``: the depth of one K block. Sized so the micro-panel that stays put while the
  other streams fits half of L1.
- ``nsub``: the columns of B one work item streams over (a sub-block of ``kc x nsub``
  floats), sized for half of L2; ``mc``: the rows of A one work item packs (``mc x kc``),
  sized for a quarter of L2.
- ``split``: ``"n"`` spreads the cores over N first (each thread packs and streams its
  own B columns), ``"m"`` over M first (each thread packs all of B's sub-blocks it
  needs but owns whole rows of C); the template falls back to the other dimension
  when the preferred one is too narrow for the cores.
- ``order``: ``"a_in_l1"`` keeps an A micro-panel (mr x kc) in L1 while B micro-panels
  stream through it; ``"b_in_l1"`` keeps a B micro-panel (kc x nr) while A streams.
- ``lanes``: float32 lanes of one SIMD vector (the candidate carries its width, so a
  candidate of a narrower target still builds here).
- ``ku``: unroll factor hint of the K loop.
- ``bpack`` (absent: ``"full"``): ``"full"`` packs a B column sub-block over all of K
  once and re-uses it for every row block (best when M is large); ``"block"`` packs
  B only ``kc x nsub`` at a time into a block that stays in L2, in GotoBLAS order
  (K block outside the row blocks, partial sums in a workspace), and spreads
  (batch entry, N sub-block) items over the cores: B is read from memory once and
  never written back, which is what a short M or a batch of small matrices needs.

Nothing here looks at M, N or K: the template clamps the blocks to the shape at build
time and zero-pads the edges, so every candidate is legal for every shape.
"""
from __future__ import annotations

import itertools
from typing import Any

__all__ = ["cpu_matmul_space", "micro_tiles", "default_params"]

FLOAT_BYTES = 4


def _round_down(x: float, step: int, lo: int) -> int:
    return max(lo, int(x) // step * step)


def target_facts(target: Any) -> dict:
    vector_bits = int(target.get("vector_bits", 256))
    return {
        "lanes": max(1, vector_bits // 32),
        "registers": 32 if vector_bits >= 512 else 16,
        "cores": max(1, int(target.get("cores", 1))),
        "l1": int(target.get("l1d_bytes", 32 * 1024)),
        "l2": int(target.get("l2_bytes", 512 * 1024)),
    }


def micro_tiles(facts: dict) -> list[tuple[int, int]]:
    """(mr, nv) register tiles that fit the register file with at least 8 accumulators
    (FMA latency x pipes), best guesses first."""
    regs = facts["registers"]
    out = []
    for nv in (2, 3, 4, 1):
        for mr in (14, 12, 10, 8, 6, 9, 4, 28, 24, 16):
            acc = mr * nv
            if acc + nv + 1 <= regs and acc >= 8 and (mr, nv) not in out:
                out.append((mr, nv))
    # Sort by how many accumulators they use (more hides more latency), stable.
    return sorted(out, key=lambda t: -t[0] * t[1])


def _blocks(facts: dict, mr: int, nr: int, order: str, kc_scale: float, l2_scale: float) -> dict:
    l1, l2 = facts["l1"], facts["l2"]
    resident = mr if order == "a_in_l1" else nr  # the micro-panel kept in L1
    kc = _round_down(l1 * 0.5 * kc_scale / (resident * FLOAT_BYTES), 16, 32)
    kc = min(kc, 1024)
    nsub = _round_down(l2 * 0.5 * l2_scale / (kc * FLOAT_BYTES), nr, nr)
    mc = _round_down(l2 * 0.25 * l2_scale / (kc * FLOAT_BYTES), mr, mr)
    return {"kc": kc, "nsub": min(nsub, 64 * nr), "mc": min(mc, 64 * mr)}


def candidate(facts: dict, mr: int, nv: int, order: str, kc_scale: float = 1.0,
              l2_scale: float = 1.0, split: str = "n", ku: int = 4, bpack: str = "full") -> dict:
    nr = nv * facts["lanes"]
    out = {"mr": mr, "nr": nr, "lanes": facts["lanes"], "order": order, **_blocks(facts, mr, nr, order, kc_scale, l2_scale),
           "split": split, "workers": facts["cores"], "ku": ku}
    if bpack != "full":
        out["bpack"] = bpack   # absent means "full", so older cached candidates stay valid
    return out


def _block_candidates(facts: dict, tiles: list[tuple[int, int]], level: int) -> list[dict]:
    """``bpack="block"`` candidates. Besides the default tile, tiles whose mr is a power
    of two (8 x 3, 16 x 1, 8 x 2, 4 x 4 vectors with 512-bit registers): short and
    batched row counts are usually powers of two, and a tile that divides them computes
    no padding rows (12 rows compute 24 for a 16-row M). Chosen from the register file
    only, like every tile."""
    default = _default_tile(facts)
    pow2 = [t for t in tiles if t[0] & (t[0] - 1) == 0 and t[0] >= 4]
    if level == 1:
        picks = [(default, "a_in_l1"), (default, "b_in_l1")]
        if pow2:
            tallest = max(pow2, key=lambda t: t[0])       # first of the tallest (16 x 1)
            shortest = min(pow2, key=lambda t: t[0])      # first of the shortest (4 x 4)
            picks += [(t, "a_in_l1") for t in pow2[:2]] + [(pow2[0], "b_in_l1"),
                                                          (tallest, "a_in_l1"), (shortest, "b_in_l1")]
    else:
        picks = list(itertools.product([default] + [t for t in pow2 if t != default] + tiles[:4], ("a_in_l1", "b_in_l1")))
    out = []
    for (mr, nv), order in picks:
        c = candidate(facts, mr, nv, order, bpack="block")
        if c not in out:
            out.append(c)
    return out


def default_params(target: Any) -> dict:
    facts = target_facts(target)
    mr, nv = _default_tile(facts)
    return candidate(facts, mr, nv, default_order(facts, (mr, nv)))


def loads_per_fma(tile: tuple[int, int]) -> float:
    """A k step of an mr x nv tile loads mr broadcasts and nv vectors for mr*nv FMAs."""
    mr, nv = tile
    return (mr + nv) / (mr * nv)


# The shallowest K block worth keeping a micro-panel in L1 for: each K block costs a
# micro-kernel call the load (or zeroing) and the store of its mr x nv accumulators,
# and when K is deeper, a round trip of the partial sums through the workspace; 256
# k steps keep that under 1% of the call's FMAs (2 / kc memory operations per FMA).
MIN_KC = 256


def goto_order_fits(facts: dict, tile: tuple[int, int]) -> bool:
    """Whether a B micro-panel (kc x nr) at least MIN_KC deep fits the half of L1 that
    ``_blocks`` gives the resident panel: the GotoBLAS order ``b_in_l1`` for this tile."""
    mr, nv = tile
    return _blocks(facts, mr, nv * facts["lanes"], "b_in_l1", 1.0, 1.0)["kc"] >= MIN_KC


def default_order(facts: dict, tile: tuple[int, int]) -> str:
    """``b_in_l1`` (GotoBLAS: a kc x nr B micro-panel stays in L1, the mc x kc A block
    in L2, and per vector FMA only 1/nv floats of A stream in from L2) where the B
    micro-panel can be ``MIN_KC`` deep in half of L1; else ``a_in_l1`` (the A
    micro-panel stays, B micro-panels stream from L2 at lanes/mr floats per FMA, and
    since the whole kc x nsub B block must stay in L2, nsub is small and A is packed
    again for every nsub columns). 16 registers (AVX2, 6 x 16 tile, 32 KB L1): 256 deep,
    ``b_in_l1``; 32 registers (AVX-512, 14 x 32 tile): 128 deep (192 with a 48 KB L1),
    ``a_in_l1`` with 288 (432) deep A micro-panels and a tall tile (B streams at
    16/14 floats per FMA against 8/4 for the 4 x 24 AVX2 tile)."""
    return "b_in_l1" if goto_order_fits(facts, tile) else "a_in_l1"


def _default_tile(facts: dict) -> tuple[int, int]:
    """From the register file and L1: the most accumulators the registers hold beside
    the nv B vectors and a broadcast (latency hidden on every FMA pipe), then a tile
    that can run in the GotoBLAS order (``goto_order_fits``), then the fewest loads per
    FMA. 32 registers (AVX-512): 14 x 2 vectors (no 28-accumulator tile fits the GotoBLAS
    order: a_in_l1). 16 (AVX2): 6 x 2 in the GotoBLAS order with a 32 KB L1 (4 x 3
    needs 160-deep panels there; with a 48 KB L1 both fit and 4 x 3 loads less).
    History: 6 x 2 in the a_in_l1 order was 0.7x numpy on issue 15's Zen 3, 4 x 3 in it
    0.89x there and 0.80-0.88x on this Zen 4 forced to AVX2 (session 14, docs/perf_notes.md)."""
    tiles = micro_tiles(facts)
    # one vector wide, every FMA needs a broadcast of its own: never the default
    wide = [t for t in tiles if t[1] >= 2] or tiles
    return min(wide, key=lambda t: (-t[0] * t[1], not goto_order_fits(facts, t), loads_per_fma(t)))


def cpu_matmul_space(target: Any, level: int) -> list[dict]:
    """Candidates, the default first; level 1 is a curated subset of level 2."""
    facts = target_facts(target)
    first = default_params(target)
    tiles = micro_tiles(facts)
    out = [first]

    def add(c: dict) -> None:
        if c not in out:
            out.append(c)

    if level == 0:
        return out
    if level == 1:
        top = tiles[:5]
        for (mr, nv), order in itertools.product(top, ("a_in_l1", "b_in_l1")):
            add(candidate(facts, mr, nv, order))
        for mr, nv in top[:3]:
            for kc_scale, l2_scale in ((0.5, 1.0), (2.0, 1.0), (1.0, 0.5)):
                add(candidate(facts, mr, nv, "a_in_l1", kc_scale, l2_scale))
        for mr, nv in top[:2]:
            add(candidate(facts, mr, nv, "a_in_l1", split="m"))
            add(candidate(facts, mr, nv, "a_in_l1", ku=1))
        for c in _block_candidates(facts, tiles, 1):
            add(c)
        return out[:30]
    for c in _block_candidates(facts, tiles, 2):
        add(c)
    for (mr, nv), order, kc_scale, l2_scale, split in itertools.product(
            tiles, ("a_in_l1", "b_in_l1"), (1.0, 0.5, 2.0), (1.0, 0.5), ("n", "m")):
        add(candidate(facts, mr, nv, order, kc_scale, l2_scale, split))
    return out[:200]
