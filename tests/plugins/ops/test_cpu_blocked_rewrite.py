"""The rewrite rules that put inverted-residual blocks in the channel-blocked layout
(rules_blocked.py): a MobileNet-like block compiles to three kernels (expansion writing
the blocked form, the blocked depthwise, the projection reading it) with the same
outputs as without the rules, against a float64 numpy reference; what must stay NCHW
does (a tensor of the block that the graph returns or that a second operator reads, a
consumer that cannot read the layout, a depthwise whose input is not a convolution);
AVX2 gives 8-lane blocks (a child process with ``HIDET_FRAMEWORK_CPU_ISA=avx2``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_plugin_ops.rules_blocked import _elementwise_form, reapply_elementwise

from .test_cpu_conv import conv64
from .test_cpu_conv_depthwise import depthwise64

RULES = ("cpu_blocked_depthwise", "cpu_blocked_pointwise_input")
BLOCKED = "ops.conv2d_dw_blocked_cpu"


def _weights(rng, c, e):
    def r(*shape):
        return (0.4 * rng.standard_normal(shape)).astype(np.float32)
    return r(e, c, 1, 1), r(e), r(e, 1, 3, 3), r(e), r(c, e, 1, 1), r(c)


def _block(x, w, stride, residual=True):
    """expansion 1x1 → clip(0, 6) → depthwise 3x3 → clip(0, 6) → projection 1x1 (+ x)."""
    w1, b1, wd, bd, w2, b2 = (hf.constant(a) for a in w)
    e = hf.ops.clip(hf.ops.conv2d(x, w1, b1), 0.0, 6.0)
    d = hf.ops.clip(hf.ops.conv2d(e, wd, bd, stride=stride, padding=1, groups=w[0].shape[0]), 0.0, 6.0)
    y = hf.ops.conv2d(d, w2, b2)
    return (y + x if residual and stride == 1 else y), e, d


def _block64(a, w, stride, residual=True):
    w1, b1, wd, bd, w2, b2 = w
    e = np.clip(conv64(a, w1, b1, (1, 1), (0,) * 4, (1, 1)), 0, 6)
    d = np.clip(depthwise64(e, wd, bd, (stride,) * 2, (1,) * 4, (1, 1)), 0, 6)
    y = conv64(d, w2, b2, (1, 1), (0,) * 4, (1, 1))
    return (y + a if residual and stride == 1 else y), e, d


def _sources(fn):
    return [t.scheduled.source for t in fn.tasks]


def _close(out, ref):
    err = np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 1e-5, f"relative error {err:.3g}"


@pytest.mark.parametrize("c,e,size,stride", [(7, 23, (9, 11), 1), (5, 37, (13, 11), 2), (16, 96, (14, 14), 1),
                                             (24, 144, (15, 17), 2)])
def test_block_is_blocked_and_unchanged(rng, c, e, size, stride):
    w = _weights(rng, c, e)
    x = hf.symbol((1, c) + size, "float32")
    y, _, _ = _block(x, w, stride)
    graph = hf.trace(y, [x])
    fn = hf.compile(graph, target="cpu", space=0)
    # three kernels: the clip and the residual add fused, no conversion kernel
    assert _sources(fn) == ["ops.conv2d_cpu_direct", BLOCKED, "ops.conv2d_cpu_direct"]
    assert fn.num_launches == 3
    with rules_off(*RULES):
        plain = hf.compile(graph, target="cpu", space=0)
    assert BLOCKED not in _sources(plain)
    a = rng.standard_normal((1, c) + size).astype(np.float32)
    ref = _block64(a, w, stride)[0]
    out = fn(a)
    _close(out, ref)
    _close(plain(a), ref)
    assert np.abs(out - plain(a)).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize("returned", ["expansion", "depthwise"])
def test_a_returned_tensor_of_the_block_stays_nchw(rng, returned):
    w = _weights(rng, 5, 21)
    x = hf.symbol((1, 5, 9, 9), "float32")
    y, e, d = _block(x, w, 1)
    extra = e if returned == "expansion" else d
    fn = hf.compile(hf.trace([y, extra], [x]), target="cpu", space=0)
    assert BLOCKED not in _sources(fn)
    a = rng.standard_normal((1, 5, 9, 9)).astype(np.float32)
    ref_y, ref_e, ref_d = _block64(a, w, 1)
    out_y, out_extra = fn(a)
    assert out_extra.shape == (ref_e if returned == "expansion" else ref_d).shape
    _close(out_y, ref_y)
    _close(out_extra, ref_e if returned == "expansion" else ref_d)


def test_a_second_reader_keeps_nchw(rng):
    """The depthwise output read by the projection and by a second operator."""
    w = _weights(rng, 6, 19)
    x = hf.symbol((1, 6, 8, 10), "float32")
    y, _, d = _block(x, w, 1, residual=False)
    fn = hf.compile(hf.trace([y, hf.ops.sigmoid(d)], [x]), target="cpu", space=0)
    assert BLOCKED not in _sources(fn)
    a = rng.standard_normal((1, 6, 8, 10)).astype(np.float32)
    ref_y, _, ref_d = _block64(a, w, 1, residual=False)
    out_y, out_s = fn(a)
    _close(out_y, ref_y)
    _close(out_s, 1.0 / (1.0 + np.exp(-ref_d)))


def test_consumers_and_producers_that_cannot_take_the_layout(rng):
    c, e = 6, 20
    w1, b1, wd, bd, _, _ = _weights(rng, c, e)
    w3 = (0.3 * rng.standard_normal((7, e, 3, 3))).astype(np.float32)
    x = hf.symbol((1, c, 10, 9), "float32")
    ex = hf.ops.clip(hf.ops.conv2d(x, hf.constant(w1), hf.constant(b1)), 0.0, 6.0)
    d = hf.ops.clip(hf.ops.conv2d(ex, hf.constant(wd), hf.constant(bd), padding=1, groups=e), 0.0, 6.0)
    # a 3x3 convolution after the depthwise: no 1x1 reads the layout, nothing changes
    fn = hf.compile(hf.trace(hf.ops.conv2d(d, hf.constant(w3), padding=1), [x]), target="cpu", space=0)
    assert BLOCKED not in _sources(fn)
    a = rng.standard_normal((1, c, 10, 9)).astype(np.float32)
    ref_e = np.clip(conv64(a, w1, b1, (1, 1), (0,) * 4, (1, 1)), 0, 6)
    ref_d = np.clip(depthwise64(ref_e, wd, bd, (1, 1), (1,) * 4, (1, 1)), 0, 6)
    _close(fn(a), conv64(ref_d, w3, None, (1, 1), (1,) * 4, (1, 1)))
    # a depthwise reading a graph input: no producer writes the layout
    xe = hf.symbol((1, e, 10, 9), "float32")
    d2 = hf.ops.conv2d(xe, hf.constant(wd), hf.constant(bd), padding=1, groups=e)
    fn2 = hf.compile(hf.trace(hf.ops.conv2d(d2, hf.constant(w3[:, :, :1, :1].copy())), [xe]), target="cpu", space=0)
    assert BLOCKED not in _sources(fn2)


def test_only_index_free_elementwise_operators_move_into_the_layout():
    x = hf.symbol((1, 3, 4, 5), "float32")
    for y in (hf.ops.clip(x, 0.0, 6.0), hf.ops.relu(x), hf.ops.sigmoid(x), x * 2.0):
        assert _elementwise_form(y.producer) is not None, y.producer.name
        moved = reapply_elementwise(y.producer, hf.symbol((1, 1, 4, 5, 16), "float32"))
        assert moved.shape == (1, 1, 4, 5, 16) and moved.producer.name == y.producer.name
    other = hf.symbol((1, 3, 4, 5), "float32")
    for y in (hf.ops.transpose(hf.symbol((1, 3, 5, 4), "float32"), [0, 1, 3, 2]), x + other,
              x + hf.symbol((5,), "float32")):
        assert _elementwise_form(y.producer) is None, y.producer.name
        assert reapply_elementwise(y.producer, hf.symbol((1, 1, 4, 5, 16), "float32")) is None


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import hidet_framework as hf
    rng = np.random.default_rng(int(sys.argv[1]))
    c, e = 7, 21
    w = [(0.4 * rng.standard_normal(s)).astype(np.float32) for s in ((e, c, 1, 1), (e,), (e, 1, 3, 3), (e,))]
    x = hf.symbol((1, c, 9, 10), "float32")
    t = hf.ops.clip(hf.ops.conv2d(x, hf.constant(w[0]), hf.constant(w[1])), 0.0, 6.0)
    t = hf.ops.clip(hf.ops.conv2d(t, hf.constant(w[2]), hf.constant(w[3]), stride=2, padding=1, groups=e), 0.0, 6.0)
    w2 = (0.4 * rng.standard_normal((c, e, 1, 1))).astype(np.float32)
    y = hf.ops.conv2d(t, hf.constant(w2))
    fn = hf.compile(hf.trace(y, [x]), target="cpu", space=0)
    a = rng.standard_normal((1, c, 9, 10)).astype(np.float32)
    print("sources", ",".join(t.scheduled.source for t in fn.tasks))
    print("lanes", fn.tasks[1].task.inputs[0].shape[-1])
    np.save(sys.argv[2], fn(a))
""")


