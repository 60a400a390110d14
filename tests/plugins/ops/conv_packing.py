"""The packed-weight convolution pieces shared by the CPU conv test files: the weight in
output blocks of ``ob`` channels (zero-padded, ``[O/ob, C, KH, KW, ob]``) and the task of
``conv2d_packed`` on symbols of the given shapes."""
from __future__ import annotations

import numpy as np

import hidet_framework as hf
from hidet_plugin_ops import cpu_conv


def _packed(w, ob):
    o = w.shape[0]
    blocks = -(-o // ob)
    padded = np.zeros((blocks * ob,) + w.shape[1:], np.float32)
    padded[:o] = w
    return np.ascontiguousarray(padded.reshape(blocks, ob, *w.shape[1:]).transpose(0, 2, 3, 4, 1))


def _task(x_shape, w_shape, ob, bias, stride, pads, dilation):
    x = hf.symbol(x_shape, "float32")
    packed = cpu_conv.pack_conv_weight(hf.symbol(w_shape, "float32"), ob)
    b = hf.symbol((w_shape[0],), "float32") if bias else None
    y = cpu_conv.conv2d_packed(x, packed, b, w_shape[0], stride, pads, dilation)
    return y.producer.task, dict(y.producer.attributes), tuple(y.shape)
