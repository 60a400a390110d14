"""Short-M matmul with constant weights: the ``prepack_constant_b`` rewrite (B packed
once, by constant folding) and the GEMV / short-GEMM template of ``matmul_prepacked``.

Every candidate runs on fresh random inputs with a poisoned (NaN) output at odd and
prime sizes, against float64 numpy; the rule is checked to fire only where it should
(CPU, constant B, at most 32 rows) and the compiled graph to keep the packed weights
as a constant (no packing operator left to run per call).
"""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.backend.contract import Target
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_plugin_matmul import cpu_prepack
from hidet_plugin_matmul.cpu_gemv import CpuPrepackedMatmul, gemv_space
from hidet_framework.runtime.compiled_task import compile_scheduled

TEMPLATE = CpuPrepackedMatmul()



def _prepacked_task(m, k, n, nr):
    a = hf.symbol((m, k), "float32")
    b = hf.symbol((k, n), "float32")
    y = cpu_prepack.matmul_prepacked(a, cpu_prepack.pack_b(b, nr), n)
    return y.producer.task, dict(y.producer.attributes)


def _packed(b, nr):
    k, n = b.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, nr).transpose(1, 0, 2))


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (1, 37, 101), (2, 129, 67), (3, 5, 1000), (4, 300, 17),
                                 (5, 77, 31), (13, 41, 97), (32, 64, 257), (131, 769, 67), (509, 23, 1031),
                                 (7, 2053, 1153)],
                         ids=str)
def test_gemv_candidates_against_float64(cpu_backend, rng, mkn, isa, monkeypatch):
    """Every panel one item (several threads) or all in one (one worker); K in one
    block (the default up to 1024 here) or several (kc 16; 2053 in three balanced
    blocks of the default); on this machine's ISA and on AVX2 (gcc told -mno-avx512f,
    16-wide panels)."""
    m, k, n = mkn
    target = cpu_backend.detect_target()
    if isa == "avx2":
        from hidet_plugin_cpu import build

        if target.get("vector_bits", 256) < 256:
            pytest.skip("no AVX2 here")
        target = Target("cpu", target.arch, {**target.properties, "vector_bits": 256})
        monkeypatch.setattr(build, "CFLAGS", build.CFLAGS + ("-mno-avx512f",))
    nr = cpu_prepack.panel_width(target)
    task, attributes = _prepacked_task(m, k, n, nr)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    space = gemv_space(target, 1, nr)
    for params in [space[0], space[-1]] + [p for p in space if p["mr"] == 1][:1] + [dict(space[0], kc=16),
                                                                                   dict(space[0], workers=1)]:
        compiled = compile_scheduled(task, TEMPLATE.build(task, attributes, params, target), cpu_backend, target)
        c = np.full((m, n), np.nan, np.float32)
        compiled.run([a, _packed(b, nr)], [c])
        assert not np.isnan(c).any(), f"{params}: an output element was never written"
        err = np.abs(c - ref).max() / max(np.abs(ref).max(), 1e-30)
        assert err < 1e-5, f"{mkn} with {params}: relative error {err:.3g}"


def test_space_comes_from_the_machine():
    base = {"cores": 2, "l1d_bytes": 32 << 10, "l2_bytes": 1 << 20}
    avx512 = Target("cpu", "x86-64", {**base, "vector_bits": 512})
    avx2 = Target("cpu", "x86-64", {**base, "vector_bits": 256})
    assert cpu_prepack.panel_width(avx512) == 64 and cpu_prepack.panel_width(avx2) == 16
    for target in (avx512, avx2):
        nr = cpu_prepack.panel_width(target)
        nv = nr // (target.get("vector_bits") // 32)
        regs = 32 if target.get("vector_bits") == 512 else 16
        for params in gemv_space(target, 2, nr):
            assert params["mr"] * nv + nv + 1 <= regs       # the register tile fits the file
            assert params["kc"] * nr * 4 <= (1 << 20) // 4  # a K block of a panel fits a quarter of L2
        assert gemv_space(target, 0, nr)[0]["kc"] * nr * 4 > (1 << 20) // 8  # ... and fills it (no L1 block)


def _compiled_graph(m, k, n, rng, constant_b=True, batch=None):
    shape = (batch, m, k) if batch else (m, k)
    x = hf.symbol(shape, "float32")
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal((n,)).astype(np.float32)
    wt = hf.constant(w) if constant_b else hf.symbol((k, n), "float32")
    y = hf.ops.gelu(hf.ops.add(hf.ops.matmul(x, wt), hf.constant(bias)))
    inputs = [x] if constant_b else [x, wt]
    return hf.compile(hf.trace(y, inputs=inputs), target="cpu", space=0), w, bias


