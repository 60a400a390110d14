"""Horizontal conv2d fusion: the convolutions that read one input with constant weights
and the same window become one convolution on the weights stacked along the output
channels, each old output a channel slice of the wide one.

    y_i = act(conv2d(x, W_i, b_i))        i = 1..k, W_i [O_i, C, KH, KW] from constants
    ->  Y = act(conv2d(x, [W_1; ...; W_k], [b_1; ...; b_k])),   y_i = Y[:, o_i : o_i + O_i]

Inception-V3's blocks open with two or three 1x1 convolutions of the block input
(Mixed_6*: 192 + 160 + 160 output channels of a 768x17x17 map, three latency-bound
launches of 15 blocks each on 132 SMs) and ResNet-50's first bottleneck opens with its
downsample and its first 1x1 convolution of the same map. What the rule keeps:

- **Members.** The readers of `x` that are a ``conv2d`` with `x` as their input
  (position 0), groups 1, a weight (and bias, if any) computed from constants, x's
  dtype, and the anchor's window: kernel size, stride, padding and dilation equal (so
  the output maps are equal). Other readers of `x` (a convolution of another window,
  a pooling, one with a computed weight) stay as they were; fewer than two members:
  nothing happens. The members' biases are concatenated (zeros for a member without).
- **Activation.** When every member's output is read exactly once, by the same
  attribute-free elementwise activation (``ACTIVATIONS``: relu in the models), and is
  not a graph output, the activation is applied once to the wide output and each
  slice replaces a member's activation, so the wide convolution's kernel applies it
  at its stores. Otherwise (a member without one, one read twice or returned) each
  slice replaces its convolution and what read it follows the slice unchanged.
- **Phase.** Phase 0 like the matmul rule: after the batch-norm folds (phase -1,
  ``rules_fold_conv2d``: a fold must see the convolution, not a slice of it) and
  before the lowering rewrites of phase 1 (cuda implicit GEMM, cpu packing, im2col),
  so every target sees one wide ``conv2d``.

The slices are never copies where the next kernel can graft them: the wide output is
stored once (it has several readers) and a slice with what follows is grafted onto the
next kernel's loads (the concat of the block's branches, the next convolution's input
staging on cuda). Where the rule runs: `DEFAULT_TARGETS` (cpu, cuda, the evaluator);
HIDET_FRAMEWORK_HCONV=0 turns it off everywhere (`ENV`, read at every rewrite).

**On the cpu** (its own rule, ``fuse_horizontal_conv2d_cpu``) a member whose output
would run in a channel-blocked chain (`rules_blocked_chain.would_chain`: its channels
whole SIMD vectors and its output reaching another convolution over elementwise
operators and max pools) is left out of the group: there the packed direct
convolution reads x through a pointer, so a slice of the wide NCHW output is copied out
and the chain after it runs NCHW (ResNet-50's 56x56 stage: the 1x1 64->256 expansions
writing NCHW took 1.75-2.0 ms against 1.1-1.2 written blocked). The others still merge
(two at least): members that only meet in a concat, channel counts of no whole vectors.
"""
from __future__ import annotations

import os
from typing import Any

from hidet_framework.extension import RewriteRule
from hidet_framework.graph import Operator, Tensor

from . import conv, unary
from .rules_horizontal import HorizontalRule, Member, side_by_side, zeros_or

ENV = "HIDET_FRAMEWORK_HCONV"
# Where the rule runs (HIDET_FRAMEWORK_HCONV=0: nowhere), each measured (docs/perf_notes.md,
# "Horizontal conv2d fusion"). cuda: on the H200 (session 8, fp16 batch 1) Inception-V3
# 0.884 -> 0.750 ms (221 -> 183 launches), ResNet-50 0.469 -> 0.467 ms. The cpu: no slower
# (Inception-V3 off/on x1.013 and x1.024, ResNet-50 x1.017, outputs bitwise equal), though
# its packed direct convolution (cpu_conv_template.py) reads x through a pointer, so a
# slice before it cannot be grafted: the slice is copied out and the convolution keeps its
# relu (fusion/chained_task.split_prologues; before session 12 the group fell apart into
# three kernels, Inception-V3 120 -> 139 launches); the wider GEMMs pay for the copies. Since the blocked chains (session 10) that no longer
# holds: session 12 (Zen 4, 1 thread, thread CPU clock, in one process) HCONV=0 was 2.4-3.6%
# faster on ResNet-50 and 3% on Inception-V3, hence the cpu's own rule (docstring).
DEFAULT_TARGETS = ("cpu", "cuda", "evaluator")
CPU_RULE_NAME = "fuse_horizontal_conv2d_cpu"   # the cpu's rule (HorizontalConv2dCpu)
ACTIVATIONS = ("relu", "sigmoid", "tanh")  # elementwise, no attributes: one call on the wide output


