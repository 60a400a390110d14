"""Generated code size does not come from the shape (issue 12, item 8): the CPU matmul
template and the example plugin's template, over shapes from 1x1x1 to an LM head
(1000 x 100000 x 64) and 2039^3, on an AVX-512 and an AVX2 target, print C of the same
bounded size. Loops over shape-sized extents stay loops; unrolling has a fixed budget
(``unroll_loops``'s ``max_unroll_statements``) and register tiles come from the
hardware.

Before the fix, 1000 x 100000 x 64 printed 10,616 lines (0.7 MB) for the default
candidate and the example template 1 MB at 2039^3.
"""
from __future__ import annotations

import pytest

from hidet_framework.backend.contract import Target
from hidet_framework.lowering.pipeline import lower
from hidet_plugin_cpu.codegen import generate
from hidet_plugin_example.simple_matmul import SimpleRowMatmul
from hidet_plugin_matmul.cpu_space import cpu_matmul_space
from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
from hidet_plugin_matmul.operators import matmul_task

SHAPES = [  # a shape, b shape
    ((1, 1), (1, 1)),
    ((1, 4096), (4096, 4096)),
    ((7, 129), (129, 3001)),
    ((1000, 64), (64, 100000)),
    ((2039, 2039), (2039, 2039)),
    ((3, 17, 33), (3, 33, 50021)),
]
# Enough for the largest candidate (a 28 x 1 tile's micro-kernel and two loop
# orders); the point is that it is one number for every shape.
MAX_SOURCE_BYTES = 60_000


def _targets():
    base = {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20, "l3_bytes": 32 << 20, "fma": True}
    return {"avx512": Target("cpu", "x86-64", {**base, "vector_bits": 512}),
            "avx2": Target("cpu", "x86-64", {**base, "vector_bits": 256, "cores": 16})}


def _source(template, a_shape, b_shape, params, target):
    task, attributes = matmul_task(a_shape, b_shape, "float32")
    return generate(lower(template.build(task, attributes, params, target).module, "cpu"), target)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_cpu_matmul_source_size_is_bounded_over_shapes(isa):
    target = _targets()[isa]
    space = cpu_matmul_space(target, 1)
    candidates = [space[0]] + [c for c in space if c.get("bpack") == "block"][:1] + space[1::9]
    template = CpuPackedMatmul()
    for params in candidates:
        sizes = {shape: len(_source(template, *shape, params, target)) for shape in SHAPES}
        assert max(sizes.values()) <= MAX_SOURCE_BYTES, (params, sizes)
        # not merely under a cap: the same size (give or take a few names) everywhere
        assert max(sizes.values()) - min(sizes.values()) <= 0.25 * max(sizes.values()), (params, sizes)


@pytest.mark.parametrize("params", SimpleRowMatmul().space(None, 1))
def test_example_template_source_size_is_bounded_over_shapes(params):
    target = _targets()["avx2"]
    sizes = {shape: len(_source(SimpleRowMatmul(), *shape, params, target)) for shape in SHAPES}
    assert max(sizes.values()) <= 10_000, sizes


def test_default_tile_comes_from_the_register_file():
    """AVX-512 (32 registers): 14 x 2 vectors, the A micro-panel kept in L1; AVX2 (16):
    6 x 2 vectors (6 x 16 floats) in the GotoBLAS order, a 256-deep B micro-panel in
    half of the 32 KB L1; with a 48 KB L1 the 4 x 3 tile fits that order too and loads less."""
    from hidet_plugin_matmul.cpu_space import default_params

    tiles = {}
    targets = _targets()
    targets["avx2_l1_48k"] = Target("cpu", "x86-64", dict(targets["avx2"].properties, l1d_bytes=48 << 10))
    for isa, target in targets.items():
        p = default_params(target)
        tiles[isa] = (p["mr"], p["nr"] // p["lanes"], p["order"], p["kc"])
    assert tiles == {"avx512": (14, 2, "a_in_l1", 288), "avx2": (6, 2, "b_in_l1", 256),
                     "avx2_l1_48k": (4, 3, "b_in_l1", 256)}
