"""Implicit-GEMM convolution on CUDA: the template for ``conv2d_igemm`` and the graph
rewrite rule that turns fp16 / bf16 ``conv2d`` into it on the cuda target.

Rule ``conv2d_implicit_gemm_cuda`` (phase 1, before the ops plugin's im2col + matmul
rule: plugins register in entry-point order, "matmul" before "ops"):

    conv2d(x NCHW, w, bias)  →  conv2d_igemm(x NCHW, pack(w)) [+ bias]

The template, when C/G % 8 == 0, copies x to NHWC in a workspace first (one
memory-bound launch whose element reads take prologue grafts; the cp.async gather of
16-byte channel chunks then reads the copy); with the parameter ``channels_first``
(set on the space-0 pick by default, CF_ENV below; in no tuning space) a 1x1 stride-1
unpadded conv whose planes are whole 8- or 16-byte chunks reads NCHW x as it lies
instead (no copy; through the copy again when a prologue is grafted onto x); otherwise
it gathers from NCHW directly (register-staged element reads). y is written NCHW by the kernel. The bias add stays a graph operator after the anchor: the fusion engine grafts it (and a
following relu) onto the kernel's output stores. Depthwise convolutions (one input
channel per group) are left alone: a GEMM of depth KH*KW wastes the tensor cores;
the rule-based scheduler computes them directly, one thread per output element.

Template space (`conv_space`): first ``{"auto": 1}``, which the build resolves to the
level-2 candidate with the least modelled time on the target for the shape
(`auto_params`, the cost model of `cuda_defaults`: so level 0, one candidate, is fit
for every ResNet layer); then the tensor-core matmul's tiles and
pipelines that suit convolutions, plus split-K for the few-pixel layers (7x7 and 14x14
maps at batch 1, where M / BM times N / BN blocks would leave most of the GPU idle).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, ShapeError, Tensor
from hidet_framework.ir import dtypes
from hidet_framework.schedule.scheduled_task import BufferRef, Launch, ScheduledTask, WorkspaceSpec
from hidet_framework.schedule.template import Template

from hidet_plugin_matmul.cuda_conv_gather import channels_first, conv_staging
from hidet_plugin_matmul.cuda_conv_kernel import build_conv_module
from hidet_plugin_matmul.cuda_conv_op import OPERATOR, ConvGeometry, conv2d_igemm, pack_conv_weight
from hidet_plugin_matmul.cuda_matmul_common import target_int, task_dtype
from hidet_plugin_matmul.cuda_defaults import AUTO, Gemm, Gpu, Kernel, choose, is_auto, modelled_seconds, resolve
from hidet_plugin_matmul.cuda_stage_operands import prologue_inputs
from hidet_plugin_matmul.cuda_tensor_core import DEFAULT, tc_kernel, tc_legal

# The space-0 pick of a pointwise stride-1 conv of NCHW x reads x as it lies
# (channels-first, cuda_conv_gather.channels_first) instead of copying it to NHWC first;
# "0" turns that off. Measured on the H200 (session 9, docs/perf_notes.md): ResNet-50's
# 1x1 shapes 1.03-1.89x cuDNN at batch 1 and 8 (the NHWC copy's 256->64@56 at batch 8 was
# 0.76x), the model 0.467 -> 0.436 ms, 111 -> 92 launches.
CF_ENV = "HIDET_FRAMEWORK_CONV_CF"

# (block_m, block_n, warps_m, warps_n, block_k, stages, split_k)
LEVEL1 = [
    (128, 128, 2, 4, 32, 4, 1), (128, 64, 2, 2, 32, 4, 1), (64, 128, 2, 2, 32, 4, 1), (64, 64, 2, 2, 32, 4, 1),
    (256, 128, 4, 2, 32, 3, 1), (128, 128, 2, 4, 64, 3, 1), (128, 256, 2, 4, 32, 3, 1),
    (64, 64, 2, 2, 32, 4, 4), (64, 64, 2, 2, 32, 4, 8), (64, 64, 2, 2, 64, 3, 16),
    (128, 64, 2, 2, 32, 4, 2), (64, 128, 2, 2, 32, 4, 4),
]


def _params(bm: int, bn: int, wm: int, wn: int, bk: int, stages: int, split: int) -> dict:
    return {"block_m": bm, "block_n": bn, "block_k": bk, "warps_m": wm, "warps_n": wn, "stages": stages,
            "split_k": split}


def conv_kernel(geo: ConvGeometry, params: Mapping[str, Any], elem: int) -> Kernel:
    """A candidate as the cost model sees it: the tensor-core matmul's kernel on the
    GEMM [pixels, K] x [K, output channels] per group, plus the NHWC copy of x where
    the staging needs one (the same for every candidate of a shape)."""
    path = conv_staging(geo, params)
    copy = path == "nhwc"
    x_bytes = geo.batch * geo.channels * geo.height * geo.width * elem
    return tc_kernel(params, "reg" if path == "reg" else "cp", elem, extra_launches=int(copy),
                     extra_bytes=2 * x_bytes if copy else 0)


def auto_params(geo: ConvGeometry, target: Any, elem: int = 2) -> dict:
    """The default candidate's parameters for one shape: the level-2 candidate with the
    least modelled time (`cuda_defaults`)."""
    return conv_auto(geo, target, elem)[0]


def conv_auto(geo: ConvGeometry, target: Any, elem: int = 2) -> tuple[dict, float]:
    return choose(conv_space(target, 2), lambda p: None if is_auto(p) else conv_kernel(geo, p, elem),
                  Gemm(geo.m, geo.cog, geo.k, geo.groups, elem), target)


def conv_space(target: Any, level: int) -> list[dict]:
    out = [dict(AUTO)]
    if level == 0:
        return out
    out.append(dict(DEFAULT))

    def add(p: dict) -> None:
        if p not in out and tc_legal(p, target):
            out.append(p)

    for spec in LEVEL1:
        add(_params(*spec))
    if level >= 2:
        tiles = [(128, 128, 2, 4), (128, 256, 2, 4), (256, 128, 4, 2), (128, 64, 2, 2), (64, 128, 2, 2),
                 (64, 64, 2, 2), (128, 128, 2, 2)]
        for tile in tiles:
            for bk, stages in ((32, 3), (32, 4), (32, 5), (64, 3), (64, 4)):
                add(_params(*tile, bk, stages, 1))
        for tile in tiles[3:]:
            for split in (2, 4, 8, 16):
                add(_params(*tile, 32, 4, split))
    # register-staged gathers straight from x's layout: no NHWC copy launch, slower
    # loads (pays on short reductions: 1x1 convolutions from few channels). Level 2
    # only: the tuner times a candidate with its host launches included, so it prefers
    # one-launch candidates; at level 1 it picked these for every ResNet-50 conv and
    # the model ran at 1.00 ms against 0.53 at level 0 (H200, W2 of session 5)
    if level >= 2:
        for tile in ((64, 64, 2, 2), (128, 64, 2, 2), (64, 128, 2, 2)):
            add(dict(_params(*tile, 32, 2, 1), reg_stage=1))
    return out


class CudaConvImplicitGemm(Template):
    """conv2d_igemm (fp16 / bf16) on mma.sync with the gather in the A loads."""

    name = "conv2d_igemm.cuda_tensor_core"
    operator = OPERATOR
    target = "cuda"
    version = "1"
    priority = 2

    def applies(self, task: Any, attributes: Mapping[str, Any]) -> bool:
        return task_dtype(task) in ("float16", "bfloat16")

    def space(self, target: Any, level: int) -> list[dict]:
        return conv_space(target, level)

    def estimate(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> float:
        """Modelled seconds of `params` (the default: of its pick); the tuner keeps the
        best-modelled candidates at level 2 (`tuner._model_ranked`)."""
        geo, elem = ConvGeometry.from_attributes(attributes), dtypes.data_type(task_dtype(task)).nbytes
        if is_auto(params):
            return conv_auto(geo, target, elem)[1]
        return modelled_seconds(Gemm(geo.m, geo.cog, geo.k, geo.groups, elem),
                                conv_kernel(geo, dict(DEFAULT, **params), elem), Gpu.from_target(target))

    def build(self, task: Any, attributes: Mapping[str, Any], params: Mapping[str, Any], target: Any) -> ScheduledTask:
        geo = ConvGeometry.from_attributes(attributes)
        dtype = task_dtype(task)
        if 0 in prologue_inputs(attributes) and params.get("channels_first"):  # a prologue on x: the cp.async
            params = dict(params, channels_first=0)  # reads of x as it lies would refuse it; the copy's take it
        p = dict(DEFAULT, **resolve(params, lambda: auto_params(geo, target, dtypes.data_type(dtype).nbytes)))
        if (is_auto(params) and os.environ.get(CF_ENV, "1") != "0" and conv_staging(geo, p) == "nhwc"
                and channels_first(geo) and 0 not in prologue_inputs(attributes)):
            p["channels_first"] = 1  # the default's tile reading x as it lies: no NHWC copy launch
        (oh, ow), (kh, kw) = geo.out_hw, geo.kernel
        name = (f"conv_tc_{dtype}_{geo.x_layout}_{geo.y_layout}_n{geo.batch}c{geo.channels}h{geo.height}"
                f"w{geo.width}o{geo.out_channels}k{kh}x{kw}s{geo.stride[0]}x{geo.stride[1]}"
                f"p{'x'.join(map(str, geo.pads))}d{geo.dilation[0]}x{geo.dilation[1]}g{geo.groups}"
                f"_{p['block_m']}x{p['block_n']}x{p['block_k']}_w{p['warps_m']}x{p['warps_n']}_s{p['stages']}"
                f"_sk{p['split_k']}_{conv_staging(geo, p)}")
        module = build_conv_module(geo, dtype, p, name)
        x, w, y = BufferRef("input", 0), BufferRef("input", 1), BufferRef("output", 0)
        launches: list = []
        workspace: list = []
        if conv_staging(geo, p) == "nhwc":  # x copied to NHWC first (its reads take prologues)
            xt = BufferRef("workspace", 0)
            workspace.append(WorkspaceSpec("conv_x_nhwc", dtype, (geo.batch, geo.height, geo.width, geo.channels)))
            launches.append(Launch(name + "_nhwc", (x, xt)))
            x = xt
        if p["split_k"] == 1:
            launches.append(Launch(name, (x, w, y)))
        else:
            ws = BufferRef("workspace", len(workspace))
            workspace.append(WorkspaceSpec("conv_split_k_partials", "float32",
                                           (p["split_k"], geo.groups, geo.m, geo.cog)))
            launches += [Launch(name, (x, w, ws)), Launch(name + "_reduce", (ws, y))]
        return ScheduledTask(module, tuple(launches), tuple(workspace), source=self.name, params=p)


# ------------------------------------------------------------------ the rule
def _registry_op(name: str) -> Callable | None:
    from hidet_framework.extension import plugin_host

    operators = plugin_host().operators
    return operators[name] if name in operators else None


def is_depthwise(x_shape: tuple, w_shape: tuple, groups: int) -> bool:
    return groups > 1 and w_shape[1] == 1 and x_shape[1] == groups


def conv2d_to_igemm(op: Operator) -> list[Tensor] | None:
    """The rewrite (module docstring); None where it does not apply or the operators
    it needs (transpose, reshape, add) are not registered."""
    if op.name != "conv2d":
        return None
    x, weight = op.inputs[0], op.inputs[1]
    if x.dtype not in (dtypes.float16, dtypes.bfloat16) or x.rank != 4 or weight.rank != 4:
        return None
    a = op.attributes
    groups = int(a["groups"])
    if is_depthwise(tuple(x.shape), tuple(weight.shape), groups):
        return None
    reshape, add = _registry_op("reshape"), _registry_op("add")
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if len(op.inputs) > 2 and (reshape is None or add is None):
        return None
    geo = ConvGeometry(n, c, h, w, o, (kh, kw), tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]),
                       groups, "nchw", "nchw")
    try:
        y = conv2d_igemm(x, pack_conv_weight(weight, groups), geo)
        if len(op.inputs) > 2:
            y = add(y, reshape(op.inputs[2], [o, 1, 1]))
    except (ShapeError, TypeError, ValueError):
        return None
    expected = op.outputs[0]
    if tuple(y.shape) != tuple(expected.shape) or y.dtype is not expected.dtype:
        return None
    return [y]


CONV_IGEMM_RULE = RewriteRule(
    "conv2d_implicit_gemm_cuda", ("conv2d",), conv2d_to_igemm, targets=("cuda",),
    description="fp16/bf16 conv2d as one implicit-GEMM tensor-core kernel (no im2col tensor) on cuda")
