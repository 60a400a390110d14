"""The CPU packed matmul template: correctness of its candidates on odd shapes, and a
space that depends on the target only.

Each candidate runs through the harness the driver will use: ``template.build`` →
``lower(module, "cpu")`` → ``backend.compile`` → the launches on numpy buffers, with
the output poisoned (NaN) first and fresh random inputs, against float64 numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

from hidet_framework.backend.contract import Target
from hidet_framework.runtime.compiled_task import compile_scheduled
from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
from hidet_plugin_matmul.operators import matmul_task

TEMPLATE = CpuPackedMatmul()



@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs every run


@pytest.fixture(scope="module")
def target(cpu_backend):
    return cpu_backend.detect_target()


def _check(cpu_backend, target, a_shape, b_shape, params, rng):
    task, attributes = matmul_task(a_shape, b_shape, "float32")
    compiled = compile_scheduled(task, TEMPLATE.build(task, attributes, params, target), cpu_backend, target)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    c = np.full(ref.shape, np.nan, np.float32)
    compiled.run([a, b], [c])
    assert not np.isnan(c).any(), "some output element was never written"
    err = np.max(np.abs(c - ref)) / max(np.max(np.abs(ref)), 1e-30)
    assert err < 1e-5, f"{a_shape} x {b_shape} with {params}: relative error {err:.3g}"


SHAPES = [
    ((1, 1), (1, 1)),
    ((7, 5), (5, 13)),
    ((97, 103), (103, 101)),
    ((128, 256), (256, 64)),
    ((3, 17, 19), (3, 19, 23)),      # batch 3
    ((3, 17, 19), (19, 23)),         # B broadcast over the batch
    ((1, 17, 19), (3, 19, 23)),      # A broadcast over the batch
]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES)
def test_default_candidate_matches_numpy(cpu_backend, target, rng, a_shape, b_shape):
    _check(cpu_backend, target, a_shape, b_shape, TEMPLATE.space(target, 0)[0], rng)


def test_k_blocked_and_multi_block_edges(cpu_backend, target, rng):
    """Small blocks so one shape crosses several K blocks (partial sums in the
    workspace), several column blocks and row blocks, all with ragged edges."""
    params = dict(TEMPLATE.space(target, 0)[0], kc=32, mc=2 * TEMPLATE.space(target, 0)[0]["mr"])
    params["nsub"] = params["nr"]
    _check(cpu_backend, target, (61, 131), (131, 5 * params["nr"] + 5), params, rng)
    _check(cpu_backend, target, (2, 61, 131), (2, 131, 3 * params["nr"] - 1), dict(params, split="m"), rng)


def _block_candidates(target):
    return [p for p in TEMPLATE.space(target, 1) if p.get("bpack") == "block"]


def test_level1_has_block_candidates(target):
    assert len(_block_candidates(target)) >= 4


@pytest.mark.parametrize("index,a_shape,b_shape", [(i, *s) for i, s in enumerate(SHAPES)])
def test_block_candidates_match_numpy(cpu_backend, target, rng, index, a_shape, b_shape):
    """The ``bpack="block"`` candidates of level 1 on the odd shapes (1, primes, batch,
    broadcast batch): two per shape, in turn, so each candidate meets several shapes."""
    cands = _block_candidates(target)
    for params in (cands[(2 * index) % len(cands)], cands[(2 * index + 1) % len(cands)]):
        _check(cpu_backend, target, a_shape, b_shape, params, rng)


def test_block_variant_k_blocked_and_multi_item_edges(cpu_backend, target, rng):
    """Small blocks: several K blocks (partial sums), row blocks, and (batch, sub-block)
    items that do not divide evenly over the workers, with ragged edges."""
    for params in _block_candidates(target)[1:3]:
        small = dict(params, kc=32, mc=2 * params["mr"], nsub=params["nr"])
        _check(cpu_backend, target, (61, 131), (131, 5 * params["nr"] + 5), small, rng)
        _check(cpu_backend, target, (3, 29, 67), (3, 67, 2 * params["nr"] - 1), small, rng)
        _check(cpu_backend, target, (3, 29, 67), (67, 2 * params["nr"] + 3), dict(small, workers=3), rng)


def test_block_variant_touches_operands_only_through_elements(target):
    task, attributes = matmul_task((2, 19, 23), (23, 29), "float32")
    for params in _block_candidates(target)[:2]:
        text = str(TEMPLATE.build(task, attributes, params, target).module)
        for name in ("a", "b", "c"):
            assert f"&{name}[" not in text
        assert "c[" in text and "a[" in text and "b[" in text


@pytest.mark.parametrize("index", [1, 5, 12, 21])
def test_level1_candidates_match_numpy(cpu_backend, target, rng, index):
    space = TEMPLATE.space(target, 1)
    params = space[index % len(space)]
    _check(cpu_backend, target, (97, 103), (103, 101), params, rng)
    _check(cpu_backend, target, (2, 33, 70), (2, 70, 45), params, rng)


def test_level2_candidates_on_one_small_shape(cpu_backend, target, rng):
    space = TEMPLATE.space(target, 2)
    for params in space[:: max(1, len(space) // 6)]:
        _check(cpu_backend, target, (29, 37), (37, 41), params, rng)


def test_narrower_vectors_run_on_this_machine(cpu_backend, target, rng):
    """A 256-bit target's default (float32x8 vectors, 16 registers) runs here too."""
    if target.get("vector_bits", 0) < 256:
        pytest.skip("this CPU has no 256-bit vectors")
    narrow = Target(target.kind, target.arch, dict(target.properties, vector_bits=256))
    params = TEMPLATE.space(narrow, 0)[0]
    assert params["nr"] % 8 == 0
    _check(cpu_backend, target, (23, 45), (45, 31), params, rng)