def enabled() -> bool:
    """False when HIDET_FRAMEWORK_HCONV is 0 (or false, no, off): the rule is switched off."""
    return os.environ.get(ENV, "").strip().lower() not in {"0", "false", "no", "off"}


def _window(op: Operator, x: Tensor) -> tuple | None:
    """What members share (kernel size, stride, padding, dilation, output map), or None
    when `op` cannot be a member on `x`."""
    if op.name != "conv2d" or len(op.inputs) not in (2, 3) or op.inputs[0] is not x:
        return None
    a, w = op.attributes, op.inputs[1]
    if int(a["groups"]) != 1 or w.rank != 4 or any(t.dtype is not x.dtype for t in op.inputs[1:]) \
            or op.outputs[0].dtype is not x.dtype or not all(t.computed_from_constants() for t in op.inputs[1:]):
        return None
    return (tuple(w.shape[1:]), tuple(a["stride"]), tuple(a["padding"]), tuple(a["dilation"]),
            tuple(op.outputs[0].shape[2:]))


def _activation(op: Operator, uses: Any) -> Operator | None:
    """The lone activation reading `op`'s output, if that is its only use."""
    out = op.outputs[0]
    readers = uses.readers(out)
    if not readers or len(readers) != 1 or uses.is_output(out):
        return None
    act = readers[0][0]
    if act.name not in ACTIVATIONS or len(act.inputs) != 1 or act.attributes \
            or tuple(act.outputs[0].shape) != tuple(out.shape) or act.outputs[0].dtype is not out.dtype:
        return None
    return act


class HorizontalConv2d(HorizontalRule):
    """The rewrite (module docstring)."""

    anchor_name = "conv2d"
    axis = 1

    def members(self, anchor: Operator, uses: Any) -> list[Member] | None:
        x = anchor.inputs[0]
        window = _window(anchor, x)
        readers = uses.readers(x) if window is not None else None
        if readers is None:
            return None
        convs: list[Operator] = []
        for op, pos in readers:
            if pos == 0 and _window(op, x) == window and not any(op is c for c in convs):
                convs.append(op)
        if len(convs) < 2:
            return None
        acts = [_activation(c, uses) for c in convs]
        if any(a is None or a.name != acts[0].name for a in acts):
            acts = [None] * len(convs)
        return [Member(c, a) for c, a in zip(convs, acts)]

    def build(self, x: Tensor, members: list[Member]) -> Tensor | None:
        convs = [m.anchor for m in members]
        weights = [c.inputs[1] for c in convs]
        widths = [int(w.shape[0]) for w in weights]
        bias = None
        if any(len(c.inputs) > 2 for c in convs):
            parts = [zeros_or(c.inputs[2] if len(c.inputs) > 2 else None, n, x.dtype) for c, n in zip(convs, widths)]
            bias = side_by_side(parts, [(n,) for n in widths], axis=0)
        a = convs[0].attributes
        wide = conv.conv2d(x, side_by_side(weights, [tuple(w.shape) for w in weights], axis=0), bias,
                           stride=a["stride"], padding=a["padding"], dilation=a["dilation"], groups=1)
        tail = members[0].tail
        return unary.OPERATORS[tail.name](wide) if tail is not None else wide


class HorizontalConv2dCpu(HorizontalConv2d):
    """The CPU's rule: a member whose output would run in a blocked chain
    (`rules_blocked_chain.would_chain`: whole vectors of channels reaching another
    convolution) stays its own convolution; the others merge (two at least)."""

    def members(self, anchor: Operator, uses: Any) -> list[Member] | None:
        from .rules_blocked_chain import would_chain

        members = super().members(anchor, uses)
        kept = [m for m in members or () if not would_chain((m.tail or m.anchor).outputs[0], uses)]
        return kept if len(kept) >= 2 else None


_RULE, _CPU_RULE = HorizontalConv2d(), HorizontalConv2dCpu()


def _rewrite(op: Operator, uses: Any) -> list[Tensor] | None:
    return _RULE.rewrite(op, uses) if enabled() else None


def _rewrite_cpu(op: Operator, uses: Any) -> list[Tensor] | None:
    return _CPU_RULE.rewrite(op, uses) if enabled() else None


RULES: tuple[RewriteRule, ...] = (
    RewriteRule("fuse_horizontal_conv2d", ("conv2d", *ACTIVATIONS), _rewrite, phase=0, needs_uses=True,
                targets=tuple(t for t in DEFAULT_TARGETS if t != "cpu"),
                description="conv2d siblings on one input with one window as one wide conv2d and channel slices"),
    RewriteRule(CPU_RULE_NAME, ("conv2d", *ACTIVATIONS), _rewrite_cpu, phase=0, needs_uses=True, targets=("cpu",),
                description="the same on the cpu, leaving out the members that would run in a blocked chain"),
)
