"""The rewrite rules that run chains of convolutions in the channel-blocked layout
(rules_blocked_chain.py): ResNet-like bottlenecks (1x1 → relu → 3x3 → relu → 1x1 +
residual → relu, a stride-2 block with its 1x1/2 downsample) compile with every
convolution between the chain's ends reading and writing the blocked layout and no
conversion kernel, and give the float64 numpy reference's values (NaN-poisoned
``out=`` arrays, odd and prime image sizes); the chain's ends stay NCHW (a stem of 3
channels, the last block before a pool, a returned tensor, channels that are not
whole vectors); the elementwise form accepts only operators that read each input at
their own index; AVX2 gives 8-lane blocks (a child process with
``HIDET_FRAMEWORK_CPU_ISA=avx2``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.extension import rules_off
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
from hidet_plugin_ops.rules_blocked_chain import elementwise_form, reapply

from .test_cpu_conv import conv64

RULES = ("cpu_chain_write", "cpu_chain_elementwise", "cpu_chain_read")


def _weights(rng, c, m, stride):
    def r(*shape):
        return (0.3 * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
    w = [r(m, c, 1, 1), r(m), r(m, m, 3, 3), r(m), r(c if stride == 1 else 2 * c, m, 1, 1), r(c if stride == 1 else 2 * c)]
    if stride != 1:
        w += [r(2 * c, c, 1, 1), r(2 * c)]
    return w


def _block(x, w, stride):
    """A ResNet bottleneck (a downsample 1x1/2 where `stride` is 2)."""
    k = [hf.constant(a) for a in w]
    t = hf.ops.relu(hf.ops.conv2d(x, k[0], k[1]))
    t = hf.ops.relu(hf.ops.conv2d(t, k[2], k[3], stride=stride, padding=1))
    t = hf.ops.conv2d(t, k[4], k[5])
    skip = x if stride == 1 else hf.ops.conv2d(x, k[6], k[7], stride=stride)
    return hf.ops.relu(t + skip)


def _block64(a, w, stride):
    t = np.maximum(conv64(a, w[0], w[1], (1, 1), (0,) * 4, (1, 1)), 0)
    t = np.maximum(conv64(t, w[2], w[3], (stride,) * 2, (1,) * 4, (1, 1)), 0)
    t = conv64(t, w[4], w[5], (1, 1), (0,) * 4, (1, 1))
    skip = a if stride == 1 else conv64(a, w[6], w[7], (stride,) * 2, (0,) * 4, (1, 1))
    return np.maximum(t + skip, 0)


def _net(rng, c, m, size):
    """stem 3x3 (3 channels) → relu → bottleneck → stride-2 bottleneck → 2x2 max pool;
    the graph, its input, the float64 reference function and the first block's output."""
    ws = (0.3 * rng.standard_normal((c, 3, 3, 3))).astype(np.float32), (0.1 * rng.standard_normal(c)).astype(np.float32)
    w1, w2 = _weights(rng, c, m, 1), _weights(rng, c, m, 2)
    x = hf.symbol((1, 3) + size, "float32")
    s = hf.ops.relu(hf.ops.conv2d(x, hf.constant(ws[0]), hf.constant(ws[1]), padding=1))
    b1 = _block(s, w1, 1)
    y = hf.ops.max_pool2d(_block(b1, w2, 2), 2, 2)

    def ref(a):
        r1 = _block64(np.maximum(conv64(a, ws[0], ws[1], (1, 1), (1,) * 4, (1, 1)), 0), w1, 1)
        r2 = _block64(r1, w2, 2)
        oh, ow = r2.shape[2] // 2, r2.shape[3] // 2
        return r2[:, :, :2 * oh, :2 * ow].reshape(1, r2.shape[1], oh, 2, ow, 2).max(axis=(3, 5)), r1

    return x, y, b1, ref


def _rewritten(graph):
    return rewrite_patterns(graph, GraphPassContext(target="cpu"))


def _conv_ranks(graph):
    """(rank of x, rank of y) of each conv2d_packed, in graph order."""
    return [(op.inputs[0].rank, op.outputs[0].rank) for op in graph.nodes if op.name == "conv2d_packed"]