def _gelu64(v):
    import math
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / np.sqrt(2.0)))


@pytest.mark.parametrize("m,k,n,batch", [(1, 97, 401, None), (7, 64, 601, None), (3, 257, 131, 2)])
def test_compiled_graph_packs_once_and_fuses(m, k, n, batch, rng):
    fn, w, bias = _compiled_graph(m, k, n, rng, batch=batch)
    assert fn.pass_stats["rewrite_patterns"]["applied"] >= 1
    assert fn.pass_stats["fold_constants"]["folded"] >= 1             # matmul_pack_b evaluated at compile time
    report = fn.fusion_report() if hasattr(fn, "fusion_report") else ""
    assert cpu_prepack.PACK_OPERATOR not in str([op.name for op in fn.graph.nodes])
    shape = (batch, m, k) if batch else (m, k)
    a = rng.standard_normal(shape).astype(np.float32)
    got = np.asarray(fn(a))
    want = _gelu64(a.astype(np.float64) @ w + bias)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    del report


def test_rule_declines_where_it_does_not_apply(rng):
    k, n = 128, 256                                    # K * N = MIN_WEIGHT_ELEMENTS
    weights = rng.standard_normal((k, n)).astype(np.float32)
    rows = cpu_prepack.MAX_ROWS
    x = hf.symbol((rows, k), "float32")
    assert cpu_prepack.prepack_constant_b(hf.ops.matmul(x, hf.constant(weights)).producer) is not None
    x = hf.symbol((rows + 1, k), "float32")            # more than MAX_ROWS
    assert cpu_prepack.prepack_constant_b(hf.ops.matmul(x, hf.constant(weights)).producer) is None
    x = hf.symbol((2, k), "float32")                   # small weights: packing per call is cheap
    assert cpu_prepack.prepack_constant_b(hf.ops.matmul(x, hf.constant(weights[:, :255])).producer) is None
    y = hf.ops.matmul(x, hf.symbol((k, n), "float32"))  # B is a graph input, not a constant
    assert cpu_prepack.prepack_constant_b(y.producer) is None
    x64 = hf.symbol((2, k), "float64")                 # not float32, bfloat16 or float16
    y = hf.ops.matmul(x64, hf.constant(weights.astype(np.float64)))
    assert cpu_prepack.prepack_constant_b(y.producer) is None
    x16 = hf.symbol((2, k), "float16")                 # half weights: 2-byte panels where vcvtph2ps
    y = hf.ops.matmul(x16, hf.constant(weights.astype(np.float16)))  # exists (cpu_half_panels), else float32
    target = cpu_prepack._cpu_target()
    nr, lanes = cpu_prepack.panel_width(target), cpu_prepack.target_facts(target)["lanes"]
    kept = cpu_prepack.cpu_half_panels.half_panels_apply("float16", target, nr, lanes)
    assert cpu_prepack.prepack_constant_b(y.producer)[0].producer.inputs[1].dtype.name == \
        ("float16" if kept else "float32")
    # B transposed from a constant is still "from constants" (folding will make it one)
    wt = hf.ops.transpose(hf.constant(np.ascontiguousarray(weights.T)), [1, 0])
    assert cpu_prepack.prepack_constant_b(hf.ops.matmul(x, wt).producer) is not None


def test_rule_runs_for_the_cpu_target_only(rng):
    x = hf.symbol((1, 16), "float32")
    y = hf.ops.matmul(x, hf.constant(rng.standard_normal((16, 2048)).astype(np.float32)))
    graph = hf.trace(y, inputs=[x])
    names = {}
    for target in ("cpu", "cuda", None):
        ctx = GraphPassContext(target=target, rewrite_rules=[cpu_prepack.PREPACK_RULE])
        names[target] = [op.name for op in rewrite_patterns(graph, ctx).nodes]
    assert cpu_prepack.PREPACKED_OPERATOR in names["cpu"]
    assert names["cuda"] == names[None] == ["matmul"]


def test_graph_input_weights_stay_a_plain_matmul(rng):
    fn, _, _ = _compiled_graph(2, 160, 301, rng, constant_b=False)
    assert "rewrite_patterns" not in fn.pass_stats or fn.pass_stats["rewrite_patterns"].get("applied", 0) == 0