def _avx2_target(target, monkeypatch):
    """This machine's target narrowed to AVX2 (256-bit vectors, 16 registers), gcc told
    -mno-avx512f: the AVX2 code path as an AVX2 machine builds it."""
    from hidet_plugin_cpu import build

    if target.get("vector_bits", 0) < 256:
        pytest.skip("this CPU has no 256-bit vectors")
    monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    return Target(target.kind, target.arch, dict(target.properties, vector_bits=256))


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_goto_order_partial_sums_over_k_blocks(cpu_backend, target, rng, isa, monkeypatch):
    """The ``b_in_l1`` (GotoBLAS) order, the AVX2 default: partial sums kept between K
    blocks in the order the calls visit the tiles. Small blocks give several K blocks
    (ragged last one), row blocks, column sub-blocks and workers, in both B packings;
    then the AVX2 default itself on prime sizes with three K blocks (521 = 2 x 256 + 9)."""
    t = _avx2_target(target, monkeypatch) if isa == "avx2" else target
    default = TEMPLATE.space(t, 0)[0]
    if isa == "avx2":
        # a 256-deep B micro-panel in half of L1: 6 x 16 with a 32 KB L1 (Zen 3/4, Haswell class);
        # with 48 KB (Ice Lake and later Xeons) 4 x 24 fits as well and loads less (cpu_space.py)
        tile = (4, 24) if t.get("l1d_bytes", 32768) >= 48 * 1024 else (6, 16)
        assert (default["mr"], default["nr"], default["order"], default["kc"]) == (*tile, "b_in_l1", 256)
    mr, nr = default["mr"], default["nr"]
    small = dict(default, order="b_in_l1", kc=32, mc=3 * mr, nsub=2 * nr)
    _check(cpu_backend, t, (61, 131), (131, 5 * nr + 5), small, rng)
    _check(cpu_backend, t, (2, 29, 67), (2, 67, 2 * nr - 1), dict(small, split="m"), rng)
    _check(cpu_backend, t, (3, 29, 67), (67, 3 * nr + 3), dict(small, bpack="block"), rng)
    if isa == "avx2":
        _check(cpu_backend, t, (257, 521), (521, 263), default, rng)


# ----------------------------------------------------------------------- the space

def _target(**props):
    base = {"cores": 2, "vector_bits": 512, "l1d_bytes": 32 * 1024, "l2_bytes": 1 << 20, "l3_bytes": 32 << 20}
    return Target("cpu", "x86-64", {**base, **props})


def test_space_sizes_and_default_first():
    t = _target()
    for level, limit in ((0, 1), (1, 30), (2, 200)):
        space = TEMPLATE.space(t, level)
        assert 1 <= len(space) <= limit
        assert space[0] == TEMPLATE.space(t, 0)[0]
        assert len({tuple(sorted(p.items())) for p in space}) == len(space), "duplicates"
    assert len(TEMPLATE.space(t, 2)) > len(TEMPLATE.space(t, 1)) > 1


def test_space_depends_on_the_target_not_the_shape():
    """`space` never sees the task; building for two shapes uses the same candidates,
    while a different vector width or cache size gives a different space."""
    t = _target()
    assert TEMPLATE.space(t, 2) == TEMPLATE.space(_target(), 2)
    narrow, small_l1, small_l2 = _target(vector_bits=256), _target(l1d_bytes=16 * 1024), _target(l2_bytes=256 << 10)
    for other in (narrow, small_l1, small_l2):
        assert TEMPLATE.space(other, 2) != TEMPLATE.space(t, 2)
    assert all(p["nr"] % 8 == 0 and p["mr"] * p["nr"] // 8 + p["nr"] // 8 + 1 <= 16
               for p in TEMPLATE.space(narrow, 2)), "256-bit tiles must fit 16 registers"
    assert all(p["nr"] % 16 == 0 for p in TEMPLATE.space(t, 2))
    # Workers follow the core count.
    assert TEMPLATE.space(_target(cores=8), 0)[0]["workers"] == 8


def test_built_kernels_touch_operands_only_through_elements(target):
    """Fusion needs the inputs read and the output written only as tensor elements: no
    address of a, b or c is ever taken (vector loads/stores go to the packed buffers)."""
    task, attributes = matmul_task((19, 23), (23, 29), "float32")
    st = TEMPLATE.build(task, attributes, TEMPLATE.space(target, 0)[0], target)
    text = str(st.module)
    for name in ("a", "b", "c"):
        assert f"&{name}[" not in text
    assert "c[" in text and "a[" in text and "b[" in text