def _close(out, ref):
    err = np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 2e-5, f"relative error {err:.3g}"


@pytest.mark.parametrize("size", [(13, 11), (7, 17)])
def test_a_chain_runs_blocked_between_its_ends(rng, size):
    c, m = 32, 16
    x, y, _, ref = _net(rng, c, m, size)
    graph = hf.trace(y, [x])
    ranks = _conv_ranks(_rewritten(graph))
    # stem: NCHW in (3 channels), blocked out; block 1: blocked throughout; block 2: its
    # conv1 and 3x3 blocked, its last 1x1 and the downsample write NCHW (a pool follows)
    assert ranks == [(4, 5), (5, 5), (5, 5), (5, 5), (5, 5), (5, 5), (5, 4), (5, 4)], ranks
    names = [op.name for op in _rewritten(graph).nodes]
    assert "from_blocked" not in names and "to_blocked" not in names
    fn = hf.compile(graph, target="cpu", space=0)
    with rules_off(*RULES):
        plain = hf.compile(graph, target="cpu", space=0)
    assert fn.num_launches <= plain.num_launches
    a = rng.standard_normal((1, 3) + size).astype(np.float32)
    expect = ref(a)[0]
    out = np.full(expect.shape, np.nan, np.float32)
    fn(a, out=out)
    _close(out, expect)
    _close(plain(a), expect)


def test_a_returned_tensor_of_the_chain_is_nchw(rng):
    c, m, size = 16, 16, (11, 9)
    x, y, b1, ref = _net(rng, c, m, size)
    graph = hf.trace([y, b1], [x])
    rewritten = _rewritten(graph)
    assert [op.name for op in rewritten.nodes].count("from_blocked") == 1
    assert [tuple(t.shape) for t in rewritten.outputs][1] == (1, c) + size
    fn = hf.compile(graph, target="cpu", space=0)
    a = rng.standard_normal((1, 3) + size).astype(np.float32)
    r2, r1 = ref(a)
    outs = [np.full(r2.shape, np.nan, np.float32), np.full(r1.shape, np.nan, np.float32)]
    fn(a, out=outs)
    _close(outs[0], r2)
    _close(outs[1], r1)


def test_channels_that_are_not_whole_vectors_stay_nchw(rng):
    """20 and 12 channels are no multiple of 8 or 16 lanes: nothing is blocked."""
    x, y, _, ref = _net(rng, 20, 12, (9, 10))
    graph = hf.trace(y, [x])
    assert all(r == (4, 4) for r in _conv_ranks(_rewritten(graph)))
    fn = hf.compile(graph, target="cpu", space=0)
    a = rng.standard_normal((1, 3, 9, 10)).astype(np.float32)
    _close(fn(a), ref(a)[0])


def test_a_lone_convolution_stays_nchw(rng):
    """No convolution reads its output: it keeps writing NCHW (no conversion kernel)."""
    w = (0.3 * rng.standard_normal((32, 16, 3, 3))).astype(np.float32)
    x = hf.symbol((1, 16, 7, 9), "float32")
    graph = hf.trace(hf.ops.relu(hf.ops.conv2d(x, hf.constant(w), padding=1)), [x])
    assert _conv_ranks(_rewritten(graph)) == [(4, 4)]


def test_only_index_free_elementwise_operators_run_blocked():
    x, other = hf.symbol((1, 3, 4, 5), "float32"), hf.symbol((1, 3, 4, 5), "float32")
    blocked = [hf.symbol((1, 1, 4, 5, 16), "float32"), hf.symbol((1, 1, 4, 5, 16), "float32")]
    for y, n in ((hf.ops.relu(x), 1), (x + other, 2), (hf.ops.maximum(x, other), 2), (x * 2.0, 1)):
        assert elementwise_form(y.producer) is not None, y.producer.name
        moved = reapply(y.producer, blocked[:n])
        assert moved.shape == (1, 1, 4, 5, 16) and moved.producer.name == y.producer.name
    for y in (x + hf.symbol((5,), "float32"), x + hf.symbol((1, 3, 1, 1), "float32"),
              hf.ops.transpose(hf.symbol((1, 3, 5, 4), "float32"), [0, 1, 3, 2]),
              hf.ops.transpose(hf.symbol((1, 4, 4, 4), "float32"), [0, 1, 3, 2])):     # same shape, other index
        assert elementwise_form(y.producer) is None, y.producer.name