def test_avx2_blocks_are_eight_lanes(tmp_path, rng):
    """The block width comes from the machine: a forced AVX2 target gives 8 lanes; the
    values match the native build's."""
    seed = str(int(rng.integers(1 << 30)))
    outs = {}
    for isa in ("avx2", "native"):
        env = dict(os.environ, HIDET_FRAMEWORK_CPU_ISA=isa, HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"))
        env.pop("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", None)     # the child loads the installed plugins
        path = str(tmp_path / f"{isa}.npy")
        run = subprocess.run([sys.executable, "-c", _CHILD, seed, path], env=env, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"sources ops.conv2d_cpu_direct,{BLOCKED},ops.conv2d_cpu_direct" in run.stdout, run.stdout
        outs[isa] = (np.load(path), run.stdout)
    assert "lanes 8" in outs["avx2"][1], outs["avx2"][1]
    ref = outs["native"][0]
    assert np.abs(outs["avx2"][0] - ref).max() <= 1e-5 * np.abs(ref).max()


def test_a_chain_of_blocks_is_rewritten_within_the_round_bound(rng):
    """MobileNet has 17 blocks, each downstream of the last one's rewrite: the rules
    decide privacy across the round's rebuilds (GraphUses.original_readers), so every
    block is blocked without reaching the 16-round bound (its warning is an error)."""
    import warnings

    from hidet_framework.graph.passes.base import GraphPassContext
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns

    x = hf.symbol((1, 4, 6, 6), "float32")
    t = x
    blocks = 18
    for _ in range(blocks):
        t = _block(t, _weights(rng, 4, 8), 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graph = rewrite_patterns(hf.trace(t, [x]), GraphPassContext(target="cpu"))
    names = [op.name for op in graph.nodes]
    assert names.count("conv2d_depthwise_blocked") == blocks
    assert "conv2d" not in names and "from_blocked" not in names and "to_blocked" not in names
