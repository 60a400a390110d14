"""The k-loop of a tensor-core block, shared by the matmul kernel
(`cuda_tensor_core_kernel`) and the implicit-GEMM conv kernel (`cuda_conv_kernel`):
they differ only in how a k-tile of A and B reaches shared memory, which each passes
in as host callables; the order of copies, waits, barriers, fragment loads and mmas is
this module's.

    cp.async (``copy``):  k-tiles 0 .. stages-2 in flight before the loop; at k-step 0
                          of k-tile kt, k-tile kt+stages-1 is issued into its stage
    registers (``load``, ``store``): k-tile 0 loaded and stored before the loop; at k-step
                          0 of k-tile kt, k-tile kt+1 is loaded into registers, stored to
                          the other of two stages at the last k-step
    every k-step kk:      the fragments of kk+1 (of the next k-tile's stage at the last
                          step, after the barrier) load before the mmas of kk (double
                          buffered, `MmaBlock.load_frags`)

The statements are built while the kernel is traced (host helpers of the script DSL):
the kernel writes the loop over k-tiles and k-steps and calls `step` in it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from hidet_framework.ir.stmt import EvaluateStmt, IfStmt, seq


class KTilePipeline:
    """The k-loop of one block over `tiles` k-tiles from `k_begin` in `stages` shared
    stages. `frags`: (sa, sb, af, bf, lda_off, ldb_off, acc), the shared stages, the
    double-buffered fragments, their offset registers and the accumulators;
    `mma_all(acc, af, bf, fb)`: the mmas of one k-step. Staging: ``copy(stage, kbase)``
    (cp.async of the k-tile at `kbase` into `stage`), or ``load(kbase)`` (the k-tile
    into registers) with ``store(stage)`` (the registers into `stage`)."""

    def __init__(self, blk: Any, tiles: int, stages: int, k_begin: Any, frags: tuple, mma_all: Callable,
                 copy: Optional[Callable] = None, load: Optional[Callable] = None, store: Optional[Callable] = None):
        self.blk, self.tiles, self.stages, self.k_begin = blk, tiles, stages, k_begin
        self.frags, self.mma_all = frags, mma_all
        self.copy, self.load, self.store = copy, load, store
        self.bk, self.ks = blk.cfg["bk"], blk.cfg["ks"]

    def _load_frags(self, fb: int, stage: Any, kk: int):
        sa, sb, af, bf, lda_off, ldb_off, _ = self.frags
        return self.blk.load_frags(af, bf, lda_off, ldb_off, sa, sb, fb, stage, kk)

    def fill(self):
        """Before the loop: the first k-tiles staged, then the fragments of k-step 0."""
        from hidet_plugin_cuda import lang as cu

        out = []
        if self.copy is not None:
            for s in range(self.stages - 1):
                if s < self.tiles:
                    out.append(self.copy(s, self.k_begin + s * self.bk))
                out.append(cu.cp_async_commit_group())
            out.append(cu.cp_async_wait_group(self.stages - 2))
        else:
            out += [self.load(self.k_begin), self.store(0)]
        out += [EvaluateStmt(cu.syncthreads()), self._load_frags(0, 0, 0)]
        return seq(*out)

    def step(self, kt: Any, kk: int, stage: Any):
        """k-step `kk` of k-tile `kt` (IR), whose tiles are in `stage` (IR: kt % stages)."""
        from hidet_plugin_cuda import lang as cu

        tiles, stages, bk, k_begin = self.tiles, self.stages, self.bk, self.k_begin
        out = []
        if kk == 0:
            if self.copy is not None:
                out.append(IfStmt(kt + stages - 1 < tiles,
                                  seq(self.copy((kt + stages - 1) % stages, k_begin + (kt + stages - 1) * bk)), None))
                out.append(cu.cp_async_commit_group())
            else:
                out.append(IfStmt(kt + 1 < tiles, seq(self.load(k_begin + (kt + 1) * bk)), None))
        if kk == self.ks - 1:
            out.append(cu.cp_async_wait_group(stages - 2) if self.copy is not None else self.store(1 - stage))
            out.append(EvaluateStmt(cu.syncthreads()))
            out.append(self._load_frags((kk + 1) % 2, (kt + 1) % stages, 0))
        else:
            out.append(self._load_frags((kk + 1) % 2, stage, kk + 1))
        _, _, af, bf, _, _, acc = self.frags
        out.append(self.mma_all(acc, af, bf, kk % 2))
        return seq(*out)
