"""conv2d with ONNX Conv's semantics at odd and prime sizes: strides, 4-sided pads,
auto_pad strings, dilations, groups (depthwise, depthwise multiplier), against a
float64 numpy reference written independently of the operator (an explicit padded
array and a sum over the window per output element), on the direct definition and
through the conv2d → im2col + matmul rewrite with the real matmul plugin."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework.ops as ops
from hidet_framework.graph import ShapeError, symbol
from hidet_plugin_ops.common import OperatorAttributeError


def onnx_conv_reference(a, w, b, strides, pads, dilations, group):
    """ONNX Conv (2-D) in float64, loop over output positions."""
    a, w = a.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = a.shape
    o, cig, kh, kw = w.shape
    top, left, bottom, right = pads
    padded = np.zeros((n, c, h + top + bottom, wd + left + right))
    padded[:, :, top:top + h, left:left + wd] = a
    (sh, sw), (dh, dw) = strides, dilations
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    cog = o // group
    out = np.zeros((n, o, oh, ow))
    for oc in range(o):
        g = oc // cog
        kernel = w[oc]                                                    # [cig, kh, kw]
        for i in range(oh):
            for j in range(ow):
                window = padded[:, g * cig:(g + 1) * cig,
                                i * sh: i * sh + dh * (kh - 1) + 1: dh,
                                j * sw: j * sw + dw * (kw - 1) + 1: dw]   # [n, cig, kh, kw]
                out[:, oc, i, j] = np.tensordot(window, kernel, axes=3)
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


def same_pads(size, kernel, strides, dilations, upper):
    """ONNX auto_pad SAME_UPPER / SAME_LOWER, spelled out per the ONNX operator text."""
    begin, end = [], []
    for d in range(2):
        out = -(-size[d] // strides[d])
        total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - size[d])
        lo, hi = total // 2, total - total // 2
        begin.append(lo if upper else hi)
        end.append(hi if upper else lo)
    return (begin[0], begin[1], end[0], end[1])


CASES = [  # x shape, w shape, strides, pads (t, l, b, r), dilations, group, bias
    ((1, 3, 13, 11), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    ((2, 5, 17, 13), (7, 5, 5, 3), (2, 3), (2, 0, 3, 1), (1, 1), 1, False),
    ((1, 6, 11, 19), (9, 2, 3, 3), (3, 2), (0, 2, 1, 0), (2, 3), 3, True),      # grouped, dilated
    ((1, 7, 13, 13), (7, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 7, True),      # depthwise
    ((1, 7, 23, 17), (7, 1, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 7, False),     # depthwise stride 2
    ((1, 3, 7, 11), (6, 1, 3, 2), (1, 2), (1, 0, 0, 1), (1, 1), 3, True),       # depthwise multiplier 2
    ((2, 11, 7, 5), (13, 11, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),     # pointwise
    ((1, 2, 5, 7), (3, 2, 2, 2), (1, 1), (4, 3, 5, 2), (1, 1), 1, True),        # pads wider than the kernel
    ((1, 3, 9, 9), (2, 3, 3, 3), (3, 3), (0, 0, 0, 0), (4, 4), 1, False),       # window = the whole input
]


def _run_case(case, runner, rand, padding=None):
    xs, ws, strides, pads, dilations, group, has_bias = case
    x, w = symbol(xs), symbol(ws)
    a, wa = rand(xs, "float32", -1, 1), rand(ws, "float32", -1, 1)
    feed = {x: a, w: wa}
    b = ba = None
    if has_bias:
        b = symbol((ws[0],))
        ba = rand(b.shape, "float32")
        feed[b] = ba
    y = ops.conv2d(x, w, b, stride=strides, padding=pads if padding is None else padding, dilation=dilations,
                   groups=group)
    out, = runner.run(y, feed)
    return y, out, onnx_conv_reference(a, wa, ba, strides, pads, dilations, group)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_conv2d_onnx_semantics(case, runner, rand):
    y, out, expected = _run_case(case, runner, rand)
    assert y.shape == expected.shape
    assert not np.isnan(out).any()
    runner.assert_close(out, expected, "float32", tol=1e-5)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "same_lower", "VALID"])
@pytest.mark.parametrize("geometry", [((1, 2, 13, 10), (3, 2, 4, 3), (2, 3), (1, 2)),
                                      ((1, 3, 7, 5), (2, 3, 2, 2), (1, 1), (1, 1)),
                                      ((1, 1, 11, 11), (1, 1, 3, 3), (3, 2), (2, 1))], ids=str)
def test_conv2d_auto_pad(mode, geometry, runner, rand):
    xs, ws, strides, dilations = geometry
    if mode == "VALID":
        pads = (0, 0, 0, 0)
    else:
        pads = same_pads(xs[2:], ws[2:], strides, dilations, upper=mode.lower() == "same_upper")
    y, out, expected = _run_case((xs, ws, strides, pads, dilations, 1, True), runner, rand, padding=mode)
    assert y.producer.attributes["padding"] == pads
    if mode != "VALID":
        assert y.shape[2:] == tuple(-(-xs[2 + d] // strides[d]) for d in range(2))
    runner.assert_close(out, expected, "float32", tol=1e-5)


def test_auto_pad_splits_the_odd_pixel():
    x, w = symbol((1, 1, 6, 6)), symbol((1, 1, 2, 2))
    assert ops.conv2d(x, w, padding="same_upper").producer.attributes["padding"] == (0, 0, 1, 1)
    assert ops.conv2d(x, w, padding="same_lower").producer.attributes["padding"] == (1, 1, 0, 0)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[4], CASES[7]], ids=str)
def test_conv2d_through_the_matmul_rewrite(case, ops_host, runner, rand):
    """The compiled graph with the real matmul plugin registered: the rewrite rule
    turns conv2d into im2col + matmul; same float64 answer."""
    import hidet_plugin_matmul

    if not hasattr(hidet_plugin_matmul, "register_operators") or runner.compiled_path_problem("cpu"):
        pytest.skip("needs hidet_plugin_matmul and the compiled CPU path")
    with ops_host.temporary_plugin(hidet_plugin_matmul, "matmul"):
        _, out, expected = _run_case(case, runner, rand)
    runner.assert_close(out, expected, "float32", tol=1e-4)


def test_conv2d_refusals():
    x = symbol((1, 6, 7, 7))
    with pytest.raises(OperatorAttributeError, match="'same' is not one of valid, same_upper, same_lower"):
        ops.conv2d(x, symbol((3, 6, 3, 3)), padding="same")
    with pytest.raises(OperatorAttributeError, match="stride .* must be positive"):
        ops.conv2d(x, symbol((3, 6, 3, 3)), stride=(1, 0))
    with pytest.raises(OperatorAttributeError, match="must be positive"):
        ops.conv2d(x, symbol((3, 6, 3, 3)), padding="same_upper", dilation=0)
    with pytest.raises(OperatorAttributeError, match="padding must be an int"):
        ops.conv2d(x, symbol((3, 6, 3, 3)), padding=(1, 1, 1))
    with pytest.raises(OperatorAttributeError, match="groups must be a positive int"):
        ops.conv2d(x, symbol((3, 6, 3, 3)), groups=0)
    with pytest.raises(OperatorAttributeError, match="groups=4 must divide"):
        ops.conv2d(x, symbol((4, 6, 3, 3)), groups=4)
    with pytest.raises(ShapeError, match="expects an NCHW input and an OIHW weight"):
        ops.conv2d(symbol((6, 7, 7)), symbol((3, 6, 3, 3)))
    with pytest.raises(ShapeError, match="window .* is larger than the padded input"):
        ops.conv2d(x, symbol((3, 6, 5, 5)), dilation=2)
    with pytest.raises(ShapeError, match="expects 2 input channels"):
        ops.conv2d(x, symbol((4, 1, 3, 3)), groups=2)


def test_im2col_channels_first_layout(runner, rand):
    """[N, C*KH*KW, OH*OW]: the transpose per image of the rows-first windows."""
    x = symbol((2, 3, 7, 5))
    a = rand(x.shape)
    first = ops.im2col(x, (2, 3), stride=(2, 1), padding=(1, 0, 0, 1), dilation=1, channels_first=True)
    rows = ops.im2col(x, (2, 3), stride=(2, 1), padding=(1, 0, 0, 1), dilation=1)
    got_first, got_rows = runner.run([first, rows], {x: a})
    oh_ow = got_first.shape[2]
    expected = got_rows.reshape(2, oh_ow, -1).transpose(0, 2, 1)
    runner.assert_close(got_first, expected, "float32", tol=0)
    assert first.producer.task.is_injective()
    with pytest.raises(OperatorAttributeError, match="channels_first needs groups=1"):
        ops.im2col(symbol((1, 4, 5, 5)), 3, groups=2, channels_first=True)


@pytest.mark.parametrize("case", [c for c in CASES if c[1][1] == 1 and c[5] > 1]
                         + [((2, 5, 3, 4), (5, 1, 3, 5), (1, 1), (1, 2, 1, 2), (1, 1), 5, True),   # kernel wider than the image
                            ((1, 3, 17, 19), (3, 1, 3, 3), (2, 3), (0, 0, 0, 0), (2, 2), 3, False)], ids=str)
def test_depthwise_has_its_own_cpu_schedule(case, rand):
    """Depthwise conv2d: the matmul rewrite declines it and the CPU template runs it
    (left border, interior, right border columns), fused with a relu, against float64."""
    import hidet_framework as hf
    from hidet_plugin_ops.rewrites import conv2d_to_matmul

    xs, ws, strides, pads, dilations, group, has_bias = case
    x = symbol(xs)
    wa = rand(ws, "float32", -1, 1)
    ba = rand((ws[0],), "float32") if has_bias else None
    y = ops.conv2d(x, hf.constant(wa), hf.constant(ba) if has_bias else None, stride=strides, padding=pads,
                   dilation=dilations, groups=group)
    assert conv2d_to_matmul(y.producer) is None
    fn = hf.compile(hf.trace(ops.relu(y), inputs=[x]), target="cpu", space=0)
    (row,) = fn.fusion_report()
    assert row.scheduled_by == "ops.conv2d_depthwise_cpu" and row.status == "fused"
    a = rand(xs, "float32", -1, 1)
    want = np.maximum(onnx_conv_reference(a, wa, ba, strides, pads, dilations, group), 0)
    np.testing.assert_allclose(fn(a), want, rtol=1e-5, atol=1e-5)
