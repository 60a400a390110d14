"""hidet-plugin-ops: injective, elementwise, shape and pooling operators, conv2d, and
graph rewrite rules (conv2d → im2col + matmul), contributed to hidet-framework through
the ``hidet_framework`` entry-point group.

Every operator is a Python function taking `Tensor`s (attributes as keyword
arguments) and returning a `Tensor` (or a tuple), built as
``Operator(name, inputs, task, attributes).outputs``; its math is written once, as
compute definitions. Users reach them as ``hidet_framework.ops.<name>``.
"""
from __future__ import annotations

from typing import Callable

from hidet_framework.extension import hookimpl

from . import (
    activations, attention, binary, conv, index_ops, pooling, rewrites, rules_attention, rules_blocked,
    rules_blocked_chain, rules_fold_conv2d, rules_horizontal, rules_horizontal_conv, shape_layout, shape_select, unary,
)


def operators() -> dict[str, Callable]:
    """Every operator this plugin registers, by name."""
    table: dict[str, Callable] = {}
    for family in (unary, binary, shape_layout, shape_select, pooling, conv, activations, index_ops, attention):
        for name, fn in family.OPERATORS.items():
            if name in table:
                raise RuntimeError(f"operator {name!r} is defined twice in hidet_plugin_ops")
            table[name] = fn
    return table


@hookimpl
def register_operators(register) -> None:
    for name, fn in operators().items():
        register(name, fn)


@hookimpl
def register_passes(register) -> None:
    # cpu_conv's rule (CPU only) is tried before the im2col + matmul one: first answer wins
    from .cpu_conv import PACK_RULE

    for rule in (*rules_fold_conv2d.RULES, *rules_horizontal.RULES, *rules_horizontal_conv.RULES, PACK_RULE,
                 *rewrites.RULES, *rules_attention.RULES, *rules_blocked.RULES,
                 *rules_blocked_chain.RULES):
        register(rule.name, rule)


@hookimpl
def register_templates(register) -> None:
    # depthwise conv2d has its own CPU schedule (the matmul rewrite leaves it alone)
    from .cpu_attention import CpuAttention
    from .cpu_depthwise_conv import CpuAvgPool2d, CpuDepthwiseConv2d
    from .cuda_attention import CudaAttention  # imports the CUDA plugin's primitives only when it builds

    register(CpuDepthwiseConv2d.name, CpuDepthwiseConv2d())
    register(CpuAvgPool2d.name, CpuAvgPool2d())   # avg_pool2d: the same kernel, weights 1
    from .cpu_max_pool import CpuMaxPool2d

    register(CpuMaxPool2d.name, CpuMaxPool2d())   # max_pool2d: rows, then columns (cpu_max_pool.py)
    from .cpu_avg_pool import CpuAvgPool2dRows

    register(CpuAvgPool2dRows.name, CpuAvgPool2dRows())   # avg_pool2d the same way, above CpuAvgPool2d
    register(CpuAttention.name, CpuAttention())
    register(CudaAttention.name, CudaAttention())
    # conv2d with weights packed at compile time: direct convolution (cpu_conv.py)
    from .cpu_conv_template import CpuDirectConv2d

    register(CpuDirectConv2d.name, CpuDirectConv2d())
    # the channel-blocked depthwise kernel (cpu_blocked.py, rules_blocked.py)
    from .cpu_depthwise_blocked import CpuDepthwiseBlocked

    register(CpuDepthwiseBlocked.name, CpuDepthwiseBlocked())
    # max_pool2d in the blocked layout, inside a chain of convolutions (rules_blocked_chain.py)
    from .cpu_max_pool_blocked import CpuMaxPool2dBlocked

    register(CpuMaxPool2dBlocked.name, CpuMaxPool2dBlocked())
    from .cpu_avg_pool_blocked import CpuAvgPool2dBlocked

    register(CpuAvgPool2dBlocked.name, CpuAvgPool2dBlocked())   # avg_pool2d in the blocked layout, the same place
    from .cpu_mean_blocked import CpuGlobalMeanBlocked

    register(CpuGlobalMeanBlocked.name, CpuGlobalMeanBlocked())   # the global mean of a blocked chain's end
    from .cpu_concat import CpuConcatRows

    register(CpuConcatRows.name, CpuConcatRows())   # concat a row of the joined axis at a time (long rows)