def test_a_long_chain_is_rewritten_within_the_round_bound(rng):
    """ResNet-50 has 16 blocks: the rules reach the fixpoint without the 16-round
    bound's warning (an error here)."""
    import warnings

    x = hf.symbol((1, 16, 5, 6), "float32")
    t = hf.ops.relu(hf.ops.conv2d(x, hf.constant(_weights(rng, 16, 16, 1)[0])))
    blocks = 18
    for _ in range(blocks):
        t = _block(t, _weights(rng, 16, 16, 1), 1)
    t = hf.ops.max_pool2d(t, 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ranks = _conv_ranks(_rewritten(hf.trace(t, [x])))
    assert ranks.count((5, 5)) == 3 * blocks - 1 and ranks[0] == (4, 5) and ranks[-1] == (5, 4)


_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import hidet_framework as hf
    from hidet_framework.graph.passes.base import GraphPassContext
    from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns
    rng = np.random.default_rng(int(sys.argv[1]))
    w = [(0.2 * rng.standard_normal(s)).astype(np.float32) for s in ((24, 8, 1, 1), (24, 24, 3, 3), (8, 24, 1, 1))]
    x = hf.symbol((1, 8, 9, 7), "float32")
    t = hf.ops.relu(hf.ops.conv2d(x, hf.constant(w[0])))
    t = hf.ops.relu(hf.ops.conv2d(t, hf.constant(w[1]), padding=1))
    y = hf.ops.relu(hf.ops.conv2d(t, hf.constant(w[2])) + x)
    graph = hf.trace(y, [x])
    g = rewrite_patterns(graph, GraphPassContext(target="cpu"))
    print("shapes", [tuple(op.outputs[0].shape) for op in g.nodes if op.name == "conv2d_packed"])
    a = rng.standard_normal((1, 8, 9, 7)).astype(np.float32)
    np.save(sys.argv[2], hf.compile(graph, target="cpu", space=0)(a))
""")


def test_avx2_chains_are_eight_lanes(tmp_path, rng):
    """The block width comes from the machine: with AVX2 the 24-channel chain is three
    8-lane blocks; with AVX-512 24 is no multiple of 16 and the chain stays NCHW. The
    values match the float64 reference either way."""
    seed = int(rng.integers(1 << 30))
    for isa in ("avx2", "native"):
        env = dict(os.environ, HIDET_FRAMEWORK_CPU_ISA=isa, HIDET_FRAMEWORK_CACHE=str(tmp_path / "cache"))
        env.pop("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", None)     # the child loads the installed plugins
        path = str(tmp_path / f"{isa}.npy")
        run = subprocess.run([sys.executable, "-c", _CHILD, str(seed), path], env=env, capture_output=True,
                             text=True, timeout=900)
        assert run.returncode == 0, run.stdout + run.stderr
        if isa == "avx2":
            assert "shapes [(1, 3, 9, 7, 8), (1, 3, 9, 7, 8), (1, 8, 9, 7)]" in run.stdout, run.stdout
        r = np.random.default_rng(seed)
        w = [(0.2 * r.standard_normal(s)).astype(np.float32) for s in ((24, 8, 1, 1), (24, 24, 3, 3), (8, 24, 1, 1))]
        a = r.standard_normal((1, 8, 9, 7)).astype(np.float32)
        t = np.maximum(conv64(a, w[0], None, (1, 1), (0,) * 4, (1, 1)), 0)
        t = np.maximum(conv64(t, w[1], None, (1, 1), (1,) * 4, (1, 1)), 0)
        _close(np.load(path), np.maximum(conv64(t, w[2], None, (1, 1), (0,) * 4, (1, 1)) + a, 0))
