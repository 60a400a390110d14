"""A tiled transpose written with a task mapping, compiled to C and run on the CPU.

`TILE` assigns the 8x8 elements of a tile to 16 workers (4 elements each); tiles are
spread over OpenMP threads by `parallel`. The script prints the kernel's IR before and
after lowering (docs/dsl.md shows both), compiles it with the CPU backend, and checks
the result against numpy on a prime-sized matrix.

    python examples/tiled_transpose.py
"""
from __future__ import annotations

import numpy as np

from hidet_framework.extension import plugin_host
from hidet_framework.mapping.task_mapping import auto_map
from hidet_framework.lang import attrs, f32, parallel, script, script_module
from hidet_framework.lowering.pipeline import lower

M, N = 37, 53                      # primes: the edges are predicated
TILE = auto_map(8, 8, workers=16)  # = repeat(4, 1).spatial(2, 8): 16 workers, 4 tasks each
TILES_M, TILES_N = (M + 7) // 8, (N + 7) // 8


@script
def transpose(a: f32[M, N], b: f32[N, M]):
    attrs.func_kind = "cpu_kernel"
    for t in parallel(TILES_M * TILES_N):
        for w in range(TILE.num_workers):
            for i, j in TILE.on(w):
                row = t // TILES_N * 8 + i
                col = t % TILES_N * 8 + j
                if row < M and col < N:
                    b[col, row] = a[row, col]


def main() -> None:
    module = script_module(transpose, name="tiled_transpose")
    lowered = lower(module, "cpu")
    print(f"# {TILE}\n# before lowering\n{module}\n\n# after lowering\n{lowered}\n")
    kernels = plugin_host().backend_for("cpu").compile(lowered)
    a = np.random.default_rng().standard_normal((M, N)).astype("float32")
    b = np.full((N, M), np.nan, dtype="float32")  # poisoned: every element must be written
    kernels["transpose"](a, b)
    assert np.array_equal(b, a.T), "transpose mismatch"
    print(f"compiled and ran on the CPU: b == a.T for a {M}x{N} matrix")


if __name__ == "__main__":
    main()
